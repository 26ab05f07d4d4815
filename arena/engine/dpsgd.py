"""DP-SGD gradient (Abadi et al. 2016) from per-example deltas, without per-example gradients.

For a linear layer the per-example gradient is the outer product a_i delta_i^T (plus delta_i for
the bias), so its squared norm is ||a_i||^2 ||delta_i||^2 + ||delta_i||^2 ("ghost norms"), and the
clipped sum is one bmm with deltas reweighted by the clip factors.
"""

import torch

from arena.engine.dense import Layers, sum_gradients


def _sq(t: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm over the last axis (one fused reduction: ``(t * t).sum(-1)`` makes two passes)."""
    return torch.linalg.vector_norm(t, dim=-1).square_()


def per_example_grad_norms(inputs: list[torch.Tensor], deltas: list[torch.Tensor]) -> torch.Tensor:
    """[K, B] norms of each example's full gradient (all layers, weights and biases)."""
    sq = _sq(inputs[0]).add_(1.0).mul_(_sq(deltas[0]))
    for a, d in zip(inputs[1:], deltas[1:]):
        sq.add_(_sq(a).add_(1.0).mul_(_sq(d)))
    return sq.sqrt_()


def clip_factors(norms: torch.Tensor, clip: float) -> torch.Tensor:
    """min(1, C / ||g_i||); a zero gradient gets factor 1 (it contributes nothing either way)."""
    return (clip / norms).clamp(max=1.0)


def clipped_sum(
    inputs: list[torch.Tensor], deltas: list[torch.Tensor], clip: float, valid: torch.Tensor | None = None
) -> Layers:
    """Sum over examples of the per-example gradients clipped to norm `clip`; examples where ``valid`` [K, B] is
    False (a Poisson batch's padding) contribute nothing."""
    factors = clip_factors(per_example_grad_norms(inputs, deltas), clip)
    return sum_gradients(inputs, deltas, factors if valid is None else factors.mul_(valid))


def noisy_gradient(
    sums: Layers,
    clip: float,
    noise_multiplier: float,
    noise: Layers,
    expected_batch_size: float,
    canary: Layers | None = None,
) -> Layers:
    """(clipped sums [+ canary] + noise_multiplier * clip * noise) / expected batch size, as Opacus does, in place
    in ``sums`` (no parameter-sized temporary). `noise`: standard normals shaped like the parameters. `canary`: an
    audit's white-box gradient canaries sampled this step, shaped like the parameters, added like examples'
    gradients. Multi-tensor kernels: the same arithmetic as one tensor at a time, in 2 or 3 calls."""
    if canary is not None:
        torch._foreach_add_(sums, canary)
    torch._foreach_add_(sums, noise, alpha=noise_multiplier * clip)
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
    return noisy_gradient(clipped_sum(inputs, deltas, clip), clip, noise_multiplier, noise, expected_batch_size,
                          canary)
