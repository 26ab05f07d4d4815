"""A ghost-normed convolution's clipped weight-gradient sum in compiled C, after the clip factors: per model,
Σ_b c_b·(example b's weight gradient A_bᵀG_b), read from the channels-last maps the layer-by-layer path holds
(``arena.engine.ghost``), the factors folded into its copies of the input, nothing formed per example. oneDNN's
grouped weight backward of the factor-scaled output gradient, which it replaces, took ~1.3× the time for the
digits CNN's second layer at K = 16 (2.11 against 1.68 ms) and ~1.6× at K = 1 (175 against 107 µs) on a 2-core
AMD EPYC; the kernel runs near that machine's multiply-add peak. Non-private training of one grey model takes its
first layer's weight gradient here too (factors 1).

Built by ``arena kernels build`` (never at run time) and loaded by ``arena.engine.native``
(``ARENA_KERNELS=off``: never) from ``conv_kernel``'s shared C; where
``library()`` is None, or the tensors are not float32 channels-last maps on the CPU, ``weight_sum`` returns None
and oneDNN's backward runs. The two agree to float rounding. A model's sum reads only its own examples, in order,
so it is the same alone or in any batch, and on any number of threads (they split the models).
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import nn

from arena.engine import conv_kernel, native

SOURCE = conv_kernel.PRELUDE + r"""
/* one block of the weight sum: ROWS columns of A^T G times `halves` 16-channel blocks of G (q0 on), summed over the
   chunk's n examples and all positions in vector registers, then added into out. Two halves at once: each
   position's ROWS scalar reads of the map serve twice the multiply-adds (a read each per multiply-add was the
   bound). `halves` is a constant at each call, so the compiler makes one copy for each. */
static inline __attribute__((always_inline)) void sum_block(
        const int halves, const float *restrict xs, int64_t map, const float *restrict gs, int64_t rows, int64_t Op,
        int64_t n, int64_t Lo, const int64_t *restrict base, const int64_t *restrict o, float *restrict out,
        int64_t q0, int64_t O, int64_t P, int64_t r0, int64_t C, int64_t offsets) {
    v16 acc[2][ROWS] = {{{0}}};
    int64_t oo[ROWS];
    for (int r = 0; r < ROWS; r++) oo[r] = o[r];
    for (int64_t e = 0; e < n; e++) {
        const float *xe = xs + e * map, *ge = gs + e * rows;
        for (int64_t l = 0; l < Lo; l++) {
            const float *x = xe + base[l];
            const v16 g0 = load16(ge + l * Op);
#pragma GCC unroll 9
            for (int r = 0; r < ROWS; r++) acc[0][r] += x[oo[r]] * g0;
            if (halves == 2) {
                const v16 g1 = load16(ge + l * Op + 16);
#pragma GCC unroll 9
                for (int r = 0; r < ROWS; r++) acc[1][r] += x[oo[r]] * g1;
            }
        }
    }
    for (int h = 0; h < halves; h++) {
        const int64_t lanes = O - q0 - 16 * h < 16 ? O - q0 - 16 * h : 16;
        for (int64_t r = r0; r < P && r < r0 + ROWS; r++) {
            const int64_t p = (r % C) * offsets + r / C;  /* the weight's order: channel, then offset */
            for (int64_t q = 0; q < lanes; q++) out[(q0 + 16 * h + q) * P + p] += acc[h][r - r0][q];
        }
    }
}

/* for models k0 <= k < k1: the clipped sum of its examples' weight gradients, sum over b of c[k][b] A_b^T G_b (c
   NULL: 1), into weight[k][O][C*kh*kw] (overwritten). The materialising kernel's blocks, each kept in registers
   while l runs over all of a chunk's examples, not one: each example's map is copied (times its factor) into a
   buffer with a zero border and its output gradient into rows padded to 16 channels, a chunk of examples at a
   time, so that nothing is formed per example. One model's sum never reads another's, and its examples go in
   order, so it is the same alone or in any batch. Returns 0, or -1 without memory. */
int arena_conv_weight_sum(const int64_t *g, int64_t k0, int64_t k1, const float *restrict a,
                          const float *restrict d, const float *restrict c, float *restrict weight) {
    const int64_t B = g[NB], K = g[NK], C = g[NC], O = g[NO], H = g[NH], W = g[NW], Ho = g[NHO], Wo = g[NWO];
    const int64_t offsets = g[KH] * g[KW], P = C * offsets, Lo = Ho * Wo, Op = pad16(O);
    const int64_t Pr = (P + ROWS - 1) / ROWS * ROWS, Hp = H + 2 * g[PH], Wp = W + 2 * g[PW];
    const int64_t map = Hp * Wp * C, rows = Lo * Op;
    int64_t chunk = (1 << 18) / (map + rows);  /* examples whose copies fit ~1 MiB */
    chunk = chunk < 1 ? 1 : chunk > B ? B : chunk;
    float *buf = calloc(chunk * (map + rows) + 1, sizeof(float));
    int64_t *off = malloc(sizeof(int64_t) * (Pr + Lo));
    if (!buf || !off) { free(buf); free(off); return -1; }
    float *xs = buf, *gs = xs + chunk * map;
    int64_t *base = off + Pr;
    for (int64_t r = 0; r < Pr; r++) {  /* column r = (i*kw + j)*C + c; the block's columns past P repeat column 0 */
        const int64_t rr = r < P ? r : 0, ij = rr / C, ch = rr % C;
        off[r] = ((ij / g[KW]) * g[DH] * Wp + (ij % g[KW]) * g[DW]) * C + ch;
    }
    for (int64_t l = 0; l < Lo; l++) base[l] = ((l / Wo) * g[SH] * Wp + (l % Wo) * g[SW]) * C;
    for (int64_t k = k0; k < k1; k++) {
        float *out = weight + k * O * P;
        memset(out, 0, sizeof(float) * O * P);
        for (int64_t b0 = 0; b0 < B; b0 += chunk) {
            const int64_t n = B - b0 < chunk ? B - b0 : chunk;
            for (int64_t e = 0; e < n; e++) {
                const int64_t b = b0 + e;
                const float f = c ? c[k * B + b] : 1.0f;
                for (int64_t h = 0; h < H; h++)
                    for (int64_t x = 0; x < W; x++) {
                        const float *src = a + ((b * H + h) * W + x) * K * C + k * C;
                        float *dst = xs + e * map + ((h + g[PH]) * Wp + x + g[PW]) * C;
                        for (int64_t ch = 0; ch < C; ch++) dst[ch] = f * src[ch];
                    }
                for (int64_t l = 0; l < Lo; l++)
                    memcpy(gs + e * rows + l * Op, d + (b * Lo + l) * K * O + k * O, sizeof(float) * O);
            }
            for (int64_t q0 = 0; q0 < O; q0 += 32)
                for (int64_t r0 = 0; r0 < P; r0 += ROWS) {
                    if (O - q0 > 16)
                        sum_block(2, xs, map, gs + q0, rows, Op, n, Lo, base, off + r0, out, q0, O, P, r0, C, offsets);
                    else
                        sum_block(1, xs, map, gs + q0, rows, Op, n, Lo, base, off + r0, out, q0, O, P, r0, C, offsets);
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
    lib.arena_conv_weight_sum.argtypes = [p, ctypes.c_int64, ctypes.c_int64, p, p, p, p]
    lib.arena_conv_weight_sum.restype = ctypes.c_int
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, loaded once per process if built; None where it is not built or kernels are off."""
    return native.load("conv_sum", SOURCE, _bind)


def weight_sum(m: nn.Conv2d, a: torch.Tensor, G: torch.Tensor, factors: torch.Tensor | None,
               K: int) -> torch.Tensor | None:
    """Layer ``m``'s clipped weight-gradient sum [K, O, C, kh, kw] of K models: Σ_b factors[k, b]·(example b's
    weight gradient), from its input ``a`` and output gradient ``G`` as ``conv_kernel.norms`` reads them and the
    clip factors [K, B] (None: 1, a non-private sum); None where the kernel cannot take them (then a grouped
    convolution's weight backward runs). Models are split across torch's intra-op threads; with fewer models than
    threads and examples enough for them, oneDNN's backward, which splits the examples, is left to run."""
    if not (conv_kernel.channels_last(a) and conv_kernel.channels_last(G)) or isinstance(m.padding, str) or (
            factors is not None and factors.dtype != torch.float32):
        return None
    threads = torch.get_num_threads()
    if threads > K and a.shape[0] * K >= 2 * conv_kernel.MIN_EXAMPLES_PER_THREAD:
        return None
    lib = library()
    if lib is None:
        return None
    B, shape = a.shape[0], conv_kernel.geometry(m, a, G, K)
    g = (ctypes.c_int64 * 16)(B, *shape)
    out = torch.empty(K, shape[2], shape[1], *m.kernel_size)
    c = None if factors is None else factors.contiguous()
    pointers = (a.data_ptr(), G.data_ptr(), None if c is None else c.data_ptr(), out.data_ptr())

    def models(k0: int, k1: int) -> int:
        return lib.arena_conv_weight_sum(g, k0, k1, *pointers)

    parts = max(1, min(threads, K, B * K // conv_kernel.MIN_EXAMPLES_PER_THREAD))
    bounds = [K * i // parts for i in range(parts + 1)]
    failed = models(0, K) if parts == 1 else any(conv_kernel.pool(parts).map(models, bounds[:-1], bounds[1:]))
    return None if failed else out
