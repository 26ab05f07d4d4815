"""Privacy accounting for (Poisson-subsampled) Gaussian DP-SGD with Google's dp_accounting: the ε a claim states.

``epsilon`` and ``calibrate_noise`` account add/remove-one neighbouring; ``epsilon_under`` either relation. q = 1 is
the plain Gaussian mechanism composed `steps` times. Every ε here is an upper bound from dp_accounting (RDP's
conversion, or the PLD's pessimistic discretisation), so a claim stated with it is proved.
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import version
from typing import TYPE_CHECKING, Literal, get_args

from arena.privacy import noise_store

if TYPE_CHECKING:
    import dp_accounting

Accountant = Literal["rdp", "pld"]

ACCOUNTANT_NAMES: dict[str, str] = {"rdp": "dp_accounting.rdp", "pld": "dp_accounting.pld"}

# The RDP accountant warns when it drops an order whose series does not converge; dropping orders can only
# make the reported ε larger (conservative), so the warning is noise in a tournament's output.
logging.getLogger("absl").setLevel(logging.ERROR)

_MAX_EVALS = 200


def accountant_label(accountant: Accountant) -> str:
    """Name and library version for reports, e.g. 'dp_accounting.rdp 0.6.0'."""
    return f"{ACCOUNTANT_NAMES[accountant]} {version('dp-accounting')}"


def _event(noise_multiplier: float, q: float, steps: int) -> dp_accounting.DpEvent:
    import dp_accounting

    gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
    step = gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)
    return dp_accounting.SelfComposedDpEvent(step, steps)


def epsilon(
    noise_multiplier: float, q: float, steps: int, delta: float, accountant: Accountant = "rdp"
) -> float:
    """epsilon at `delta` after `steps` Gaussian steps with noise std / clip = noise_multiplier, under add/remove
    (``epsilon_under`` with relation "add_remove")."""
    return epsilon_under(noise_multiplier, q, steps, delta, accountant=accountant, relation="add_remove")


def calibrate_noise(
    target_epsilon: float, q: float, steps: int, delta: float, accountant: Accountant = "rdp"
) -> tuple[float, float]:
    """(sigma, achieved epsilon), 0.99 * target <= achieved <= target, by bisection on log sigma.

    A σ this configuration was calibrated to before (``noise_store``, shared by the processes of a run and by
    later runs) is re-checked with one accountant call and used if it meets that contract; else the bisection runs.
    """
    if target_epsilon <= 0 or steps < 1:
        raise ValueError("need target_epsilon > 0 and steps >= 1")
    key = calibration_key(target_epsilon, q, steps, delta, accountant)
    stored = noise_store.load_sigma(key)
    if stored is not None:
        achieved = epsilon(stored, q, steps, delta, accountant)
        if 0.99 * target_epsilon <= achieved <= target_epsilon:
            return stored, achieved
    sigma, achieved = _bisect_noise(target_epsilon, q, steps, delta, accountant)
    noise_store.store_sigma(key, sigma)
    return sigma, achieved


def calibration_key(target_epsilon: float, q: float, steps: int, delta: float, accountant: Accountant) -> tuple:
    """What a calibration depends on, the accountant library's version included (``noise_store``'s key)."""
    return ("calibrate_noise", version("dp-accounting"), accountant, float(target_epsilon), float(q), int(steps),
            float(delta))


def _bisect_noise(
    target_epsilon: float, q: float, steps: int, delta: float, accountant: Accountant
) -> tuple[float, float]:
    """Epsilon decreases in sigma; the bracket keeps eps(lo) > target >= eps(hi) and returns hi."""
    eps = functools.cache(lambda sigma: epsilon(sigma, q, steps, delta, accountant))
    hi = 1.0
    for _ in range(_MAX_EVALS):
        if eps(hi) <= target_epsilon:
            break
        hi *= 2
    lo = hi / 2
    for _ in range(_MAX_EVALS):
        if eps(lo) > target_epsilon:
            break
        lo, hi = lo / 2, lo
    for _ in range(_MAX_EVALS):
        if eps(hi) >= 0.99 * target_epsilon:
            return hi, eps(hi)
        mid = (lo * hi) ** 0.5
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    raise RuntimeError(f"could not calibrate sigma to epsilon {target_epsilon} within 1%")


# Neighbouring relations. Add/remove-one: D' = D ∪ {x} or D \ {x}. Replace-one: D' = D with one record swapped
# for another (|D| = |D'|), the relation a game plays when exactly one of a member/non-member pair trains. For the
# Gaussian mechanism replace-one doubles the sensitivity; for the Poisson-subsampled Gaussian it is not a simple
# rescaling, and only the PLD accountant of dp_accounting supports it (its RDP accountant raises for that event).
# dp_accounting's PLD accountant doubles the Gaussian's sensitivity under REPLACE_ONE; its RDP accountant does not.
Relation = Literal["add_remove", "replace_one"]

RELATIONS: tuple[Relation, ...] = get_args(Relation)


def neighboring_relation(relation: Relation) -> dp_accounting.NeighboringRelation:
    """dp_accounting's name of ``relation`` (imported here, not with the module: it takes about 1.5 s, and every
    arena process loads this module while registering its plugins)."""
    import dp_accounting

    return {"add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
            "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}[relation]


@functools.lru_cache(maxsize=256)  # a PLD call takes about a second; an audit asks the same claim many times
def epsilon_under(
    noise_multiplier: float,
    q: float,
    steps: int,
    delta: float,
    *,
    accountant: Accountant = "pld",
    relation: Relation = "add_remove",
) -> float:
    """ε at ``delta`` of ``steps`` Poisson-subsampled (rate q; q = 1: none) Gaussian steps under ``relation``.

    ``epsilon_under(..., accountant=a, relation="add_remove")`` equals ``epsilon(..., a)``. Raises ValueError for
    a relation the chosen accountant cannot account (RDP with replace-one and q < 1: use "pld").
    """
    if not 0 < q <= 1 or steps < 0 or not 0 < delta < 1 or noise_multiplier < 0:
        raise ValueError("need 0 < q <= 1, steps >= 0, 0 < delta < 1, noise_multiplier >= 0")
    if relation not in RELATIONS:
        raise ValueError(f"unknown neighbouring relation {relation!r}; choose from {list(RELATIONS)}")
    if noise_multiplier == 0:
        return float("inf") if steps else 0.0
    if accountant == "rdp" and relation == "replace_one":
        # dp_accounting's RDP accountant composes a GaussianDpEvent identically under every relation (its noise
        # multiplier read as relative to that relation's sensitivity), which would understate DP-SGD's replace-one
        # ε; without subsampling replace-one is the Gaussian at twice the sensitivity, i.e. σ/2 under add/remove.
        if q < 1.0:
            raise ValueError("the rdp accountant of dp_accounting cannot account replace_one for the subsampled "
                             "Gaussian; use 'pld'")
        return epsilon_under(noise_multiplier / 2, 1.0, steps, delta, accountant="rdp", relation="add_remove")
    from dp_accounting import pld, rdp

    if accountant == "rdp":
        acc = rdp.RdpAccountant(neighboring_relation=neighboring_relation(relation))
    elif accountant == "pld":
        acc = pld.PLDAccountant(neighboring_relation=neighboring_relation(relation))
    else:
        raise ValueError(f"unknown accountant {accountant!r}; choose from {list(ACCOUNTANT_NAMES)}")
    event = _event(noise_multiplier, q, steps)
    if not acc.supports(event):
        raise ValueError(f"the {accountant} accountant of dp_accounting cannot account {relation} for this "
                         "mechanism (subsampled Gaussian under replace-one needs 'pld')")
    acc.compose(event)
    return float(acc.get_epsilon(delta))


OPTIMISTIC_DISCRETIZATION = 1e-4
"""The finest PLD discretisation of ``epsilon_optimistic``: an optimistic PLD under-states δ(ε) at any
discretisation, so any keeps the figure a lower bound; the shortfall grows as T·interval/2 (0.0125 in ε at
T = 250 here)."""
OPTIMISTIC_SHORTFALL = 0.01
"""The most ``epsilon_optimistic`` gives away to its discretisation, as a fraction of the ε (RDP's, an upper
bound) of the mechanism: an under-noised run's ε of 100 needs no 1e-4 grid, whose support then takes seconds."""


def optimistic_interval(noise_multiplier: float, q: float, steps: int, delta: float) -> float:
    """The PLD discretisation for ``epsilon_optimistic``: coarse enough to be fast, fine enough that its shortfall
    T·interval/2 stays below ``OPTIMISTIC_SHORTFALL`` of the RDP ε, and never finer than needed."""
    rough = epsilon(noise_multiplier, q, steps, delta, accountant="rdp")
    return max(OPTIMISTIC_DISCRETIZATION, 2 * OPTIMISTIC_SHORTFALL * rough / steps)


@functools.lru_cache(maxsize=256)
def epsilon_optimistic(noise_multiplier: float, q: float, steps: int, delta: float) -> float:
    """A *lower* bound on the ε at ``delta`` (add/remove) of ``steps`` Poisson-subsampled Gaussian steps:
    dp_accounting's optimistic PLD estimate (privacy losses rounded down), the figure an audit may report as
    "ε ≥" for a mechanism it has shown to be at most this noisy. ∞ without noise."""
    from dp_accounting.pld import privacy_loss_distribution

    if not 0 < q <= 1 or steps < 1 or not 0 < delta < 1 or noise_multiplier < 0:
        raise ValueError("need 0 < q <= 1, steps >= 1, 0 < delta < 1, noise_multiplier >= 0")
    if noise_multiplier == 0:
        return float("inf")
    pld_ = privacy_loss_distribution.from_gaussian_mechanism(
        noise_multiplier, pessimistic_estimate=False, sampling_prob=q,
        value_discretization_interval=optimistic_interval(noise_multiplier, q, steps, delta),
        use_connect_dots=False, neighboring_relation=neighboring_relation("add_remove")).self_compose(steps)
    return float(pld_.get_epsilon_for_delta(delta))
