"""Training causal language models on token records (``arena.TextDataset``): next-token log-probabilities, the
per-record loss, non-private and DP-SGD fine-tuning, of the whole model or of LoRA adapters (Hu et al. 2022).

A module here is the model plugin's (``CausalLM``: float token ids [B, L] padded with ``PAD`` in, logits
[B, L, V] out). K models train one after the other, each from its own seeds: model k is initialised under
``init_seeds[k]`` (the LoRA matrices too) and samples its batches and noise from ``train_seeds[k]``.

DP-SGD (Abadi et al. 2016) takes Poisson samples at rate q = B/n, computes every sampled record's gradient with
``torch.func.vmap(grad)`` over the trainable tensors (all of them, or only the LoRA matrices), clips each to
norm C, adds N(0, σ²C²) to the sum and divides by the expected batch size qn: the mechanism the accountant
(``arena.privacy.accounting``) accounts. A LoRA model is released merged (W + BA): the module the plugin builds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.func import functional_call, grad, vmap

from arena.contracts.architecture import Architecture, State
from arena.contracts.dataset import PAD
from arena.contracts.recipe import DPNoise, Recipe
from arena.engine import instruments
from arena.engine.batching import steps_and_rate
from arena.engine.seeds import derive_seed

MICROBATCH = 32
"""Records whose per-example gradients are held at once under DP-SGD (bounds memory, not the result)."""
LORA_TARGETS = ("c_attn", "q_proj", "v_proj")
"""The projections LoRA adapts (GPT-2's fused attention input; Llama's query and value): Hu et al.'s W_q, W_v."""


@dataclass(frozen=True)
class LoRA:
    """LoRA adapters of rank ``rank`` and scale ``alpha``/``rank`` on the attention projections; only they train."""

    rank: int
    alpha: float


Forward = Callable[[torch.Tensor], torch.Tensor]
"""A module, or any function of records [B, L] to logits [B, L, V]."""


def token_logprobs(module: Forward, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-softmax [B, L-1, V] of the predictions of tokens 1..L-1, those tokens [B, L-1] (PAD mapped to 0), which
    are real [B, L-1]) for records X [B, L]."""
    logp = torch.log_softmax(module(X)[:, :-1].float(), dim=-1)
    targets = X[:, 1:].long()
    keep = targets != PAD
    return logp, targets.clamp(min=0), keep


def example_nll(module: Forward, X: torch.Tensor) -> torch.Tensor:
    """Mean next-token negative log-likelihood [B] of each record over its real tokens (the training loss)."""
    logp, targets, keep = token_logprobs(module, X)
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (nll * keep).sum(-1) / keep.sum(-1).clamp(min=1)


def with_lora(module: torch.nn.Module, lora: LoRA) -> torch.nn.Module:
    """``module`` (a ``CausalLM``) with LoRA adapters on its attention projections; only they are trainable."""
    import peft

    names = {n.rsplit(".", 1)[-1] for n, _ in module.named_modules()}
    targets = [t for t in LORA_TARGETS if t in names]
    if not targets:
        raise ValueError(f"lora: the model has none of the projections LoRA adapts ({', '.join(LORA_TARGETS)})")
    config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha,  # type: ignore[arg-type]  # peft annotates int;
                             target_modules=targets, lora_dropout=0.0,  # it only divides by r: a float is honoured
                             fan_in_fan_out="c_attn" in targets, bias="none")
    lm: Any = module.lm
    with warnings.catch_warnings():  # peft asks transformers a deprecated question (is_gradient_checkpointing)
        warnings.simplefilter("ignore", FutureWarning)
        module.lm = peft.get_peft_model(lm, config)
    return module


def merged(module: torch.nn.Module) -> torch.nn.Module:
    """A LoRA ``CausalLM`` with its adapters merged into the base weights (the plugin's module again)."""
    lm: Any = module.lm
    if hasattr(lm, "merge_and_unload"):
        module.lm = lm.merge_and_unload()
    return module


def _state(module: torch.nn.Module) -> State:
    return {n: t.detach().clone() for n, t in [*module.named_parameters(), *module.named_buffers()]}


def _optimizer(params: list[torch.Tensor], recipe: Recipe, kind: Literal["adam", "sgd"]) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=recipe.lr)
    return torch.optim.SGD(params, lr=recipe.lr, momentum=recipe.momentum)


def _batches(n: int, recipe: Recipe, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Non-private batches: a fresh shuffle each epoch cut into batches of B (full batch without one)."""
    size = recipe.batch_size or n
    for _ in range(recipe.epochs):
        order = torch.randperm(n, generator=gen)
        yield from order.split(size)


def _poisson(n: int, recipe: Recipe, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """DP-SGD's batches: each of ``steps`` steps takes every record independently with probability q."""
    steps, q = steps_and_rate(n, recipe)
    for _ in range(steps):
        yield torch.nonzero(torch.rand(n, generator=gen) < q).squeeze(1)


def clipped_sum(module: torch.nn.Module, params: dict[str, torch.Tensor], X: torch.Tensor, clip: float
                ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(Σ_i clip_C(∇ℓ(x_i)) by tensor name, the per-example norms before clipping) over records X [m, L]; every
    gradient through ``torch.func.vmap(grad)``, ``MICROBATCH`` records at a time."""

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return example_nll(lambda z: functional_call(module, p, (z,), strict=False), x.unsqueeze(0))[0]

    total = {k: torch.zeros_like(v) for k, v in params.items()}
    norms = []
    per_example = vmap(grad(loss), in_dims=(None, 0), randomness="different")
    for part in X.split(MICROBATCH):
        g = per_example(params, part)
        norm = torch.sqrt(sum(t.reshape(len(part), -1).pow(2).sum(1) for t in g.values()))
        scale = (clip / (norm + 1e-12)).clamp(max=1.0)
        for k, t in g.items():
            total[k] += torch.einsum("b,b...->...", scale, t)
        norms.append(norm)
    return total, torch.cat(norms) if norms else torch.zeros(0)


def train_one(arch: Architecture, X: torch.Tensor, init_seed: int, train_seed: int, recipe: Recipe, *,
              dp: DPNoise | None = None, lora: LoRA | None = None,
              optimizer: Literal["adam", "sgd"] = "adam", present: torch.Tensor | None = None) -> State:
    """One model trained on records X [n, L]: non-private (mean loss over shuffled batches) or DP-SGD with ``dp``;
    its full state, LoRA merged. Under DP-SGD a row whose ``present`` [n] is False is never sampled (an audit's
    absent canary) while the expected batch size q·n still counts it, as in the image engine."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        module = arch.build()
        if lora is not None:
            module = with_lora(module, lora)
    module = module.to(X.device).train()
    named = {n: p for n, p in module.named_parameters() if p.requires_grad}
    opt = _optimizer(list(named.values()), recipe, optimizer)
    gen = torch.Generator().manual_seed(derive_seed("lm-batches", int(train_seed)))
    noise_gen = torch.Generator(device=X.device).manual_seed(derive_seed("lm-noise", int(train_seed)))
    n = X.shape[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed("lm-module", int(train_seed)))  # what the module draws itself (dropout)
        if dp is None:
            for idx in _batches(n, recipe, gen):
                opt.zero_grad(set_to_none=True)
                example_nll(module, X[idx.to(X.device)]).mean().backward()
                opt.step()
        else:
            _, q = steps_and_rate(n, recipe)
            for idx in _poisson(n, recipe, gen):
                if present is not None:
                    idx = idx[present[idx.to(present.device)].cpu()]
                params = {k: v.detach() for k, v in named.items()}
                total, _ = clipped_sum(module, params, X[idx.to(X.device)], dp.clip)
                for k, p in named.items():
                    noise = torch.randn(p.shape, generator=noise_gen, device=p.device, dtype=p.dtype)
                    p.grad = (total[k] + dp.noise_multiplier * dp.clip * noise) / (q * n)
                opt.step()
    module.eval()
    if lora is not None:
        module = merged(module)
    return _state(module)


def train_lm(arch: Architecture, X: torch.Tensor, init_seeds: torch.Tensor, train_seeds: torch.Tensor,
             recipe: Recipe, *, dp: DPNoise | None = None, lora: LoRA | None = None,
             optimizer: Literal["adam", "sgd"] = "adam") -> State:
    """K models, model k trained on X[k] [n, L] from its own seeds (``train_one``), stacked by tensor name.

    Inside an audit's ``instrumented`` block (``arena.engine.instruments``) a DP-SGD call is armed like the image
    engine's: the audit's presence mask decides which rows exist in which model (its input canaries: token
    sequences in or out of each model's data), the mechanism run and the state returned are recorded for the claim
    check. White-box gradient canaries are the image engine's only: a language model's audit uses input canaries."""
    K, n = X.shape[:2]
    dp = instruments.arm(dp, X, torch.zeros(K, n, dtype=torch.long, device=X.device), recipe)
    if dp is not None and dp.canaries is not None:
        raise ValueError("white-box gradient canaries are not inserted by the language models' trainer; audit a "
                         "language model with input canaries (kind: input, input_kind: sequence)")
    present = dp.present if dp is not None else None
    states = [train_one(arch, X[k], int(init_seeds[k]), int(train_seeds[k]), recipe, dp=dp, lora=lora,
                        optimizer=optimizer, present=None if present is None else present[k])
              for k in range(K)]
    out = {name: torch.stack([s[name] for s in states]) for name in states[0]}
    instruments.record_return(out)
    return out


def models_nll(module_of: Any, k: int, X: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """Mean next-token NLL [n] of records X [n, L] under model ``k`` of ``module_of`` (``Models.module``)."""
    module = module_of(k)
    with torch.no_grad():
        return torch.cat([example_nll(module, part) for part in X.split(batch)]) if len(X) else torch.zeros(0)


def perplexity(nll: torch.Tensor, X: torch.Tensor) -> float:
    """exp of the token-weighted mean NLL of records X [n, L] whose per-record mean NLLs are ``nll``."""
    tokens = (X[:, 1:] != PAD).sum(-1).to(nll.dtype)
    return math.exp(float((nll * tokens).sum() / tokens.sum().clamp(min=1)))
