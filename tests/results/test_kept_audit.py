"""The DP audit kept in a run directory (``arena.results.kept``): read back equal to what was computed, audited again
when the rows or the audit code change, never read into a class outside the arena, and never kept when it holds
what the codec cannot write."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from arena.games.audit.rule import CanaryAuditRecord
from arena.privacy.fdp_one_run import FdpBound
from arena.privacy.one_run import OneRunBound
from arena.privacy.sigma_fit import SigmaFit
from arena.results import kept
from arena.results.audit import Audit, GameAudit

ROWS = [{"key": "k1", "game": "audit", "status": "ok", "metrics": {"x": 1.0}}]


def _audit(epsilon: float = 3.25) -> Audit:
    one = OneRunBound(epsilon=epsilon, alpha=0.01, delta=1e-5, m=32768, k_plus=328, k_minus=328, guesses=656,
                      correct=429, grid_size=14, max_certifiable=6.47)
    fdp = FdpBound(claim_refuted=False, gdp_epsilon=0.1 + 0.2, max_gdp_epsilon=math.inf, alpha=0.01, delta=1e-5,
                   m=4096, k_plus=1, k_minus=0, guesses=1, correct=1)
    sigma = SigmaFit(math.inf, 1.5, 1.2, 0.01, 0.0, 0.2, 250, 0.01, 1e-5, 30000, 35536)
    record = CanaryAuditRecord(key="k1", track="t", defense_label="dpsgd(eps=4)", attack="canary-auditor", seed=0,
                               claimed_epsilon=3.967, delta=1e-5, bounds=(("gradient", one),), gaussian=None,
                               estimates={"gradient_eps_one_run": 0.47, "gradient_eps_gdp_fit": None}, models=128,
                               alpha=0.05, mechanism_epsilon=None, noise_free=False, claim_consistent=True,
                               fdp=(("input", fdp),), sigma=sigma)
    game = GameAudit(game="audit", records=(record,), violations=(record,), findings={"k1": "refuted"},
                     lines=("a line",), missing=("k2",), tested=1)
    return Audit({"audit": game})


def test_a_kept_audit_reads_back_equal_and_is_not_computed_again(tmp_path) -> None:
    calls: list[int] = []

    def compute() -> Audit:
        calls.append(1)
        return _audit()

    first = kept.kept_audit(tmp_path, ROWS, compute)
    again = kept.kept_audit(tmp_path, ROWS, compute)
    assert calls == [1] and again == first == _audit()  # floats, ∞, None, tuples and mappings as they were
    record = again.audit[0]
    assert isinstance(record, CanaryAuditRecord) and isinstance(record.bounds, tuple)
    assert record.sigma.epsilon == math.inf and record.fdp[0][1].gdp_epsilon == 0.1 + 0.2


def test_other_rows_or_a_damaged_file_are_audited_again(tmp_path) -> None:
    calls: list[float] = []

    def compute(eps: float):
        def run() -> Audit:
            calls.append(eps)
            return _audit(eps)
        return run

    kept.kept_audit(tmp_path, ROWS, compute(1.0))
    changed = [{**ROWS[0], "metrics": {"x": 2.0}}]  # a re-played matchup
    assert kept.kept_audit(tmp_path, changed, compute(2.0)).audit[0].bounds[0][1].epsilon == 2.0
    (tmp_path / kept.FILE).write_text("{not json", encoding="utf-8")
    assert kept.kept_audit(tmp_path, changed, compute(3.0)).audit[0].bounds[0][1].epsilon == 3.0
    assert calls == [1.0, 2.0, 3.0]


def test_a_file_naming_a_class_outside_the_arena_is_never_read(tmp_path) -> None:
    kept.kept_audit(tmp_path, ROWS, _audit)
    path = tmp_path / kept.FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    data["audit"]["dataclass"] = "subprocess:Popen"
    path.write_text(json.dumps(data), encoding="utf-8")
    calls: list[int] = []

    def compute() -> Audit:
        calls.append(1)
        return _audit(5.0)

    assert kept.kept_audit(tmp_path, ROWS, compute).audit[0].bounds[0][1].epsilon == 5.0 and calls == [1]


@dataclass(frozen=True)
class Foreign:
    """A third-party game's record: not a dataclass of the arena."""

    value: float


def test_an_audit_holding_a_foreign_record_is_computed_every_time_and_never_kept(tmp_path) -> None:
    calls: list[int] = []

    def compute() -> Audit:
        calls.append(1)
        return Audit({"theirs": GameAudit(game="theirs", records=(Foreign(1.0),), tested=1)})

    assert kept.kept_audit(tmp_path, ROWS, compute).theirs == (Foreign(1.0),)
    assert kept.kept_audit(tmp_path, ROWS, compute).theirs == (Foreign(1.0),)
    assert calls == [1, 1] and not (tmp_path / kept.FILE).exists()
