"""The membership audit that can speak: the game saves each challenge point's pair, the paired one-run bound joins
the verdict at its level, and every audit says at which sizes its claim could be refuted."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.special import expit

from arena.contracts.attack import Attack
from arena.contracts.spec import PluginRef
from arena.games.membership import MembershipGame, MembershipGameSpec
from arena.games.membership.guess import MembershipGuess
from arena.games.membership.power import pairs_to_refute, refutable
from arena.games.membership.rule import audit_membership, describe_audit
from arena.pipeline.plan import load_dataset
from arena.privacy.one_run import guess_grid

DELTA = 1e-5


class Fixed(Attack):
    name = "fixed"
    game = "membership"
    threat_model = frozenset({"query"})

    def run(self, view):  # never played: the test scores guesses directly
        raise AssertionError("not played")


def _game(stratify: bool = True, seed: int = 3) -> MembershipGame:
    return MembershipGame(MembershipGameSpec(name="membership", members=60, test=100, population=200,
                                             stratify=stratify), load_dataset(PluginRef(name="digits")), seed=seed)


@pytest.mark.slow  # loads the digits dataset: about 2 s of CPU
@pytest.mark.parametrize("stratify", [True, False])
def test_the_game_saves_each_points_pair_and_drops_pairs_that_straddle_a_label(stratify: bool) -> None:
    game = _game(stratify)
    n = len(game.challenge)
    guess = MembershipGuess(np.arange(n, dtype=float), np.zeros(n, bool))
    out = game.score(Fixed(Fixed.Params()), guess)
    pair, member = out.arrays["pair"], out.arrays["is_member"].astype(bool)
    label = out.arrays["label"]
    kept = pair >= 0
    ids, counts = np.unique(pair[kept], return_counts=True)
    assert np.all(counts == 2)
    for i in ids:  # one member and one non-member of one label: a swap
        (a, b) = np.flatnonzero(pair == i)
        assert member[a] != member[b] and label[a] == label[b]
    assert np.all(np.isin(game.challenge[pair == ids[0]], np.r_[game.members[ids[0]], game.nonmembers[ids[0]]]))
    straddling = int(np.sum(game.dataset.y[game.members] != game.dataset.y[game.nonmembers]))
    assert np.sum(~kept) == 2 * straddling
    if stratify:  # label-sorted dealing: only the pairs at the boundary between two labels straddle
        assert straddling <= game.dataset.n_classes - 1
    else:
        assert straddling > 30  # random pairs of ten classes mostly differ


def test_the_game_reports_the_top_ties_and_the_reference_size() -> None:
    game = _game()
    n = len(game.challenge)
    scores = np.where(game._is_member, 1.0, 0.0)
    scores[np.flatnonzero(~game._is_member)[:5]] = 1.0  # five non-members tied with the members at the top
    out = game.score(Fixed(Fixed.Params()), MembershipGuess(scores, scores > 0.5, references=97))
    assert out.metrics["top_ties"] == 5 and out.metrics["reference_points"] == 97
    assert any("5 non-members share the top" in note for note in out.notes)
    out = game.score(Fixed(Fixed.Params()), MembershipGuess(np.arange(n, dtype=float), np.zeros(n, bool)))
    assert out.metrics["top_ties"] == 1 and "reference_points" not in out.metrics


def test_pairs_to_refute_is_the_smallest_size_whose_perfect_guesses_reject_the_claim() -> None:
    """δ = 0, r pairs all guessed right: the p-value of ε is Pr[Binomial(r, e^ε/(1+e^ε)) ≥ r] = expit(ε)^r, to be
    at most α/|grid|. ε = 1, α = 0.025: expit(1)^32 = 4.5e-5 passes at 32 pairs, expit(1)^16 = 6.7e-3 fails."""
    for eps in (1.0, 2.57, 4.0):
        m = pairs_to_refute(eps, 0.0, 0.025)
        assert m is not None
        for size, ok in ((m, True), (m // 2, False)):
            r = max(a + b for a, b in guess_grid(size))
            assert (expit(eps) ** r <= 0.025 / len(guess_grid(size))) == ok == refutable(size, eps, 0.025, 0.0)
    assert pairs_to_refute(1.0, 0.0, 0.025) == 32 and expit(1.0) ** 32 == pytest.approx(4.5e-5, rel=0.02)
    # δ's term 2mδ grows with m: ε = 8 needs 32,768 pairs at δ = 0, and no size can refute it at δ = 2e-5
    assert pairs_to_refute(8.0, 0.0, 0.025) == 32768 and pairs_to_refute(8.0, 2e-5, 0.025) is None
    assert pairs_to_refute(math.inf, 0.0, 0.025) is None


def _row(key: str, epsilon: float) -> dict:
    return {"key": key, "track": "t", "game": "membership", "defense": "d", "defense_label": "d", "attack": "a",
            "attack_label": "a", "seed": 0, "status": "ok", "claim": {"epsilon": epsilon, "delta": DELTA},
            "epsilon": epsilon, "delta": DELTA, "metrics": {}}


def _randomised_pairs(eps: float, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A release exactly ε-DP under the swap of each pair: each pair's member is told apart from its partner by
    randomised response (right w.p. e^ε/(1 + e^ε)); members score ±1, non-members the opposite."""
    first_in = rng.random(n) < 0.5
    right = rng.random(n) < expit(eps)
    is_member = np.stack([first_in, ~first_in], axis=1).reshape(-1)
    sign = np.where(right, 1.0, -1.0).repeat(2)
    return {"scores": np.where(is_member, sign, -sign), "is_member": is_member, "pair": np.repeat(np.arange(n), 2)}


@pytest.mark.slow  # 600 audits of 400 points: a few seconds of CPU
def test_the_paired_verdict_is_calibrated_at_the_claim_and_has_power_at_twice_it() -> None:
    """The claim (ε, δ) read under replace-one by group privacy: 2ε. Pairs swapped by randomised response at exactly
    that ε: the verdict (held-out and one-run, each at α/2) fires at most α of the time; at twice it, it fires."""
    rng = np.random.default_rng(7)
    claim, n, R = 0.5, 200, 300
    null = [audit_membership(_row(f"n{i}", claim), _randomised_pairs(2 * claim, n, rng)).violation for i in range(R)]
    power = [audit_membership(_row(f"p{i}", claim), _randomised_pairs(4 * claim, n, rng)).violation for i in range(R)]
    assert np.mean(null) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / R)  # nominal 5 %, two standard errors of R
    assert np.mean(power) > 0.5  # measured: see the report


def test_the_one_run_bound_joins_the_verdict_beside_the_held_out_one() -> None:
    rng = np.random.default_rng(0)
    arrays = _randomised_pairs(6.0, 400, rng)
    a = audit_membership(_row("k", 0.5), arrays)
    assert a.one_run is not None and a.one_run.alpha == pytest.approx(0.025) and a.lower_bound.alpha == 0.025
    # the guess set is chosen on a seeded half of the 400 pairs and the bound counted on the other 200
    assert a.one_run.m == 200 and a.one_run.selection == "held-out half"
    assert a.one_run.epsilon > a.relation_epsilon and a.violation
    quiet = dataclasses.replace(a, lower_bound=dataclasses.replace(a.lower_bound, epsilon=0.0))
    assert quiet.violation  # the one-run bound alone refutes
    assert "a refutation needs at least" in describe_audit(a)
    dropped = dict(arrays, pair=np.where(np.arange(800) < 10, -1, arrays["pair"]))
    assert audit_membership(_row("k", 0.5), dropped).one_run.m == 395 - 395 // 2  # label-straddling pairs left out
    unpaired = audit_membership(_row("k", 0.5), {k: v for k, v in arrays.items() if k != "pair"})
    assert unpaired.one_run is None and unpaired.lower_bound.alpha == 0.05
