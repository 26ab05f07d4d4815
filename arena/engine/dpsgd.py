"""DP-SGD gradient (Abadi et al. 2016) from per-example deltas, without per-example gradients.

For a linear layer the per-example gradient is the outer product a_i delta_i^T (plus delta_i for
the bias), so its squared norm is ||a_i||^2 ||delta_i||^2 + ||delta_i||^2 ("ghost norms"), and the
clipped sum is one bmm with deltas reweighted by the clip factors.
"""

from collections.abc import Callable

import torch

from arena.engine import dense_kernel
from arena.engine.dense import Layers, sum_gradients, weight_sum


def _sq(t: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm over the last axis (one fused reduction: ``(t * t).sum(-1)`` makes two passes)."""
    return torch.linalg.vector_norm(t, dim=-1).square_()


def per_example_grad_norms(inputs: list[torch.Tensor], deltas: list[torch.Tensor]) -> torch.Tensor:
    """[K, B] norms of each example's full gradient (all layers, weights and biases): per layer
    (||a||² + 1)·||δ||², the layers' terms summed by ``addcmul`` (one call a layer fewer)."""
    sq = _sq(inputs[0]).add_(1.0).mul_(_sq(deltas[0]))
    for a, d in zip(inputs[1:], deltas[1:]):
        sq = torch.addcmul(sq, _sq(a).add_(1.0), _sq(d))
    return sq.sqrt_()


def clip_factors(norms: torch.Tensor, clip: float, scale: float = 1.0) -> torch.Tensor:
    """min(1, C / ||g_i||), times ``scale``; a zero gradient gets factor ``scale`` (it contributes nothing either
    way)."""
    return (clip * scale / norms).clamp(max=scale)


def clipped_sum(
    inputs: list[torch.Tensor], deltas: list[torch.Tensor], clip: float, valid: torch.Tensor | None = None,
    scale: float = 1.0,
) -> Layers:
    """Sum over examples of the per-example gradients clipped to norm `clip`, times ``scale`` (folded into the
    clip factors: DP-SGD's 1 / expected batch size costs no pass over the sums); examples where ``valid`` [K, B]
    is False (a Poisson batch's padding) contribute nothing. The factors, what they scale and the bias sums come from
    one call of the compiled kernel where it runs (``dense_kernel``), else from the eager passes below."""
    done = dense_kernel.clipped(inputs, deltas, clip, valid, scale)
    if done is None:
        factors = clip_factors(per_example_grad_norms(inputs, deltas), clip, scale)
        return sum_gradients(inputs, deltas, factors if valid is None else factors.mul_(valid))
    grads = []
    for a, d, scaled, on_input, bias in zip(inputs, deltas, done.scaled, done.scaled_inputs, done.biases):
        grads += [weight_sum(scaled, d) if on_input else weight_sum(a, scaled), bias]
    return grads


AddNoise = Callable[[Layers, float], None]
"""Adds ``alpha`` times a step's standard normals, shaped like the parameters, to the given sums in place (the
trainer's ``Noise.add_``, which never writes the normals out where the compiled kernel runs)."""


def noisy_gradient(
    sums: Layers,
    clip: float,
    noise_multiplier: float,
    noise: Layers | AddNoise,
    expected_batch_size: float,
    canary: Layers | None = None,
    divided: bool = False,
) -> Layers:
    """(clipped sums [+ canary] + noise_multiplier * clip * noise) / expected batch size, as Opacus does, in place
    in ``sums`` (no parameter-sized temporary). `noise`: standard normals shaped like the parameters, or what adds
    them (``AddNoise``). `canary`: an audit's white-box gradient canaries sampled this step, shaped like the
    parameters, added like examples' gradients. ``divided``: ``sums`` come divided by the expected batch size
    already (``clipped_sum``'s ``scale``), so the canary and the noise are scaled instead. Multi-tensor kernels:
    the same arithmetic as one tensor at a time, in 1 to 3 calls."""
    scale = 1.0 / expected_batch_size if divided else 1.0
    if canary is not None:
        torch._foreach_add_(sums, canary, alpha=scale)
    if callable(noise):
        noise(sums, noise_multiplier * clip * scale)
    else:
        torch._foreach_add_(sums, noise, alpha=noise_multiplier * clip * scale)
    if not divided:
        torch._foreach_div_(sums, expected_batch_size)
    return sums


def clipped_noisy_gradient(
    inputs: list[torch.Tensor],
    deltas: list[torch.Tensor],
    clip: float,
    noise_multiplier: float,
    noise: Layers,
    expected_batch_size: float,
    canary: Layers | None = None,
) -> Layers:
    """``noisy_gradient`` of the clipped sum of the examples whose layer inputs and deltas are given (padded
    examples must have zero deltas)."""
    sums = clipped_sum(inputs, deltas, clip, scale=1.0 / expected_batch_size)
    return noisy_gradient(sums, clip, noise_multiplier, noise, expected_batch_size, canary, divided=True)
