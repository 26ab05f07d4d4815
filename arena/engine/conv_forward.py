"""The forward pass of a one-channel convolution of one model (a grey image's first layer trained alone) in compiled
C, its output in channels-last memory as the layer-by-layer path (``arena.engine.ghost``) keeps it.

oneDNN runs such a layer on a generic path: the digits CNN's first layer (1 → 16 channels, 3×3 on 8×8 maps) at
batch 64 took 118 µs a call there against 30 µs here, on a 2-core AMD EPYC. With K > 1 models the layer is one
grouped convolution that oneDNN runs on its depthwise kernel, faster than this one (270 against 510 µs at K = 16),
and with three or more input channels its own kernels win too (733 against 832 µs for 3 → 16 channels on 32×32
maps), so only one model with one input channel comes here.

Each output is its bias plus the taps in (row, column) order, so it differs from oneDNN's by float rounding; each
example is computed alone. It runs where no gradient flows back through the layer: DP-SGD's clipped sum and
non-private training (``ghost.mean_gradient``), which both take a first layer's gradient at its output. Built
by ``arena kernels build`` and loaded by ``arena.engine.native`` (``ARENA_KERNELS=off``: never); where
``library()`` is None, or the tensors are not float32 on the CPU, ``conv2d`` returns None and torch's
convolution runs. The kernel only reads its inputs and writes a fresh tensor, so it needs no autograd.
"""

from __future__ import annotations

import ctypes
import functools
from typing import cast

import torch
from torch import nn

from arena.engine import conv_kernel, native

SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* geometry g[16] as arena.engine.conv_kernel's: B, K (1), C (1), O, H, W, Ho, Wo, kh, kw, stride h/w, padding h/w,
   dilation h/w. Input a [B][H][W], weight w [O][kh][kw], bias [O] or NULL, output out [B][Ho][Wo][O]. */
enum { NB, NK, NC, NO, NH, NW, NHO, NWO, KH, KW, SH, SW, PH, PW, DH, DW };
enum { SPAN = 8 };  /* output pixels of a row computed at once: independent chains of multiply-adds */

static inline int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

typedef float v16 __attribute__((vector_size(64)));
static inline v16 load16(const float *p) { v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void store16(float *p, v16 v) { memcpy(p, &v, sizeof v); }

/* out = conv(a, w) + bias for examples b < B: each example copied into a map with a zero border, so no read needs
   a bounds test; the taps' weights laid out [tap][O padded to 16] so one vector load takes 16 output channels, and
   SPAN pixels of an output row accumulate at once. Returns 0, or -1 without memory. */
int arena_conv_forward(const int64_t *g, const float *restrict a, const float *restrict w, const float *restrict bias,
                       float *restrict out) {
    const int64_t B = g[NB], O = g[NO], H = g[NH], W = g[NW], Ho = g[NHO], Wo = g[NWO];
    const int64_t taps = g[KH] * g[KW], Op = pad16(O), Hp = H + 2 * g[PH], Wp = W + 2 * g[PW], step = g[SW];
    float *buf = calloc(taps * Op + Op + Hp * Wp, sizeof(float));
    int64_t *off = malloc(sizeof(int64_t) * taps);
    if (!buf || !off) { free(buf); free(off); return -1; }
    float *wt = buf, *bt = wt + taps * Op, *xpad = bt + Op;
    for (int64_t t = 0; t < taps; t++) {
        off[t] = (t / g[KW]) * g[DH] * Wp + (t % g[KW]) * g[DW];
        for (int64_t o = 0; o < O; o++) wt[t * Op + o] = w[o * taps + t];
    }
    for (int64_t o = 0; o < O; o++) bt[o] = bias ? bias[o] : 0.0f;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) memcpy(xpad + (h + g[PH]) * Wp + g[PW], a + (b * H + h) * W, sizeof(float) * W);
        for (int64_t y = 0; y < Ho; y++)
            for (int64_t x0 = 0; x0 < Wo; x0 += SPAN) {
                const int64_t n = Wo - x0 < SPAN ? Wo - x0 : SPAN;
                const float *xs = xpad + y * g[SH] * Wp + x0 * step;
                for (int64_t o0 = 0; o0 < O; o0 += 16) {
                    v16 acc[SPAN];
                    for (int u = 0; u < SPAN; u++) acc[u] = load16(bt + o0);
                    if (n == SPAN)
                        for (int64_t t = 0; t < taps; t++) {
                            const v16 wv = load16(wt + t * Op + o0);
                            const float *xt = xs + off[t];
#pragma GCC unroll 8
                            for (int u = 0; u < SPAN; u++) acc[u] += xt[u * step] * wv;
                        }
                    else
                        for (int64_t t = 0; t < taps; t++) {
                            const v16 wv = load16(wt + t * Op + o0);
                            const float *xt = xs + off[t];
                            for (int u = 0; u < n; u++) acc[u] += xt[u * step] * wv;
                        }
                    const int64_t lanes = O - o0 < 16 ? O - o0 : 16;
                    for (int u = 0; u < n; u++) {
                        float *dst = out + ((b * Ho + y) * Wo + x0 + u) * O + o0;
                        if (lanes == 16)
                            store16(dst, acc[u]);
                        else
                            for (int64_t q = 0; q < lanes; q++) dst[q] = acc[u][q];
                    }
                }
            }
    }
    free(off);
    free(buf);
    return 0;
}
"""


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p = ctypes.c_void_p
    lib.arena_conv_forward.argtypes = [p, p, p, p, p]
    lib.arena_conv_forward.restype = ctypes.c_int
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, loaded once per process if built; None where it is not built or kernels are off."""
    return native.load("conv_forward", SOURCE, _bind)


def grouped_weight(w: torch.Tensor) -> torch.Tensor:
    """K models' convolution weights [K, O, C, kh, kw] as one grouped convolution's [K·O, C, kh, kw], in
    channels-last strides when C = 1: an input of one channel (K = 1, a grey image) is contiguous in both layouts,
    and torch would then give the output in NCHW, where the following pooling runs ~20× slower on CPU."""
    w = w.reshape(-1, *w.shape[2:])
    if w.shape[1] != 1:
        return w
    return w.view(w.shape[0], *w.shape[2:], 1).permute(0, 3, 1, 2)


def takes(m: nn.Conv2d, tensors: tuple[torch.Tensor, ...], K: int) -> bool:
    """Whether the kernel computes layer ``m`` of K models from these tensors (input, weights [K, O, C, kh, kw],
    bias): one model with one input channel, float32 on the CPU, the kernel built (elsewhere torch's convolution is
    the faster one). It then runs where no gradient flows back through the layer."""
    return (K == 1 and tensors[1].shape[2] == 1 and not isinstance(m.padding, str)
            and all(t.is_cpu and t.dtype == torch.float32 for t in tensors) and library() is not None)


def conv2d(m: nn.Conv2d, a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, K: int,
           out_size: tuple[int, int]) -> torch.Tensor | None:
    """Layer ``m`` of K models on ``a`` [B, K·C, H, W] (weights w [K, O, C, kh, kw], bias b [K, O]) by the kernel,
    [B, K·O, *out_size] in channels-last strides; None unless it ``takes`` them and no gradient flows back through
    the layer: DP-SGD's clipped sum and non-private training (``ghost.mean_gradient``) take the gradient at a first
    layer's output instead (a Python backward through it cost what the kernel saves: +62 against -72 µs a step of
    the digits CNN). None too where the kernel fails (no memory)."""
    tensors = (a, w) if b is None else (a, w, b)
    lib = library()
    if lib is None or not takes(m, tensors, K) or (
            torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return None
    B, _, H, W = a.shape
    O, (Ho, Wo) = w.shape[1], out_size
    ph, pw = cast(tuple[int, int], m.padding)
    geometry = (1, 1, O, H, W, Ho, Wo, *m.kernel_size, *m.stride, ph, pw, *m.dilation)
    out = torch.empty(B, Ho, Wo, O).permute(0, 3, 1, 2)  # channels-last strides
    args = [(a.contiguous(), True), (w.contiguous(), False), (None if b is None else b.contiguous(), False),
            (out, True)]
    return out if conv_kernel.over_examples(lib.arena_conv_forward, geometry, B, 1, args) else None
