"""Accounting: published-style reference values, conservative calibration, monotonicity."""

import itertools

import pytest

from arena.privacy.accounting import ACCOUNTANT_NAMES, accountant_label, calibrate_noise, epsilon

DELTA = 1e-5


@pytest.mark.parametrize("accountant, expected", [("rdp", 7.33), ("pld", 6.78)])
def test_reference_epsilon(accountant, expected):
    assert epsilon(1.5, 0.04, 2250, DELTA, accountant) == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_is_conservative_and_tight(accountant):
    sigma, achieved = calibrate_noise(2.0, 0.04, 2250, DELTA, accountant)
    assert 0.99 * 2.0 <= achieved <= 2.0
    assert epsilon(sigma, 0.04, 2250, DELTA, accountant) == pytest.approx(achieved, rel=1e-12)


def test_full_batch_calibration():
    sigma, achieved = calibrate_noise(1.0, 1.0, 10, DELTA)
    assert 0.99 <= achieved <= 1.0
    assert epsilon(sigma, 1.0, 10, DELTA) == achieved


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
