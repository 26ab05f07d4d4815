"""The hand-written fast path for dense softmax classifiers (logistic regression and MLPs), K models at once.

Layers are a list `[W1 [K,in,out], b1 [K,out], W2, b2, ...]` so that every operation is a batched matmul over
the leading model axis; backprop is written out by hand because it beats autograd for these small nets and
yields the per-example deltas DP-SGD's ghost norms need. The same models, as ``torch.nn.Linear`` stacks, train
through ``arena.engine.functional``; ``to_layers``/``to_state`` convert between the two layouts.
"""

import torch

from arena.contracts.dense import Dense, Layers
from arena.contracts.dense import to_layers as to_layers  # the layouts are the contracts'; the path is here
from arena.contracts.dense import to_state as to_state


def _tanh_(x: torch.Tensor) -> torch.Tensor:
    """tanh(x) = 2 sigmoid(2x) - 1 in place (to ~1e-7 absolute in float32): torch.tanh's CPU kernel is ~5x
    slower."""
    return x.mul_(2.0).sigmoid_().mul_(2.0).sub_(1.0)


_ACTIVATIONS = {"relu": torch.relu_, "tanh": _tanh_, "sigmoid": torch.sigmoid_}
"""The activations, in place: each acts on a pre-activation that the forward pass has just made and nothing
else holds."""


def _sizes(arch: Dense) -> list[int]:
    return [s for i, o in arch.layer_shapes() for s in (i * o, o)]


def flatten(params: Layers) -> torch.Tensor:
    """[K, P]: each model's parameters in the order W1, b1, W2, b2, ... (row-major)."""
    return torch.cat([p.reshape(p.shape[0], -1) for p in params], dim=1)


def unflatten(arch: Dense, flat: torch.Tensor) -> Layers:
    """Inverse of `flatten` for this architecture."""
    shapes = [s for i, o in arch.layer_shapes() for s in ((i, o), (o,))]
    parts = torch.split(flat, _sizes(arch), dim=1)
    return [p.reshape(flat.shape[0], *s) for p, s in zip(parts, shapes)]


def unflatten_module_order(arch: Dense, flat: torch.Tensor) -> Layers:
    """[K, P] read in the module's layout (weight [out, in] row-major, then bias, layer by layer) as dense layers,
    so that a draw of P numbers lands on the same parameters in both training paths."""
    parts = torch.split(flat, _sizes(arch), dim=1)
    out: Layers = []
    for (i, o), w, b in zip(arch.layer_shapes(), parts[0::2], parts[1::2]):
        out += [w.reshape(-1, o, i).transpose(1, 2), b]
    return out


def layer_inputs(
    arch: Dense, params: Layers, X: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Forward pass keeping each linear layer's input (X, then hidden activations), and logits."""
    act = _ACTIVATIONS[arch.activation]
    inputs, h = [], X
    for W, b in zip(params[0::2], params[1::2]):
        inputs.append(h)
        h = torch.matmul(h, W).add_(b.unsqueeze(-2))
        if len(inputs) < len(params) // 2:
            h = act(h)
    return inputs, h


def forward(arch: Dense, params: Layers, X: torch.Tensor) -> torch.Tensor:
    """Logits [K, n, C]; X is [K, n, d] (per model) or [n, d] (shared by all models)."""
    return layer_inputs(arch, params, X)[1]


def softmax(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis, written out: torch.softmax's CPU kernel is ~7x slower on an axis as
    short as a class count (10), and this sits on every training step."""
    e = (logits - logits.amax(-1, keepdim=True)).exp_()
    return e.div_(e.sum(-1, keepdim=True))


def output_delta(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-example gradient of cross-entropy w.r.t. the logits: softmax - onehot, [K, n, C]."""
    onehot = torch.nn.functional.one_hot(y, logits.shape[-1]).to(logits.dtype)
    return softmax(logits).sub_(onehot)


def _activation_backward(activation: str, g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """g times the activation's derivative, written in terms of its output h, in one pass (autograd's own
    kernels: ``g * (h > 0)`` as a float mask took ~7× as long on CPU)."""
    if activation == "relu":
        return torch.ops.aten.threshold_backward(g, h, 0)
    if activation == "tanh":
        return torch.ops.aten.tanh_backward(g, h)
    return torch.ops.aten.sigmoid_backward(g, h)


def backprop(
    arch: Dense, params: Layers, inputs: list[torch.Tensor], dlogits: torch.Tensor
) -> list[torch.Tensor]:
    """Per-example deltas (gradient w.r.t. each layer's pre-activation), first layer first."""
    deltas = [dlogits]
    for W, h in zip(reversed(params[2::2]), reversed(inputs[1:])):
        deltas.append(_activation_backward(arch.activation, torch.matmul(deltas[-1], W.transpose(1, 2)), h))
    return deltas[::-1]


def weight_sum(a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Σ over examples of a_i δ_iᵀ, [K, in, out] in [K, out, in] memory (see ``sum_gradients``): one bmm."""
    return torch.matmul(d.transpose(-1, -2), a).transpose(-1, -2)


def sum_gradients(
    inputs: list[torch.Tensor], deltas: list[torch.Tensor], weights: torch.Tensor | None = None
) -> Layers:
    """Sum over examples of (optionally [K, B]-weighted) per-example gradients: a bmm per layer, the weights folded
    into the narrower of the layer's input and its delta (the fewer numbers to scale). Weight gradients [K, in, out]
    come in [K, out, in] memory, the module's layout, which the trained layers (``to_layers`` of a state) and DP-SGD's
    noise (``unflatten_module_order``) have: adding tensors of mismatched strides takes ~3x as long."""
    grads = []
    for a, d in zip(inputs, deltas):
        if weights is None:
            grads += [weight_sum(a, d), d.sum(dim=-2)]
        elif a.shape[-1] < d.shape[-1]:
            grads += [weight_sum(a * weights.unsqueeze(-1), d), torch.matmul(weights.unsqueeze(-2), d).squeeze(-2)]
        else:
            scaled = d * weights.unsqueeze(-1)
            grads += [weight_sum(a, scaled), scaled.sum(dim=-2)]
    return grads
