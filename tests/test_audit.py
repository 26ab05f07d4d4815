"""The DP audit: bounds implied by a claim, the empirical ε lower bound, and a real lying plugin caught in a run."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from arena import leaderboard, tournament
from arena.audit import (
    advantage_bound,
    audit_rows,
    audit_store,
    clopper_pearson,
    empirical_epsilon,
    reconstruction_bound,
    tpr_bound,
    violation_findings,
)
from arena.cli import EXIT_VIOLATION, main
from arena.plan import plan
from arena.store import RunStore
from tests.conftest import write_scenario

DELTA = 1e-5


def scores_for(member_high: int, member_low: int, nonmember_high: int, nonmember_low: int):
    """Two-level scores (1 = flagged at the only informative threshold) and the membership truth."""
    scores = np.array([1.0] * member_high + [0.0] * member_low + [1.0] * nonmember_high + [0.0] * nonmember_low)
    is_member = np.array([1] * (member_high + member_low) + [0] * (nonmember_high + nonmember_low))
    return scores, is_member


def test_bounds_implied_by_a_claim_match_the_tutorial_formulas() -> None:
    assert advantage_bound(1.0, DELTA) == pytest.approx(0.46211715726000974 + DELTA, abs=1e-12)
    assert advantage_bound(0.0, 0.0) == 0.0
    assert tpr_bound(1.0, DELTA, 0.01) == pytest.approx(math.e * 0.01 + DELTA)
    assert tpr_bound(2.0, 0.0, 0.5) == 1.0  # e²·0.5 > 1: a probability bound stops at 1
    assert reconstruction_bound(1.0, DELTA, 0.02) == pytest.approx(math.e * 0.02 + DELTA)
    assert tpr_bound(1000.0, DELTA, 0.001) == 1.0 and tpr_bound(1000.0, DELTA, 0.0) == DELTA  # no overflow


@pytest.mark.parametrize("n", [1, 10, 57])
def test_clopper_pearson_is_scipys_exact_interval(n: int) -> None:
    k = np.arange(n + 1)
    low, high = clopper_pearson(k, n)
    for i in k:
        ci = binomtest(int(i), n).proportion_ci(0.95, method="exact")
        assert low[i] == pytest.approx(ci.low, abs=1e-12) and high[i] == pytest.approx(ci.high, abs=1e-12)
    # The edges have closed forms: nothing observed → [0, 1 − (α/2)^(1/n)], everything → [(α/2)^(1/n), 1].
    assert (low[0], high[0]) == (0.0, pytest.approx(1 - 0.025 ** (1 / n)))
    assert (low[n], high[n]) == (pytest.approx(0.025 ** (1 / n)), 1.0)


def test_perfect_separation_hits_the_fpr_zero_and_tpr_one_edges() -> None:
    # TPR = 100/100 and FPR = 0/100 at one threshold: c = 0.025^(1/100) = 0.963783 is TPR_low and 1 − c
    # is FPR_high, so ε ≥ log((c − δ)/(1 − c)) = log(0.963773/0.036217) = 3.2813 (both directions agree).
    result = empirical_epsilon(*scores_for(100, 0, 0, 100), delta=DELTA)
    assert result.epsilon == pytest.approx(3.2813359732686562, abs=1e-9)
    assert (result.true_positives, result.false_positives) == (100, 0)
    assert (result.n_members, result.n_nonmembers) == (100, 100)


def test_interior_point_uses_the_pessimistic_ends_of_both_intervals() -> None:
    # 60/100 members and 10/100 non-members flagged: TPR_low = 0.49721, FPR_high = 0.17622 (Clopper–Pearson);
    # forward log((0.49721 − δ)/0.17622) = 1.0372 beats backward
    # log((1 − 0.17622 − δ)/(1 − 0.49721)) = 0.4937. The optimistic ends (TPR_high, FPR_low) are never used.
    result = empirical_epsilon(*scores_for(60, 40, 10, 90), delta=DELTA)
    tpr_low = binomtest(60, 100).proportion_ci(0.95, method="exact").low
    fpr_high = binomtest(10, 100).proportion_ci(0.95, method="exact").high
    assert result.epsilon == pytest.approx(math.log((tpr_low - DELTA) / fpr_high), abs=1e-12)
    assert result.epsilon == pytest.approx(1.0372, abs=1e-4)
    assert (result.direction, result.true_positives, result.false_positives) == ("tpr/fpr", 60, 10)


def test_backward_direction_counts_when_all_members_are_flagged() -> None:
    # 100/100 members but 50/100 non-members flagged: forward log(0.96378/0.60168) = 0.471, while
    # backward log((1 − 0.60168 − δ)/(1 − 0.96378)) = 2.3977: the non-members the attack clears are the evidence.
    result = empirical_epsilon(*scores_for(100, 0, 50, 50), delta=DELTA)
    assert result.epsilon == pytest.approx(2.3977132969689388, abs=1e-9)
    assert result.direction == "tnr/fnr"


def test_no_evidence_gives_zero_and_a_large_delta_silences_every_term() -> None:
    scores = np.zeros(200)
    is_member = np.array([1] * 100 + [0] * 100)
    assert empirical_epsilon(scores, is_member, DELTA).epsilon == 0.0
    # δ = 0.99 leaves no positive numerator at any threshold, even for perfect separation.
    silenced = empirical_epsilon(*scores_for(100, 0, 0, 100), delta=0.99)
    assert (silenced.epsilon, silenced.direction) == (0.0, "")


def test_lower_bound_depends_only_on_the_order_of_scores() -> None:
    rng = np.random.default_rng(0)
    scores = np.concatenate([rng.normal(1.0, 1.0, 150), rng.normal(0.0, 1.0, 150)])
    is_member = np.array([1] * 150 + [0] * 150)
    a = empirical_epsilon(scores, is_member, DELTA)
    b = empirical_epsilon(np.exp(3 * scores), is_member, DELTA)
    assert a == b and a.epsilon > 0


def claimed_row(key: str, epsilon: float | None, game: str = "membership", status: str = "ok", **metrics) -> dict:
    claim = None if epsilon is None else {"epsilon": epsilon, "delta": DELTA}
    return {"key": key, "track": "t", "game": game, "defense_label": "d", "attack": "a", "attack_label": "a", "seed": 0,
            "status": status, "claim": claim, "metrics": metrics}


def test_audit_rows_covers_claiming_ok_matchups_and_flags_a_bound_above_the_claim() -> None:
    separated = dict(zip(("scores", "is_member"), scores_for(100, 0, 0, 100)))
    arrays = {"weak": separated, "strong": separated}
    rows = [
        claimed_row("weak", 1.0, advantage=1.0),  # ε ≥ 3.28 refutes a claim of 1
        claimed_row("strong", 5.0, advantage=1.0),  # ... but not a claim of 5
        claimed_row("plain", None),  # no claim: nothing to audit
        claimed_row("broken", 1.0, status="failed"),
        claimed_row("lost", 1.0),  # claims, but its scores are missing
        claimed_row("recon", 1.0, game="reconstruction", success_rate=0.5, n_targets=50, kappa=0.1),
        claimed_row("recon-no-kappa", 1.0, game="reconstruction", success_rate=0.5, n_targets=50),
    ]
    audit = audit_rows(rows, arrays.get)
    assert [a.key for a in audit.membership] == ["weak", "strong"]
    assert audit.violation_keys() == {"weak"}
    assert audit.missing_arrays == ("lost",)
    weak = audit.membership[0]
    assert weak.advantage_bound == pytest.approx(advantage_bound(1.0, DELTA))
    assert [level for level, _, _ in weak.tpr_at_fpr] == [0.1, 0.01, 0.001]
    assert "empirical ε ≥ 3.281 > claimed ε = 1.000" in violation_findings(audit)["weak"]
    (recon,) = audit.reconstruction
    assert recon.allowed == pytest.approx(math.e * 0.1 + DELTA)
    # 25/50 successes: the 95% low end 0.355 exceeds the 0.272 the claim allows.
    assert recon.success_low == pytest.approx(binomtest(25, 50).proportion_ci(0.95, method="exact").low)
    assert recon.exceeds


LIAR = """
from pydantic import BaseModel, ConfigDict, PositiveFloat

from arena.defense import Claim, Defense, Fit
from arena.engine.trainer import train
from arena.hookspecs import hookimpl


class LiarParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    epsilon: PositiveFloat = 1.0
    delta: float = 1e-5


class ClaimsDPAddsNoNoise(Defense):
    '''Trains exactly like non-private training, yet claims (epsilon, delta)-DP.'''

    name = "claims-dp-adds-no-noise"
    Params = LiarParams

    def target_epsilon(self):
        return self.params.epsilon

    def target_delta(self):
        return self.params.delta

    def fit(self, task):
        state = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds)
        claim = Claim(epsilon=self.params.epsilon, delta=self.params.delta, accountant="none (false claim)")
        return Fit(state, claim)


@hookimpl
def register_defenses(register):
    register(ClaimsDPAddsNoNoise)
"""

LIAR_SCENARIO = """
name: liar
seeds: [0]
tracks:
  - name: digits-mlp
    dataset: {name: digits}
    model: {name: mlp, hidden: [256], activation: relu}
    training: {epochs: 100, batch_size: 32, lr: 0.1, momentum: 0.9}
    game: {name: membership, members: 200}
    defenses:
      - {name: nonprivate}
      - {name: claims-dp-adds-no-noise, epsilon: 1.0, delta: 1.0e-5}
    attacks:
      - {name: threshold-mia}
"""


def test_a_plugin_claiming_dp_without_noise_is_caught_by_a_real_tournament(plugin_dist, tmp_path, capsys) -> None:
    plugin_dist("arena-liar", "arena_liar_plugin", LIAR)
    scenario = write_scenario(tmp_path / "liar.yaml", LIAR_SCENARIO)
    store = RunStore(tmp_path / "run")
    meter = io.StringIO()
    rows = tournament.run(plan([scenario]), store, serial=True, progress=meter)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert "matchups 2/2 done, 0 running, 0 failed" in meter.getvalue()

    audit = audit_store(store, rows)
    (liar,) = audit.membership  # the non-private defense claims nothing and is not audited
    assert liar.defense_label == "claims-dp-adds-no-noise(eps=1)" and liar.claimed_epsilon == 1.0
    assert liar.violation and liar.lower_bound.epsilon > 2.0  # well above the claim, not a borderline call
    assert (liar.lower_bound.n_members, liar.lower_bound.n_nonmembers) == (200, 200)

    board = leaderboard.render_table(leaderboard.build(rows, violation_findings(audit)))
    assert "VIOLATION×1" in board and "DP VIOLATIONS" in board

    # The command line resumes the finished run, reports the violation and exits with status 3.
    assert main(["run", str(scenario), "--out", str(store.root), "--serial", "--no-report"]) == EXIT_VIOLATION
    out = capsys.readouterr().out
    assert "1 violation(s)" in out and "claims-dp-adds-no-noise(eps=1) vs threshold-mia seed 0" in out
    assert not (store.root / "report").exists()
