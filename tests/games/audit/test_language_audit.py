"""The canary audit of DP fine-tuning of a language model: token-sequence canaries, each in its model with
probability ½, the loss reduction against the published initialisation as the score, and the image audit's own
statistics and verdict (``arena.games.audit.verdict``).

What must be true: a correct ``lm-dpsgd`` run at ε = 1 is never flagged and its claim matches the accountant's ε
of the mechanism the engine saw it run; the same fine-tuning without noise, claiming the same ε, is flagged by
the canaries alone (assumption-free) and refuted by the claim check; the game plays text datasets only with
sequence canaries, hands the auditor black boxes that answer a language model's loss, and scores through the
shared verdict. The model is a bigram table (a causal language model of V² weights): the canaries' statistics,
the presence mask and the claim check are what is tested, and a transformer would only make it slower."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arena import Architecture, Model, ModelParams
from arena.contracts.dataset import Dataset, TextDataset
from arena.contracts.recipe import Recipe
from arena.games.audit import AuditGame, AuditGameSpec
from arena.games.audit.canaries import CanarySpec, audit, input_canary_scores
from arena.games.audit.rule import audit_row
from arena.pipeline.procedure import TrainingProcedure
from arena_plugins.auditor import CanaryAuditor
from arena_plugins.lm_defenses import LMDPSGD, LMDPSGDParams
from tests.broken_defenses import LMNoNoise

V, L = 32, 8


class BigramNet(torch.nn.Module):
    """Next-token logits that depend on the current token only: row t of a V × V table."""

    def __init__(self) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(0.01 * torch.randn(V, V))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.table[X.long().clamp(min=0)]


class Bigram(Model):
    name = "bigram"
    Params = ModelParams

    def build(self, input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
        return BigramNet()


ARCH = Architecture(Bigram(ModelParams()), (L,), V)
RECIPE = Recipe(epochs=15, lr=0.03, batch_size=None)  # full batch: q = 1, 15 steps


def _members(n: int) -> torch.Tensor:
    """n token records: four fixed patterns repeated (text the canaries' random strings do not resemble)."""
    patterns = torch.randint(1, V, (4, L), generator=torch.Generator().manual_seed(0))
    return patterns[torch.arange(n) % 4].float()


def _dpsgd(cls: type[LMDPSGD]) -> LMDPSGD:
    return cls(LMDPSGDParams(epsilons=[1.0], delta=1e-3, clip=1.0))


def _audit(cls: type[LMDPSGD], seed: int):
    X = _members(8)
    spec = CanarySpec(models=4, gradient=0, inputs=16, input_kind="sequence", seed=seed)
    return audit(_dpsgd(cls), ARCH, RECIPE, X, torch.zeros(len(X), dtype=torch.long), spec)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_correct_dp_fine_tuning_at_epsilon_1_is_never_flagged_and_its_claim_is_the_accountants(seed: int) -> None:
    result = _audit(LMDPSGD, seed)
    assert result.claim.epsilon == pytest.approx(1.0, abs=0.02)
    assert result.kinds[0].n_canaries == 64 and result.kinds[0].kind == "input_sequence"
    assert not result.flagged and not result.violation
    assert result.lower_bound <= result.claim.epsilon
    # the claim check: the PLD ε of the one DP-SGD call the engine saw (σ, q = 1, 15 steps) is within the claim
    assert result.check is not None and result.check.runs == 1 and result.check.trained_release
    assert result.claim_consistent and result.mechanism_epsilon <= result.claim.epsilon


@pytest.mark.slow
def test_dp_fine_tuning_without_noise_is_caught_by_the_canaries_alone() -> None:
    result = _audit(LMNoNoise, 0)
    assert result.claim.epsilon == pytest.approx(1.0, abs=0.02)  # it claims the correct algorithm's ε
    assert result.flagged  # the canaries' assumption-free tests refute the claim at 95 %
    assert result.lower_bound > result.claim.epsilon
    k = result.kinds[0]
    assert k.one_run.correct == k.one_run.guesses >= 16
    assert not result.claim_consistent and result.check is not None and result.check.epsilon == float("inf")


def test_sequence_canary_scores_are_the_loss_reduction_centred_over_the_other_models() -> None:
    final = np.array([[1.0, 2.0], [3.0, 2.5], [2.0, 4.0]])
    start = np.array([[3.0, 3.0], [3.5, 3.0], [3.0, 3.0]])
    reduction = start - final
    assert np.allclose(input_canary_scores(final), -final)
    assert np.allclose(input_canary_scores(final, start), reduction)
    others = (reduction.sum(0, keepdims=True) - reduction) / 2
    assert np.allclose(input_canary_scores(torch.tensor(final), torch.tensor(start), centre=True), reduction - others)


def _text(n: int = 64) -> TextDataset:
    g = torch.Generator().manual_seed(1)
    X = torch.cat([_members(n // 2), torch.randint(1, V, (n - n // 2, L), generator=g).float()]).numpy()
    return TextDataset("toy-text", X, np.zeros(n, np.int64), V, "text", (L,), tokenizer="", sources=("toy",),
                       source=np.zeros(n, np.int64))


@pytest.fixture(scope="module")
def played():
    spec = AuditGameSpec(name="audit", members=16, test=8, models=4, kind="input", input_canaries=16,
                         input_kind="sequence")
    game = AuditGame(spec, _text(), seed=0)
    procedure = TrainingProcedure(_dpsgd(LMNoNoise), ARCH, RECIPE)
    return game, game.release(procedure), procedure


class _Attack:
    name = "probe"
    threat_model = frozenset({"parameters", "query"})


@pytest.mark.slow
def test_the_game_audits_a_language_model_through_the_shared_verdict(played) -> None:
    game, release, procedure = played
    assert 0.0 <= release.utility <= 1.0  # next-token accuracy on held-out text
    view = game.view(_Attack(), release, procedure)
    assert view.kinds == ("input",) and tuple(view.canary_X.shape) == (16, L)
    assert float(view.canary_X.min()) >= 1 and float(view.canary_X.max()) < V  # token ids, no padding
    assert view.models[0].loss(view.canary_X).shape == (16,) and len(view.init_models) == 4
    auditor = CanaryAuditor(CanaryAuditor.Params(input_reference="init"))
    outcome = game.play(auditor, release, procedure)
    m = outcome.metrics
    assert m["input_kind"] == "sequence" and m["input_canaries"] == 64 and m["models"] == 4
    assert m["flagged"] and m["violation"] and m["empirical_epsilon"] > m["claimed_epsilon"]
    # the audit rule recomputes the verdict from the saved scores and bits (its held-out split drawn from the row's
    # key, not the game's seed: the figures differ, the verdict does not)
    row = {"key": "k", "track": "t", "defense": "broken-lm-no-noise", "defense_label": "broken-lm-no-noise",
           "attack": "canary-auditor", "attack_label": "canary-auditor", "seed": 0, "status": "ok",
           "claim": release.claim.as_dict(), "metrics": m}
    record = audit_row(row, outcome.arrays)
    assert record.flagged and record.violation and record.lower_bound > record.claimed_epsilon


def test_a_text_dataset_is_audited_with_sequence_canaries_only() -> None:
    text = _text()
    ok = AuditGameSpec(name="audit", members=16, test=8, kind="input", input_kind="sequence")
    assert AuditGame.problems(ok, text) == []
    for bad in (AuditGameSpec(name="audit", members=16, test=8), AuditGameSpec(name="audit", members=16, test=8,
                                                                                kind="input", input_kind="ood")):
        assert [f for f, _ in AuditGame.problems(bad, text)] == ["kind"]
    table = Dataset("d", np.zeros((300, 4), np.float32), np.zeros(300, np.int64), 2, "tabular", (4,))
    assert [f for f, _ in AuditGame.problems(ok, table)] == ["input_kind"]
