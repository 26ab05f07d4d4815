"""The built-in canary auditor of the ``audit`` game (Nasr et al. 2023; Steinke, Nasr & Jagielski 2023).

White-box gradient canaries (capability ``parameters``): canary j of model k, a Dirac gradient s·C·e_c, pushes
coordinate c by −lr·s·C/(qN) each step that samples it, so its score is −s·(θ_final − θ_init)[c] with the
published initialisation (or −s·θ_final when it is not published). With ``centre`` (default) each coordinate's
movement is taken against its mean movement in the other K − 1 models: the data gradients push a coordinate alike
in every model, the canary only in its own. The scores are then a post-processing of all K released models, which
the one-run analysis allows (its guesses may be any function of the whole output of a mechanism that is (ε, δ)-DP
in each canary's bit; changing one bit changes the training of one model only).

Black-box input canaries (capability ``query``): −(each model's loss on each canary record), asked through that
model's black box (cross-entropy for a classifier, mean next-token NLL for a language model's token-sequence
canaries). With ``input_reference: init`` (needs the published initialisation) the score is the loss reduction
against the model's own initialisation (the language audit's setting: what training on a token string changed);
with ``centre_inputs``, each canary's score is taken against its mean score in the other models (every model is
offered the same canary records, so how hard a canary is to predict cancels). Centring pays with many models; with
few it also cancels much of a canary that most of them include (on the toy LM of
``tests/games/audit/test_language_audit.py``, 4 models, it lowered the no-noise run's bound from 1.58 to 0.44 on
one seed of four).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from arena import Attack, AuditView, CanaryGuess, PluginParams, gradient_canary_scores, hookimpl, input_canary_scores


class CanaryAuditorParams(PluginParams):
    centre: bool = Field(default=True, description="score a gradient canary's coordinate against its mean movement "
                                                   "in the other models")
    input_reference: Literal["none", "init"] = Field(
        default="none", description="init: score an input canary by the loss reduction against the model's "
                                    "published initialisation (needs init: known)")
    centre_inputs: bool = Field(default=False, description="score an input canary against its mean score in the "
                                                           "other models")


class CanaryAuditor(Attack):
    """Scores every canary of an audit game: white-box for gradient canaries, black-box for input canaries."""

    name = "canary-auditor"
    game = "audit"
    threat_model = frozenset({"parameters", "query"})
    Params = CanaryAuditorParams
    params: CanaryAuditorParams

    def run(self, view: AuditView) -> CanaryGuess:
        scores = {}
        if "gradient" in view.kinds:
            assert view.gradient_index is not None and view.gradient_sign is not None  # granted with the kind
            final = view.parameters.flat()
            start = view.init.flat() if view.init is not None else None
            scores["gradient"] = gradient_canary_scores(final, start, view.gradient_index, view.gradient_sign,
                                                        centre=self.params.centre)
        if "input" in view.kinds:
            import torch

            assert view.canary_X is not None and view.canary_y is not None  # granted with the kind
            losses = torch.stack([box.loss(view.canary_X, view.canary_y) for box in view.models])
            start = None
            if self.params.input_reference == "init":
                if view.init_models is None:
                    raise ValueError("input_reference: init needs the published initialisation (game init: known)")
                start = torch.stack([box.loss(view.canary_X, view.canary_y) for box in view.init_models])
            scores["input"] = input_canary_scores(losses, start, self.params.centre_inputs)
        return CanaryGuess(scores)


@hookimpl
def register_attacks(register) -> None:  # noqa: ANN001
    register(CanaryAuditor)
