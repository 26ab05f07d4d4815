"""Composition of a release's mechanisms by the PLD accountant, against closed forms."""

import math

import pytest
from scipy.optimize import brentq

from arena.privacy.accounting import epsilon_under
from arena.privacy.composition import composed_epsilon
from arena.privacy.gdp import gdp_epsilon

DELTA = 1e-5


@pytest.mark.slow  # one subsampled PLD composition: about 2 s of CPU
def test_one_run_composes_to_its_own_epsilon():
    assert composed_epsilon([(1.1, 0.2, 50)], [], DELTA) == pytest.approx(epsilon_under(1.1, 0.2, 50, DELTA), rel=1e-6)


def test_two_full_batch_runs_are_one_gaussian_mechanism_of_mu_root_2t_over_sigma():
    """Full batch, T steps at σ, twice: μ-GDP with μ = √(2T)/σ (Dong, Roth & Su 2019), so ε(δ) is the GDP curve's;
    e.g. σ = 20, T = 50: μ = √100/20 = 0.5. Twice the runs is well above one run's ε, never its maximum."""
    twice = composed_epsilon([(20.0, 1.0, 50), (20.0, 1.0, 50)], [], DELTA)
    assert twice == pytest.approx(gdp_epsilon(0.5, DELTA), rel=2e-3)
    assert twice > 1.3 * composed_epsilon([(20.0, 1.0, 50)], [], DELTA)


def test_laplace_follows_its_privacy_profile():
    """Lap(b) on a sensitivity-1 query, ε₀ = 1/b: δ(ε) = 1 − exp((ε − ε₀)/2) for 0 ≤ ε ≤ ε₀ (the hockey-stick
    divergence of two Laplaces one apart), so ε(δ) = ε₀ + 2 ln(1 − δ); composing two is above either alone."""
    eps0 = 2.0
    assert composed_epsilon([], [1 / eps0], DELTA) == pytest.approx(eps0 + 2 * math.log1p(-DELTA), abs=2e-3)
    delta = 0.1  # where the two differ by far more than the PLD grid
    assert composed_epsilon([], [1 / eps0], delta) == pytest.approx(eps0 + 2 * math.log1p(-delta), abs=2e-3)
    both = composed_epsilon([(2.0, 1.0, 4)], [1 / eps0], DELTA)
    assert both > max(eps0, composed_epsilon([(2.0, 1.0, 4)], [], DELTA))


def test_a_mechanism_without_noise_makes_the_release_infinitely_leaky():
    assert composed_epsilon([(1.0, 0.1, 10), (0.0, 1.0, 3)], [], DELTA) == math.inf
    assert composed_epsilon([(1.0, 0.1, 10)], [0.0], DELTA) == math.inf
    assert composed_epsilon([], [], DELTA) == 0.0 and composed_epsilon([(0.0, 1.0, 0)], [], DELTA) == 0.0


def test_the_laplace_closed_form_used_above_is_right():
    """The profile of Lap(1/ε₀) by numerical integration of (p − e^ε q)₊, at one ε."""
    eps0, eps = 2.0, 1.0
    b = 1 / eps0
    # p = Lap(0, b), q = Lap(1, b); the density ratio p/q exceeds e^ε left of x*, where (|x−1| − |x|)/b = ε
    x_star = brentq(lambda x: (abs(x - 1) - abs(x)) / b - eps, -0.5, 1.5)
    cdf = lambda x, m: 0.5 * math.exp((x - m) / b) if x < m else 1 - 0.5 * math.exp(-(x - m) / b)  # noqa: E731
    delta = cdf(x_star, 0.0) - math.exp(eps) * cdf(x_star, 1.0)
    assert delta == pytest.approx(1 - math.exp((eps - eps0) / 2), rel=1e-9)
