"""DP-SGD's clip factors of dense layers in one pass of compiled C: each example's ghost norm over all layers and
its factor min(1, C/‖g‖), which ``arena.engine.dpsgd`` otherwise makes in ~16 eager tensor calls a step (at K = 1,
~40 µs of fixed cost against a ~210 µs non-private MLP step on a 2-core Xeon).

Built and cached by ``arena.engine.native`` (``ARENA_KERNELS=0``: never); where ``library()`` is None, or the
tensors are not float32 rows on the CPU, the eager passes run. The two agree to float rounding (the squared norms
are summed in another order).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from arena.engine import native

SOURCE = r"""
#include <stdint.h>
/* sum of x[j]^2, j < n, in 16 running partial sums (a loop that vectorises without reassociating by flags) */
static inline float sq_norm(const float *x, int64_t n) {
    float acc[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) acc[l] += x[j + l] * x[j + l];
    float s = 0.0f;
    for (; j < n; j++) s += x[j] * x[j];
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}
/* per example r < rows: g² = sum over layers l of (|a_l[r]|² + 1)·|d_l[r]|² (layer l's input a_l and delta d_l, rows
   of width in_width[l] and delta_width[l]), out[r] = min(scale, clip_scale / g), or 0 where valid[r] is 0 */
void arena_dense_clip_factors(int64_t layers, const int64_t *inputs, const int64_t *in_width, const int64_t *deltas,
                              const int64_t *delta_width, int64_t rows, float clip_scale, float scale,
                              const uint8_t *valid, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        float sq = 0.0f;
        for (int64_t l = 0; l < layers; l++) {
            const float *a = (const float *)inputs[l] + r * in_width[l];
            const float *d = (const float *)deltas[l] + r * delta_width[l];
            sq += (sq_norm(a, in_width[l]) + 1.0f) * sq_norm(d, delta_width[l]);
        }
        const float f = clip_scale / __builtin_sqrtf(sq);  /* a zero gradient: +inf, so the factor is scale */
        out[r] = valid && !valid[r] ? 0.0f : (f < scale ? f : scale);
    }
}
"""


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    lib.arena_dense_clip_factors.argtypes = [i, p, p, p, p, i, f, f, p, p]
    lib.arena_dense_clip_factors.restype = None
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, built or loaded once per process; None where kernels are unavailable or disabled."""
    return native.load("dense", SOURCE, _bind)


def clip_factors(
    inputs: list[torch.Tensor], deltas: list[torch.Tensor], clip: float, valid: torch.Tensor | None, scale: float
) -> torch.Tensor | None:
    """[K, B] ``dpsgd.clip_factors`` of the examples' ghost norms, times ``valid``, in one call; None where the
    kernel cannot take these tensors (then the eager passes run)."""
    tensors, rows = [*inputs, *deltas], deltas[0].shape[:-1]
    if any(t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous() or t.shape[:-1] != rows
           for t in tensors):
        return None
    lib = library()
    if lib is None:
        return None
    out = torch.empty(rows, dtype=torch.float32)
    mask = None if valid is None else valid.to(torch.bool).contiguous()

    def array(values: list[int]) -> ctypes.Array:
        return (ctypes.c_int64 * len(values))(*values)

    lib.arena_dense_clip_factors(len(inputs), array([a.data_ptr() for a in inputs]),
                                 array([a.shape[-1] for a in inputs]), array([d.data_ptr() for d in deltas]),
                                 array([d.shape[-1] for d in deltas]), out.numel(), clip * scale, scale,
                                 None if mask is None else mask.data_ptr(), out.data_ptr())
    return out
