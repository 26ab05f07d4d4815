"""DP-SGD's clipping of dense layers in one pass of compiled C: each example's ghost norm over all layers, its factor
min(1, C/‖g‖), the factors times each layer's narrower side and the bias gradients, which ``arena.engine.dpsgd``
otherwise makes in ~22 eager tensor calls a step (at K = 1, ~40 µs of fixed cost against a ~200 µs non-private MLP
step on a 2-core Xeon), each row read while it is in cache; only the weight gradients' batched matmuls remain.

Built by ``arena kernels build`` (never at run time) and loaded by ``arena.engine.native``
(``ARENA_KERNELS=off``: never); where ``library()`` is None, or the
tensors are not float32 rows on the CPU, the eager passes run. The two agree to float rounding (the squared norms
are summed in another order).
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

import torch

from arena.engine import native

SOURCE = r"""
#include <stdint.h>
""" + native.DOT + r"""
/* per example (model k < models, example b < per_model; r = k*per_model + b): g² = extra[r] (the squared norm of
   its gradient's other layers; 0 without extra) plus, over layers l, (|a_l|² + 1)·|d_l|² (layer l's input row a_l and
   delta row d_l, of width in_width[l] and delta_width[l], at k*strides[2t] + b*strides[2t+1] floats from their
   tensor t's start: inputs then deltas), f = min(scale, clip_scale / g), or 0 where valid[r] is 0, into factors[r];
   and while the example's rows are in cache, per layer, f times the narrower of a_l and d_l (d_l's where the widths
   tie) into row r of scaled[l], and f·d_l added into row k of bias[l] ([models, delta_width[l]], overwritten) */
void arena_dense_clipped(int64_t layers, const int64_t *inputs, const int64_t *in_width, const int64_t *deltas,
                         const int64_t *delta_width, const int64_t *strides, int64_t models, int64_t per_model,
                         float clip_scale, float scale, const uint8_t *valid, const float *extra,
                         const int64_t *scaled, const int64_t *bias, float *factors) {
    for (int64_t l = 0; l < layers; l++) {
        float *b = (float *)bias[l];
        for (int64_t j = 0; j < models * delta_width[l]; j++) b[j] = 0.0f;
    }
    const int64_t *sd = strides + 2 * layers;  /* the deltas' */
    for (int64_t k = 0; k < models; k++)
        for (int64_t e = 0; e < per_model; e++) {
            const int64_t r = k * per_model + e;
            float sq = extra ? extra[r] : 0.0f;
            for (int64_t l = 0; l < layers; l++) {
                const float *a = (const float *)inputs[l] + k * strides[2 * l] + e * strides[2 * l + 1];
                const float *d = (const float *)deltas[l] + k * sd[2 * l] + e * sd[2 * l + 1];
                sq += (dot(a, a, in_width[l]) + 1.0f) * dot(d, d, delta_width[l]);
            }
            const float g = clip_scale / __builtin_sqrtf(sq);  /* a zero gradient: +inf, so the factor is scale */
            const float f = valid && !valid[r] ? 0.0f : (g < scale ? g : scale);
            factors[r] = f;
            for (int64_t l = 0; l < layers; l++) {
                const int64_t wa = in_width[l], wd = delta_width[l];
                const float *d = (const float *)deltas[l] + k * sd[2 * l] + e * sd[2 * l + 1];
                float *b = (float *)bias[l] + k * wd;
                for (int64_t j = 0; j < wd; j++) b[j] += f * d[j];
                if (wa < wd) {
                    const float *a = (const float *)inputs[l] + k * strides[2 * l] + e * strides[2 * l + 1];
                    float *o = (float *)scaled[l] + r * wa;
                    for (int64_t j = 0; j < wa; j++) o[j] = f * a[j];
                } else {
                    float *o = (float *)scaled[l] + r * wd;
                    for (int64_t j = 0; j < wd; j++) o[j] = f * d[j];
                }
            }
        }
}
"""


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    lib.arena_dense_clipped.argtypes = [i, p, p, p, p, p, i, i, f, f, p, p, p, p, p]
    lib.arena_dense_clipped.restype = None
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, loaded once per process if built; None where it is not built or kernels are off."""
    return native.load("dense", SOURCE, _bind)


class Clipped(NamedTuple):
    """One pass's results for K models' examples [K, B]: the clip factors, per layer the narrower of its input and
    delta scaled by them (``scaled_inputs[l]`` says which), and the layers' bias gradients (the scaled deltas'
    sums over examples)."""

    factors: torch.Tensor
    scaled: list[torch.Tensor]
    scaled_inputs: list[bool]
    biases: list[torch.Tensor]


class _Plan(NamedTuple):
    """What a call for layers of given shapes and strides needs besides the tensors: made once per layout."""

    models: int
    per_model: int
    widths: ctypes.Array  # the inputs' widths, then the deltas'
    strides: ctypes.Array  # each tensor's model and example strides, inputs then deltas
    on_inputs: list[bool]
    narrow: list[int]


@functools.lru_cache(maxsize=128)
def _plan(layouts: tuple[tuple[torch.Size, tuple[int, ...]], ...]) -> _Plan | None:
    """For inputs then deltas of these (shape, strides), each [K, B, width] with contiguous rows; None unless they
    are."""
    if any(len(shape) != 3 or shape[:2] != layouts[0][0][:2] or stride[2] != 1 for shape, stride in layouts):
        return None
    L, widths = len(layouts) // 2, [shape[2] for shape, _ in layouts]
    strides = [s for _, stride in layouts for s in stride[:2]]
    return _Plan(layouts[0][0][0], layouts[0][0][1], (ctypes.c_int64 * len(widths))(*widths),
                 (ctypes.c_int64 * len(strides))(*strides),
                 [wa < wd for wa, wd in zip(widths[:L], widths[L:])],
                 [min(wa, wd) for wa, wd in zip(widths[:L], widths[L:])])


def clipped(
    inputs: list[torch.Tensor], deltas: list[torch.Tensor], clip: float, valid: torch.Tensor | None, scale: float,
    extra: torch.Tensor | None = None,
) -> Clipped | None:
    """The factors ``dpsgd.clip_factors`` gives the examples' ghost norms (times ``scale``, 0 where ``valid`` is
    False), what they scale and the bias sums, in one call; None where the kernel cannot take these tensors (then
    the eager passes run). Inputs and deltas are [K, B, width] views with contiguous rows (a layer stack's tail in
    ``arena.engine.ghost`` hands them models second); ``extra`` [K, B]: each example's squared gradient norm over
    the model's other layers, added to theirs. The call's fixed cost is kept to a few µs: at K = 1 it is most of
    it."""
    tensors = [*inputs, *deltas]
    plan = _plan(tuple((t.shape, t.stride()) for t in tensors))
    if plan is None or not all(t.is_cpu and t.dtype == torch.float32 for t in tensors):
        return None  # each a [K, B, width] block of float rows, as the kernel reads it
    if extra is not None and (extra.dtype != torch.float32 or extra.shape != (plan.models, plan.per_model)):
        return None
    lib = library()
    if lib is None:
        return None
    L, K, B = len(inputs), plan.models, plan.per_model
    scaled = [torch.empty(K, B, w) for w in plan.narrow]
    biases = [torch.empty(K, d.shape[-1]) for d in deltas]
    factors = torch.empty(K, B)
    mask = None if valid is None else valid.to(torch.bool).contiguous()
    sq = None if extra is None else extra.contiguous()
    ptrs = (ctypes.c_int64 * (4 * L))(*(t.data_ptr() for t in (*tensors, *scaled, *biases)))
    lib.arena_dense_clipped(L, ptrs, plan.widths, ctypes.byref(ptrs, 8 * L), ctypes.byref(plan.widths, 8 * L),
                            plan.strides, K, B, clip * scale, scale, None if mask is None else mask.data_ptr(),
                            None if sq is None else sq.data_ptr(), ctypes.byref(ptrs, 16 * L),
                            ctypes.byref(ptrs, 24 * L), factors.data_ptr())
    return Clipped(factors, scaled, plan.on_inputs, biases)
