"""Accounting: published-style reference values, conservative calibration, monotonicity, and ε per neighbouring
relation against dp_accounting called directly."""

import itertools

import dp_accounting
import pytest
from dp_accounting import pld, rdp

from arena.privacy.accounting import ACCOUNTANT_NAMES, accountant_label, calibrate_noise, epsilon, epsilon_under

DELTA = 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("accountant, expected", [("rdp", 7.33), ("pld", 6.78)])
def test_reference_epsilon(accountant, expected):
    assert epsilon(1.5, 0.04, 2250, DELTA, accountant) == pytest.approx(expected, rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_is_conservative_and_tight(accountant):
    sigma, achieved = calibrate_noise(2.0, 0.04, 2250, DELTA, accountant)
    assert 0.99 * 2.0 <= achieved <= 2.0
    assert epsilon(sigma, 0.04, 2250, DELTA, accountant) == pytest.approx(achieved, rel=1e-12)


def test_full_batch_calibration():
    sigma, achieved = calibrate_noise(1.0, 1.0, 10, DELTA)
    assert 0.99 <= achieved <= 1.0
    assert epsilon(sigma, 1.0, 10, DELTA) == achieved


@pytest.mark.slow
def test_epsilon_decreases_with_noise_and_grows_with_steps():
    eps = [epsilon(s, 0.04, 1000, DELTA) for s in (0.8, 1.0, 1.5, 2.0, 4.0)]
    assert all(a > b for a, b in itertools.pairwise(eps))
    assert epsilon(1.0, 0.04, 2000, DELTA) > epsilon(1.0, 0.04, 1000, DELTA)
    assert epsilon(1.0, 1.0, 10, DELTA) > epsilon(1.0, 0.5, 10, DELTA)


def test_names_report_library_and_version():
    assert set(ACCOUNTANT_NAMES) == {"rdp", "pld"}
    assert accountant_label("pld").startswith("dp_accounting.pld ")
    with pytest.raises(ValueError):
        epsilon(1.0, 0.1, 10, DELTA, "gdp")


# ------------------------------------------------------------------------------------------ ε per relation


def _direct(sigma: float, q: float, steps: int, delta: float, relation, accountant) -> float:
    acc = (pld.PLDAccountant if accountant == "pld" else rdp.RdpAccountant)(neighboring_relation=relation)
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return acc.get_epsilon(delta)


@pytest.mark.slow
def test_epsilon_under_both_relations_is_dp_accountings_and_replace_one_is_larger() -> None:
    rel = dp_accounting.NeighboringRelation
    args = (1.5, 0.2, 10, DELTA)
    add_pld = epsilon_under(*args, relation="add_remove", accountant="pld")
    rep_pld = epsilon_under(*args, relation="replace_one", accountant="pld")
    add_rdp = epsilon_under(*args, relation="add_remove", accountant="rdp")
    assert add_pld == pytest.approx(_direct(*args, rel.ADD_OR_REMOVE_ONE, "pld"), rel=1e-12)
    assert rep_pld == pytest.approx(_direct(*args, rel.REPLACE_ONE, "pld"), rel=1e-12)
    assert add_rdp == pytest.approx(_direct(*args, rel.ADD_OR_REMOVE_ONE, "rdp"), rel=1e-12)
    assert rep_pld > add_pld and add_rdp >= add_pld  # a swap leaks more; RDP is the looser accountant
    # Without subsampling, replace-one is the Gaussian at twice the sensitivity: σ/2 under add/remove, in both
    # accountants (dp_accounting's RDP ignores the relation for a GaussianDpEvent, so it is computed that way).
    # (PLD does the same; checked by hand, left out for time: each PLD call takes about a second.)
    assert epsilon_under(2.0, 1.0, 3, DELTA, relation="replace_one", accountant="rdp") == pytest.approx(
        epsilon_under(1.0, 1.0, 3, DELTA, relation="add_remove", accountant="rdp"), rel=1e-9)
    with pytest.raises(ValueError, match="use 'pld'"):
        epsilon_under(*args, relation="replace_one", accountant="rdp")


@pytest.mark.slow
def test_the_issues_figure_replace_one_sixteen_point_eight_against_seven_point_nine_add_remove() -> None:
    # Issue 12: σ = 4.22, q = 0.32, 400 steps, δ = 1e-5. The 7.9 claimed is the RDP add/remove ε (PLD: 7.34);
    # the membership game's swap is replace-one, where PLD gives 16.79.
    args = (4.22, 0.32, 400, DELTA)
    assert epsilon_under(*args, relation="replace_one", accountant="pld") == pytest.approx(16.79, abs=0.01)
    assert epsilon_under(*args, relation="add_remove", accountant="rdp") == pytest.approx(7.93, abs=0.01)
    assert epsilon_under(*args, relation="add_remove", accountant="pld") == pytest.approx(7.34, abs=0.01)
    assert epsilon_under(*args, relation="add_remove", accountant="rdp") == epsilon(*args, "rdp")  # one accountant
