"""DP-SGD gradient (Abadi et al. 2016) from per-example deltas, without per-example gradients.

For a linear layer the per-example gradient is the outer product a_i delta_i^T (plus delta_i for
the bias), so its squared norm is ||a_i||^2 ||delta_i||^2 + ||delta_i||^2 ("ghost norms"), and the
clipped sum is one bmm with deltas reweighted by the clip factors.
"""

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
    return [t for pair in kernel_sums(inputs, deltas, done) for t in pair]


def kernel_sums(
    inputs: list[torch.Tensor], deltas: list[torch.Tensor], done: dense_kernel.Clipped
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's clipped (weight, bias) sums from the dense kernel's call: a bmm with the side it scaled, the bias
    sum it made. Weights [K, in, out] in [K, out, in] memory, as ``sum_gradients`` gives them."""
    return [(weight_sum(scaled, d) if on_input else weight_sum(a, scaled), bias)
            for a, d, scaled, on_input, bias in zip(inputs, deltas, done.scaled, done.scaled_inputs, done.biases)]


def noise_alpha(clip: float, noise_multiplier: float, expected_batch_size: float, divided: bool = False) -> float:
    """The coefficient of the standard normals in ``noisy_gradient``: σ·C, over the expected batch size where the
    sums come divided by it already."""
    return noise_multiplier * clip / expected_batch_size if divided else noise_multiplier * clip


def add_canary_(sums: Layers, canary: Layers | None, expected_batch_size: float, divided: bool = False) -> None:
    """An audit's white-box gradient canaries sampled this step (shaped like the parameters) added to the clipped
    sums like examples' gradients (over the expected batch size where the sums come divided by it already)."""
    if canary is not None:
        torch._foreach_add_(sums, canary, alpha=1.0 / expected_batch_size if divided else 1.0)


def noisy_gradient(
    sums: Layers,
    clip: float,
    noise_multiplier: float,
    noise: Layers,
    expected_batch_size: float,
    canary: Layers | None = None,
    divided: bool = False,
) -> Layers:
    """(clipped sums [+ canary] + noise_multiplier * clip * noise) / expected batch size, as Opacus does, in place
    in ``sums`` (no parameter-sized temporary). `noise`: standard normals shaped like the parameters. `canary`:
    ``add_canary_``'s. ``divided``: ``sums`` come divided by the expected batch size already (``clipped_sum``'s
    ``scale``), so the canary and the noise are scaled instead. Multi-tensor kernels: the same arithmetic as one
    tensor at a time, in 1 to 3 calls. (The trainer adds the noise in its optimizer's pass instead:
    ``steps.HeavyBall.step``, with ``noise_alpha``.)"""
    add_canary_(sums, canary, expected_batch_size, divided)
    torch._foreach_add_(sums, noise, alpha=noise_alpha(clip, noise_multiplier, expected_batch_size, divided))
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
