"""The report's audited ROC curves over the claimed mechanism's trade-off curve, for a small hand-written run: an
audit-game track (full-batch DP-SGD claims, add/remove) and a membership track (a subsampled DP-SGD claim,
replace-one; a non-private defense that gets no panel). The figure is captured as drawn and its bound lines are
compared with arena.privacy.tradeoff for the claim of each panel."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import norm
from sklearn.metrics import roc_curve

from arena.games.membership.metrics import membership_metrics
from arena.pipeline.store import RunStore
from arena.privacy.tradeoff import claim_tradeoff, pld_profile, tradeoff_from_profile
from arena.results.report import plots

pytestmark = pytest.mark.slow  # the module's run (tradeoff_run) draws a report for seconds, before any test

DELTA = 1e-5
AUDIT_TRACK, MIA_TRACK = "tiny-audit", "tiny-mia"
# full batch, 50 steps: μ = √50/σ (add/remove); the ε of each σ at δ = 1e-5 (Gaussian DP, rounded)
AUDIT_CLAIMS = {2.0: (14.2, 1.98), 8.0: (4.27, 7.95)}
MIA_CLAIM = {"epsilon": 7.34, "delta": DELTA, "accountant": "dp_accounting.pld 0.6.0", "noise_multiplier": 4.22,
             "sample_rate": 0.32, "steps": 400, "mechanism": "DP-SGD"}


def _claim(sigma: float, eps: float) -> dict[str, Any]:
    return {"epsilon": eps, "delta": DELTA, "accountant": "dp_accounting.pld 0.6.0", "noise_multiplier": sigma,
            "sample_rate": 1.0, "steps": 50, "mechanism": "DP-SGD", "target_epsilon": eps}


def _audit_row(store: RunStore, target: float) -> dict[str, Any]:
    """An audit row with 4 models × 1000 gradient canaries whose scores are Gaussian at the claim's own μ, and
    300 input canaries of half that shift."""
    sigma, eps = AUDIT_CLAIMS[target]
    mu = math.sqrt(50) / sigma
    rng = np.random.default_rng(int(target))
    g_truth = rng.integers(0, 2, size=(4, 1000))
    i_truth = rng.integers(0, 2, size=(4, 300))
    key = f"audit-{target:g}"
    store.save_arrays(key, {
        "gradient_scores": torch.from_numpy(rng.normal(size=g_truth.shape) + mu * g_truth),
        "gradient_truth": torch.from_numpy(g_truth.astype(np.int8)),
        "input_scores": torch.from_numpy(rng.normal(size=i_truth.shape) + mu / 2 * i_truth),
        "input_truth": torch.from_numpy(i_truth.astype(np.int8)),
    })
    return {
        "key": key, "track": AUDIT_TRACK, "game": "audit", "defense": "dpsgd",
        "defense_label": f"dpsgd(eps={target:g})",
        "epsilon": target, "delta": DELTA, "attack": "canary-auditor", "attack_label": "canary-auditor", "seed": 0,
        "status": "ok", "utility": 0.8, "notes": [], "error": None, "seconds": 1.0, "trained_models": 4,
        "claim": _claim(sigma, eps),
        "metrics": {"eps_one_run": 0.5, "claimed_epsilon": eps, "delta": DELTA, "mechanism_epsilon": eps,
                    "mechanism_noise_free": False, "claim_consistent": True, "models": 4, "alpha": 0.05,
                    "input_kind": "mislabelled", "gradient_canaries": 4000, "input_canaries": 1200},
        "metric_info": {"eps_one_run": {"bounds": [0.0, None], "higher_is_better": True}},
    }


def _mia_row(store: RunStore, defense: str, claim: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(100 + seed)
    is_member = np.array([1] * 500 + [0] * 500, dtype=np.int8)
    scores = rng.normal(size=1000) + 0.8 * is_member
    metrics, notes = membership_metrics(scores, is_member, scores > 0.4)
    key = f"mia-{defense}-{seed}"
    store.save_arrays(key, {"scores": torch.from_numpy(scores), "is_member": torch.from_numpy(is_member)})
    return {
        "key": key, "track": MIA_TRACK, "game": "membership", "defense": defense,
        "defense_label": defense if claim is None else f"{defense}(eps=8)", "epsilon": None if claim is None else 8.0,
        "delta": None if claim is None else DELTA, "attack": "threshold-mia", "attack_label": "threshold-mia",
        "seed": seed, "status": "ok", "utility": 0.9, "metrics": metrics, "notes": notes, "claim": claim,
        "error": None, "seconds": 1.0, "trained_models": 1,
    }


@pytest.fixture(scope="module")
def tradeoff_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The small run written by hand, its report rendered once; every figure captured by its stem as drawn."""
    from tests.results.report.conftest import secret_store

    store = secret_store(tmp_path_factory.mktemp("tradeoff") / "run")
    rows = [_audit_row(store, 8.0), _audit_row(store, 2.0)]
    rows += [_mia_row(store, "dpsgd", MIA_CLAIM, seed) for seed in (0, 1)]
    rows += [_mia_row(store, "nonprivate", None, seed) for seed in (0, 1)]
    for row in rows:
        store.append_result(row)
    captured: dict[str, Any] = {}
    original = plots.Figures.save

    def save(self: plots.Figures, fig: Any, stem: str) -> bytes:
        captured[stem] = fig
        return original(self, fig, stem)

    from arena.results.report.html import write_report

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots.Figures, "save", save)
        page = write_report(store.root, ("svg", "pdf")).read_text(encoding="utf-8")
    return {"store": store, "page": page, "figures": captured, "rows": rows}


def _bound_lines(fig: Any, kind: str) -> list[tuple[Any, np.ndarray, np.ndarray]]:
    """(axes, FPR, TPR) of each panel's line with gid ``<kind>-<i>``, in panel order."""
    out = []
    for ax in fig.axes:
        for line in ax.get_lines():
            gid = line.get_gid() or ""
            if gid.startswith(f"{kind}-"):
                out.append((ax, np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)))
    return out


def test_the_tradeoff_figure_is_in_the_page_and_beside_it(tradeoff_run) -> None:
    page, root = tradeoff_run["page"], tradeoff_run["store"].root
    assert page.count("Audited ROC curves over the claimed mechanism") == 2  # the audit track and the membership one
    assert 'alt="audited ROC curves over the claimed trade-off curve for track tiny-audit"' in page
    assert 'alt="audited ROC curves over the claimed trade-off curve for track tiny-mia"' in page
    for track in (AUDIT_TRACK, MIA_TRACK):
        for fmt in ("svg", "pdf"):
            assert (root / "report" / "figures" / f"{track}-tradeoff-roc.{fmt}").is_file()
        assert f"{track}-tradeoff-roc" in tradeoff_run["figures"]


def test_audit_panels_draw_the_add_remove_gaussian_curve_of_each_claim(tradeoff_run) -> None:
    fig = tradeoff_run["figures"][f"{AUDIT_TRACK}-tradeoff-roc"]
    lines = _bound_lines(fig, "mechanism-tradeoff")
    assert [ax.get_title() for ax, _, _ in lines] == ["dpsgd(eps=2) vs canary-auditor, seed 0",
                                                       "dpsgd(eps=8) vs canary-auditor, seed 0"]  # ε order
    for (_ax, fpr, tpr), target in zip(lines, (2.0, 8.0)):
        sigma, eps = AUDIT_CLAIMS[target]
        # the curve drawn is arena.privacy.tradeoff's for that claim under add/remove ...
        np.testing.assert_allclose(tpr, claim_tradeoff(_claim(sigma, eps), "add_remove").tpr_bound(fpr), rtol=1e-12)
        # ... which is Gaussian DP with μ = √T/σ, by hand
        np.testing.assert_allclose(tpr, 1.0 - norm.cdf(norm.isf(fpr) - math.sqrt(50) / sigma), atol=1e-12)
        assert fpr[0] == pytest.approx(1 / 2000, rel=0.2) and fpr[-1] == 1.0  # from the canaries' resolution to 1
    for (_, fpr, tpr), target in zip(_bound_lines(fig, "eps-delta-region"), (2.0, 8.0)):
        eps = AUDIT_CLAIMS[target][1]
        np.testing.assert_allclose(tpr, np.minimum(np.minimum(math.exp(eps) * fpr + DELTA,
                                                              1 - math.exp(-eps) * (1 - DELTA - fpr)), 1.0))


def test_audit_rocs_are_drawn_from_the_saved_canary_arrays(tradeoff_run) -> None:
    fig = tradeoff_run["figures"][f"{AUDIT_TRACK}-tradeoff-roc"]
    saved = tradeoff_run["store"].load_arrays("audit-8")
    ax = fig.axes[1]
    (gradient,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("gradient canaries")]
    assert gradient.get_label() == f"gradient canaries ({int(saved['gradient_truth'].sum())} in + "\
                                   f"{int((saved['gradient_truth'] == 0).sum())} out)"
    truth = saved["gradient_truth"].numpy().reshape(-1).astype(bool)
    fpr, tpr, _ = roc_curve(truth, saved["gradient_scores"].numpy().reshape(-1))
    x = np.asarray(gradient.get_xdata())
    expected = np.maximum(plots.roc_at(fpr, tpr, x), 1.0 / truth.sum())
    np.testing.assert_allclose(gradient.get_ydata(), expected)
    # canaries shifted by the claim's own μ: the measured TPR at 10% FPR is near the bound, not far above it
    at10 = float(plots.roc_at(fpr, tpr, np.array([0.1]))[0])
    bound10 = 1 - norm.cdf(norm.isf(0.1) - math.sqrt(50) / AUDIT_CLAIMS[8.0][0])
    assert abs(at10 - bound10) < 0.05


def test_membership_panels_draw_the_replace_one_pld_curve_and_skip_non_private(tradeoff_run) -> None:
    fig = tradeoff_run["figures"][f"{MIA_TRACK}-tradeoff-roc"]
    lines = _bound_lines(fig, "mechanism-tradeoff")
    assert [ax.get_title() for ax, _, _ in lines] == ["dpsgd(eps=8) vs threshold-mia"]  # nonprivate: no panel
    ((ax, fpr, tpr),) = lines
    eps, deltas = pld_profile(4.22, 0.32, 400, "replace_one")
    np.testing.assert_allclose(tpr, 1.0 - tradeoff_from_profile(fpr, eps, deltas), rtol=1e-12)
    # the relation the game plays: replace-one admits strictly more than add/remove at some FPR
    assert np.max(tpr - claim_tradeoff(MIA_CLAIM, "add_remove").tpr_bound(fpr)) > 0.01
    seeds = [ln.get_label() for ln in ax.get_lines() if ln.get_label().startswith("seed")]
    assert seeds == ["seed 0 (500 in + 500 out)", "seed 1 (500 in + 500 out)"]
    # the (ε, δ) region is that of the replace-one ε (≈ 16.8), not the claimed add/remove 7.34
    ((_, rfpr, rtpr),) = _bound_lines(fig, "eps-delta-region")
    rel = claim_tradeoff(MIA_CLAIM, "replace_one")
    assert rel.epsilon == pytest.approx(16.79, abs=0.01)
    np.testing.assert_allclose(rtpr, rel.eps_delta_tpr_bound(rfpr))


def test_the_table_beside_the_figure_reads_the_same_bounds(tradeoff_run) -> None:
    page = tradeoff_run["page"]
    part = page[page.index("Audited ROC curves over the claimed mechanism"):]
    table = part[part.index("<table>") : part.index("</table>")]
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
    rows = [r for r in rows if r]
    assert [r[:2] for r in rows] == [["dpsgd(eps=2) vs canary-auditor, seed 0", "gradient canaries"],
                                    ["dpsgd(eps=2) vs canary-auditor, seed 0", "input canaries (mislabelled)"],
                                    ["dpsgd(eps=8) vs canary-auditor, seed 0", "gradient canaries"],
                                    ["dpsgd(eps=8) vs canary-auditor, seed 0", "input canaries (mislabelled)"]]
    for row, target in zip(rows[::2], (2.0, 8.0)):
        bound = claim_tradeoff(_claim(*AUDIT_CLAIMS[target]), "add_remove")
        for j, level in enumerate((0.001, 0.01, 0.1)):
            measured, mech, region = row[3 + 3 * j : 6 + 3 * j]
            assert mech == f"{float(bound.tpr_bound(level)):.4f}"
            assert region == f"{float(bound.eps_delta_tpr_bound(level)):.4f}"
            # about 2000 canaries out resolve 0.1% (1/2000 ≤ 0.001)
            assert measured != "n/r"


def test_the_table_says_n_r_where_the_non_members_cannot_resolve_the_level(tradeoff_run) -> None:
    page = tradeoff_run["page"]
    part = page[page.index(f"claimed trade-off curve for track {MIA_TRACK}\"") :]
    table = part[part.index("<table>") : part.index("</table>")]
    rows = [r for r in (re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table, re.S)) if r]
    assert [r[1] for r in rows] == ["seed 0", "seed 1"]
    for row in rows:
        assert row[2] == "500 + 500"
        assert row[3] == "n/r"  # 1/500 > 0.1%
        assert row[6] != "n/r" and row[9] != "n/r"  # 1% and 10% resolve
