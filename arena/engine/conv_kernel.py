"""A convolution's per-example gradient norms for ghost clipping (``arena.engine.ghost``) in compiled C, read
straight from the channels-last layer input and output gradient that the layer-by-layer path holds: per example,
either the weight gradient formed (``materialise``) or its ghost norm ⟨AᵀA, GᵀG⟩ from the input's Gram matrix,
and the bias gradient. The eager passes move each map to positions-first order first (a transposing copy of the
whole [B, K·C, H, W] tensor, then batched matmuls and the pair-map product); here each example's rows are read once
while its map is in cache (the digits CNN's DP-SGD / non-private at K = 64: 1.56× eager, 1.37× with the kernel, in
one side-by-side run on a 2-core AMD EPYC). ``arena.engine.conv_sum`` builds on the same C and helpers.

Built by ``arena kernels build`` (never at run time), loaded by ``arena.engine.native`` (``ARENA_KERNELS=off``:
never); where ``library()`` is None, or the tensors are not float32 channels-last maps on the CPU, ``norms``
returns None and the eager passes run. The two agree to float rounding (sums taken in another order). Each example
is computed alone, so a model's norms do not depend on the other models in its batch.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, cast

import torch
from torch import nn

from arena.engine import native

PRELUDE = r"""
/* fused multiply-adds allowed here (native.FLAGS turns them off for the other kernels): these sums need not match
   torch's roundings, only each other's */
#ifdef __clang__
#pragma STDC FP_CONTRACT ON
#else
#pragma GCC optimize("fp-contract=fast")
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* geometry g[16]: B, K, C, O, H, W, Ho, Wo, kh, kw, stride h/w, padding h/w, dilation h/w. Maps are channels-last:
   input a [B][H][W][K*C], output gradient d [B][Ho][Wo][K*O]; model k's channels of a pixel are contiguous. */
enum { NB, NK, NC, NO, NH, NW, NHO, NWO, KH, KW, SH, SW, PH, PW, DH, DW, NPLAN };

static inline int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

typedef float v16 __attribute__((vector_size(64)));  /* one AVX-512 register, or two or four narrower ones */
typedef int32_t vi16 __attribute__((vector_size(64)));
static inline v16 load16(const float *p) { v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void store16(float *p, v16 v) { memcpy(p, &v, sizeof v); }

/* rows of A^T G one block of the formed-gradient kernel computes at once: 9 vector accumulators of a 16-column
   block, enough chains of multiply-adds to hide their latency, and a divisor of a 3 x 3 kernel's C * 9 columns, so
   that no block computes rows past P (with 12, a one-channel layer's 9 columns took 12 rows' work: 0.66 against
   0.51 us an example of the digits CNN's first layer at K = 64) */
enum { ROWS = 9 };
"""
"""C shared by the convolution kernels' sources (``conv_sum``'s too): geometry, vectors, the block size."""

SOURCE = PRELUDE + r"""
/* out[r][q] = sum over t < T of u[r*ur + t*ut] * v[t*ldv + q], for r < R and q < Q rounded up to 4 and 16: u is
   zero at r from R up to that and v's rows past Q up to that; out has ldo >= pad16(Q) columns and pad16(R) rows.
   A 4 x 16 block of out stays in eight vector registers while t runs, even and odd t apart: eight chains of
   multiply-adds, not four, so that each waits less on the one before (a chain's add takes ~4 cycles). */
static void tn(const float *restrict u, int64_t ut, int64_t ur, int64_t R, const float *restrict v, int64_t ldv,
               int64_t Q, int64_t T, float *restrict out, int64_t ldo) {
    for (int64_t r0 = 0; r0 < R; r0 += 4)
        for (int64_t q0 = 0; q0 < Q; q0 += 16) {
            v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0}, e0 = {0}, e1 = {0}, e2 = {0}, e3 = {0};
            const float *u0 = u + r0 * ur;
            int64_t t = 0;
            for (; t + 2 <= T; t += 2) {
                const v16 vt = load16(v + t * ldv + q0), wt = load16(v + (t + 1) * ldv + q0);
                const float *uu = u0 + t * ut, *uw = uu + ut;
                c0 += uu[0] * vt;
                c1 += uu[ur] * vt;
                c2 += uu[2 * ur] * vt;
                c3 += uu[3 * ur] * vt;
                e0 += uw[0] * wt;
                e1 += uw[ur] * wt;
                e2 += uw[2 * ur] * wt;
                e3 += uw[3 * ur] * wt;
            }
            if (t < T) {
                const v16 vt = load16(v + t * ldv + q0);
                const float *uu = u0 + t * ut;
                c0 += uu[0] * vt;
                c1 += uu[ur] * vt;
                c2 += uu[2 * ur] * vt;
                c3 += uu[3 * ur] * vt;
            }
            store16(out + r0 * ldo + q0, c0 + e0);
            store16(out + (r0 + 1) * ldo + q0, c1 + e1);
            store16(out + (r0 + 2) * ldo + q0, c2 + e2);
            store16(out + (r0 + 3) * ldo + q0, c3 + e3);
        }
}

""" + native.DOT + r"""
/* per example n = b*K + k: its weight gradient A^T G (A its unfolded input [L][kh*kw*C], G its output gradient
   [L][O]) into weight[n][O][C*kh*kw] (the layout of the layer's weight), its bias gradient (G's column sums) into
   bias[n][O] (if bias), and both squared norms added into sq[n]. A is never formed: its row for output position l
   and its column for kernel offset (i, j) and channel c is a copy of the example's map with a zero border read at
   base[l] + off[(i, j, c)], so no read needs a bounds test, and ROWS columns of A^T G stay in vector registers
   while l runs. Returns 0, or -1 without memory. */
int arena_conv_materialise(const int64_t *g, const float *restrict a, const float *restrict d, float *restrict weight,
                           float *restrict bias, float *restrict sq) {
    const int64_t B = g[NB], K = g[NK], C = g[NC], O = g[NO], H = g[NH], W = g[NW], Ho = g[NHO], Wo = g[NWO];
    const int64_t offsets = g[KH] * g[KW], P = C * offsets, Lo = Ho * Wo, Op = pad16(O);
    const int64_t Pr = (P + ROWS - 1) / ROWS * ROWS, Hp = H + 2 * g[PH], Wp = W + 2 * g[PW];
    const int direct = O % 16 == 0;  /* G's rows read in place: nothing to pad */
    float *buf = calloc(Hp * Wp * C + (direct ? 0 : Lo * Op), sizeof(float));
    int64_t *off = malloc(sizeof(int64_t) * (Pr + Lo));
    if (!buf || !off) { free(buf); free(off); return -1; }
    float *xpad = buf, *Gbuf = xpad + Hp * Wp * C;
    int64_t *base = off + Pr;
    for (int64_t r = 0; r < Pr; r++) {  /* column r = (i*kw + j)*C + c; the block's columns past P repeat column 0 */
        const int64_t rr = r < P ? r : 0, ij = rr / C, c = rr % C;
        off[r] = ((ij / g[KW]) * g[DH] * Wp + (ij % g[KW]) * g[DW]) * C + c;
    }
    for (int64_t l = 0; l < Lo; l++) base[l] = ((l / Wo) * g[SH] * Wp + (l % Wo) * g[SW]) * C;
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t n = b * K + k;
            if (k + 1 < K)  /* the next model's rows are a map's row apart: fetched ahead, or each read waits */
                for (int64_t l = 0; l < Lo; l++)
                    for (int64_t o = 0; o < O; o += 16) __builtin_prefetch(d + (b * Lo + l) * K * O + (k + 1) * O + o);
            for (int64_t h = 0; h < H; h++)
                for (int64_t x = 0; x < W; x++) {
                    const float *src = a + ((b * H + h) * W + x) * K * C + k * C;
                    float *dst = xpad + ((h + g[PH]) * Wp + x + g[PW]) * C;
                    if (C == 1)
                        *dst = *src;
                    else
                        memcpy(dst, src, sizeof(float) * C);
                }
            const float *G = d + b * Lo * K * O + k * O;
            int64_t ldg = K * O;
            if (!direct) {
                for (int64_t l = 0; l < Lo; l++) memcpy(Gbuf + l * Op, G + l * K * O, sizeof(float) * O);
                G = Gbuf;
                ldg = Op;
            }
            float *out = weight + n * O * P;
            v16 squares = {0};  /* the lanes past O are zeros: G's padding */
            for (int64_t q0 = 0; q0 < O; q0 += 16) {
                const int64_t lanes = O - q0 < 16 ? O - q0 : 16;
                for (int64_t r0 = 0; r0 < P; r0 += ROWS) {
                    v16 acc[ROWS] = {{0}};
                    const int64_t *o = off + r0;
                    for (int64_t l = 0; l < Lo; l++) {
                        const v16 gl = load16(G + l * ldg + q0);
                        const float *x = xpad + base[l];
#pragma GCC unroll 9
                        for (int r = 0; r < ROWS; r++) acc[r] += x[o[r]] * gl;
                    }
                    for (int64_t r = r0; r < P && r < r0 + ROWS; r++) {
                        const int64_t p = (r % C) * offsets + r / C;  /* the weight's order: channel, then offset */
                        squares += acc[r - r0] * acc[r - r0];
                        for (int64_t q = 0; q < lanes; q++) out[(q0 + q) * P + p] = acc[r - r0][q];
                    }
                }
                if (bias) {
                    v16 sums = {0}, odd = {0};  /* G's column sums (the bias gradient) in two chains */
                    int64_t l = 0;
                    for (; l + 2 <= Lo; l += 2) {
                        sums += load16(G + l * ldg + q0);
                        odd += load16(G + (l + 1) * ldg + q0);
                    }
                    if (l < Lo)
                        sums += load16(G + l * ldg + q0);
                    sums += odd;
                    squares += sums * sums;
                    for (int64_t q = 0; q < lanes; q++) bias[n * O + q0 + q] = sums[q];
                }
            }
            float s = 0.0f;
            for (int q = 0; q < 16; q++) s += squares[q];
            sq[n] += s;
        }
    free(off);
    free(buf);
    return 0;
}

/* orders runs (A^T A start, Gram start, length) by the distance between their two starts, then by Gram start */
static int by_shift(const void *x, const void *y) {
    const int32_t *u = x, *v = y;
    const int64_t du = (int64_t)u[0] - u[1], dv = (int64_t)v[0] - v[1];
    if (du != dv) return du < dv ? -1 : 1;
    return (u[1] > v[1]) - (u[1] < v[1]);
}

/* appends one packed vector: its G^T G start, its Gram start, and which of its 16 lanes hold entries */
static inline void emit(int32_t *vecs, int64_t *nvec, int64_t start, int64_t shift, uint32_t bits) {
    int32_t *v = vecs + 3 * (*nvec)++;
    v[0] = (int32_t)(start + shift), v[1] = (int32_t)start, v[2] = (int32_t)bits;
}

/* The reads of the ghost norm below, for a geometry: where A^T A[l][l'] sums the input's Gram matrix X X^T at the
   pixels that output positions l and l' read under each kernel offset that keeps both inside the map (zero padding
   adds nothing), those reads listed as runs along an output row (a run of A^T A's row l and of a Gram row, the
   Gram's entries `stride` apart). At stride 1 the runs' entries are packed into vectors of 16 Gram entries, each
   lane at the same distance from its A^T A entry (a run's entries all are), so one masked vector takes the entries
   of several runs: of runs along consecutive rows of a small map, whole rows at once. Sorted by that distance and
   Gram position, each run's entries ascend, and no two runs of one distance share an entry. Writes the plan's
   triples (runs, or vectors: G^T G start, Gram start, lanes) into plan when `capacity` int32s hold them; returns
   how many int32s they take, or -1 without memory or where a Gram matrix has more entries than int32 offsets
   reach. Made once per geometry: the sort is most of a call's fixed cost. */
int64_t arena_conv_ghost_plan(const int64_t *g, int32_t *plan, int64_t capacity) {
    const int64_t H = g[NH], W = g[NW], Ho = g[NHO], Wo = g[NWO];
    const int64_t Li = H * W, Lo = Ho * Wo, Lip = pad16(Li), Lop = pad16(Lo), stride = g[SW];
    if (Lip * Lip > INT32_MAX || Lo * Lop > INT32_MAX) return -1;
    int32_t *runs = malloc(sizeof(int32_t) * 3 * (g[KH] * g[KW] * Lo * Ho + 1));
    if (!runs) return -1;
    int64_t nruns = 0;
    for (int64_t i = 0; i < g[KH]; i++)
        for (int64_t j = 0; j < g[KW]; j++) {
            int64_t w0 = 0, w1 = Wo;  /* the output columns whose input column under offset j is on the map */
            while (w0 < Wo && w0 * g[SW] + j * g[DW] - g[PW] < 0) w0++;
            while (w1 > w0 && (w1 - 1) * g[SW] + j * g[DW] - g[PW] >= W) w1--;
            if (w0 >= w1) continue;
            const int64_t wi0 = w0 * g[SW] + j * g[DW] - g[PW];
            for (int64_t ho2 = 0; ho2 < Ho; ho2++) {  /* consecutive runs in different rows of A^T A */
                const int64_t hi2 = ho2 * g[SH] + i * g[DH] - g[PH];
                if (hi2 < 0 || hi2 >= H) continue;
                for (int64_t ho = 0; ho < Ho; ho++) {
                    const int64_t hi = ho * g[SH] + i * g[DH] - g[PH];
                    if (hi < 0 || hi >= H) continue;
                    for (int64_t wo = w0; wo < w1; wo++) {
                        const int64_t pix = hi * W + wo * g[SW] + j * g[DW] - g[PW];
                        runs[3 * nruns] = (int32_t)((ho * Wo + wo) * Lop + ho2 * Wo + w0);  /* in A^T A */
                        runs[3 * nruns + 1] = (int32_t)(pix * Lip + hi2 * W + wi0);         /* in the Gram */
                        runs[3 * nruns + 2] = (int32_t)(w1 - w0);
                        nruns++;
                    }
                }
            }
        }
    if (stride != 1) {
        if (3 * nruns <= capacity) memcpy(plan, runs, sizeof(int32_t) * 3 * nruns);
        free(runs);
        return 3 * nruns;
    }
    int64_t nvec = 0, entries = 0;
    for (int64_t r = 0; r < nruns; r++) entries += runs[3 * r + 2];
    int32_t *vecs = malloc(sizeof(int32_t) * 3 * (entries + 1));
    if (!vecs) { free(runs); return -1; }
    qsort(runs, nruns, 3 * sizeof(int32_t), by_shift);
    for (int64_t r = 0; r < nruns;) {
        const int64_t shift = (int64_t)runs[3 * r] - runs[3 * r + 1];
        int64_t start = -1;
        uint32_t bits = 0;
        for (; r < nruns && (int64_t)runs[3 * r] - runs[3 * r + 1] == shift; r++)
            for (int32_t t = 0; t < runs[3 * r + 2]; t++) {
                const int64_t e = runs[3 * r + 1] + t;
                if (start >= 0 && e >= start + 16) {
                    emit(vecs, &nvec, start, shift, bits);
                    start = -1;
                }
                if (start < 0) start = e, bits = 0;
                bits |= 1u << (e - start);
            }
        emit(vecs, &nvec, start, shift, bits);
    }
    if (3 * nvec <= capacity) memcpy(plan, vecs, sizeof(int32_t) * 3 * nvec);
    free(vecs);
    free(runs);
    return 3 * nvec;
}

/* per example: the ghost norm <A^T A, G^T G> of its weight gradient, from `plan` (arena_conv_ghost_plan's, g[NPLAN]
   triples): each run or vector of its Gram's entries times the same run of G^T G, never forming A^T A. Its bias
   gradient into bias[n][O] (if bias); both squared norms added into sq[n]. Each example's maps are first moved
   channels-first into small buffers. Returns 0, or -1 without memory. */
int arena_conv_ghost(const int64_t *g, const int32_t *restrict plan, const float *restrict a,
                     const float *restrict d, float *restrict bias, float *restrict sq) {
    const int64_t B = g[NB], K = g[NK], C = g[NC], O = g[NO], H = g[NH], W = g[NW], Ho = g[NHO], Wo = g[NWO];
    const int64_t Li = H * W, Lo = Ho * Wo, Lip = pad16(Li), Lop = pad16(Lo), stride = g[SW], count = g[NPLAN];
    float *buf = calloc(C * Lip + O * Lop + Lip * Lip + Lop * Lop + O + 16, sizeof(float));
    if (!buf) return -1;
    float *xt = buf, *dt = xt + C * Lip, *gram = dt + O * Lop, *gtg = gram + Lip * Lip;
    float *bsum = gtg + Lop * Lop;  /* tn writes Lo rounded up to 4 rows; bsum is gtg's slack */
    const vi16 lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t n = b * K + k;
            if (k + 1 < K) {  /* the next model's rows are a map's row apart: fetched ahead, or each read waits */
                for (int64_t l = 0; l < Lo; l++)
                    for (int64_t o = 0; o < O; o += 16) __builtin_prefetch(d + (b * Lo + l) * K * O + (k + 1) * O + o);
                for (int64_t p = 0; p < Li; p++)
                    for (int64_t c = 0; c < C; c += 16) __builtin_prefetch(a + (b * Li + p) * K * C + (k + 1) * C + c);
            }
            for (int64_t p = 0; p < Li; p++) {  /* channels first: the Grams' sums run over channels */
                const float *row = a + (b * Li + p) * K * C + k * C;
                for (int64_t c = 0; c < C; c++) xt[c * Lip + p] = row[c];
            }
            memset(bsum, 0, sizeof(float) * O);
            for (int64_t l = 0; l < Lo; l++) {
                const float *row = d + (b * Lo + l) * K * O + k * O;
                for (int64_t o = 0; o < O; o++) dt[o * Lop + l] = row[o];
                for (int64_t o = 0; o < O; o++) bsum[o] += row[o];
            }
            tn(xt, Lip, 1, Li, xt, Lip, Li, C, gram, Lip);
            tn(dt, Lop, 1, Lo, dt, Lop, Lo, O, gtg, Lop);
            /* <A^T A, G^T G> run by run: each run of Gram entries times its run of G^T G, never forming A^T A */
            float s = 0.0f;
            if (stride == 1) {  /* a masked vector a step, in two chains, summed into a double every 256 vectors */
                v16 even = {0}, odd = {0};
                double total = 0.0;
                for (int64_t v = 0; v < count; v++) {
                    const int32_t *u = plan + 3 * v;
                    const vi16 keep = -((((vi16){0} + u[2]) >> lanes) & 1);
                    const v16 term = (v16)((vi16)load16(gram + u[1]) & keep) * load16(gtg + u[0]);
                    if (v & 1) odd += term; else even += term;
                    if ((v & 255) == 255 || v + 1 == count) {
                        even += odd;
                        for (int l = 0; l < 16; l++) total += even[l];
                        even = (v16){0}, odd = (v16){0};
                    }
                }
                s = (float)total;
            } else {  /* runs `stride` apart in the Gram: each run's sum, then the total in double */
                double total = 0.0;
                for (int64_t r = 0; r < count; r++) {
                    const int32_t *run = plan + 3 * r;
                    const float *out = gtg + run[0], *in = gram + run[1];
                    float part = 0.0f;
                    for (int32_t t = 0; t < run[2]; t++) part += in[t * stride] * out[t];
                    total += part;
                }
                s = (float)total;
            }
            if (bias) {
                s += dot(bsum, bsum, O);
                memcpy(bias + n * O, bsum, sizeof(float) * O);
            }
            sq[n] += s;
        }
    free(buf);
    return 0;
}
"""


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p = ctypes.c_void_p
    lib.arena_conv_materialise.argtypes = lib.arena_conv_ghost.argtypes = [p, p, p, p, p, p]
    lib.arena_conv_materialise.restype = lib.arena_conv_ghost.restype = ctypes.c_int
    lib.arena_conv_ghost_plan.argtypes = [p, p, ctypes.c_int64]
    lib.arena_conv_ghost_plan.restype = ctypes.c_int64
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernel, loaded once per process if built; None where it is not built or kernels are off."""
    return native.load("conv", SOURCE, _bind)


class Norms(NamedTuple):
    """One convolution's share of its examples' squared gradient norms [B, K], and the per-example gradients the
    clipped sum reuses: ``held["bias"]`` [B, K, O] when the layer has a bias, ``held["weight"]`` [B, K, O, P]
    when materialised."""

    sq: torch.Tensor
    held: dict[str, torch.Tensor]


def channels_last(t: torch.Tensor) -> bool:
    return t.is_cpu and t.dtype == torch.float32 and t.ndim == 4 and t.is_contiguous(memory_format=torch.channels_last)


MIN_EXAMPLES_PER_THREAD = 64
"""Examples (of all K models) each of torch's intra-op threads takes at least: a call with fewer runs on fewer
threads, one at K = 1's usual batch, where a thread's hand-off would cost more than it saves."""

_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}


def pool(workers: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads for this process (a forked child makes its own: the parent's threads are not
    in it). ctypes releases the GIL during a call, so the threads run the kernel at once."""
    key = (os.getpid(), workers)
    if key not in _pools:
        _pools[key] = ThreadPoolExecutor(workers, thread_name_prefix="arena-conv")
    return _pools[key]


def geometry(m: nn.Conv2d, a: torch.Tensor, G: torch.Tensor, K: int) -> tuple[int, ...]:
    """The kernels' geometry g[1:] of layer ``m`` of K models on maps ``a`` [B, K·C, H, W], ``G`` [B, K·O, ...]."""
    (_, KC, H, W), (KO, Ho, Wo) = a.shape, G.shape[1:]
    ph, pw = cast(tuple[int, int], m.padding)
    return (K, KC // K, KO // K, H, W, Ho, Wo, *m.kernel_size, *m.stride, ph, pw, *m.dilation)


def norms(m: nn.Conv2d, a: torch.Tensor, G: torch.Tensor, K: int, materialise: bool) -> Norms | None:
    """Layer ``m``'s per-example squared gradient norms from its input ``a`` [B, K·C, H, W] and output gradient
    ``G`` [B, K·O, Ho, Wo] (K models' channels, channels-last float32 on the CPU), and what ``Norms.held`` keeps;
    None where the kernel cannot take them (then the eager passes run)."""
    if not (channels_last(a) and channels_last(G)) or isinstance(m.padding, str):
        return None
    lib = library()
    if lib is None:
        return None
    B, shape = a.shape[0], geometry(m, a, G, K)
    C, O = shape[1], shape[2]
    sq = torch.zeros(B, K)
    held = {"bias": torch.empty(B, K, O)} if m.bias is not None else {}
    if materialise:
        held["weight"] = torch.empty(B, K, O, C * m.kernel_size[0] * m.kernel_size[1])
        args = [(t, True) for t in (a, G, held["weight"], held.get("bias"), sq)]
        done = over_examples(lib.arena_conv_materialise, shape, B, K, args)
    else:
        plan = _ghost_plan(shape[1:])
        args = [(plan, False)] + [(t, True) for t in (a, G, held.get("bias"), sq)]
        done = plan is not None and over_examples(lib.arena_conv_ghost, (*shape, plan.numel() // 3), B, K, args)
    return Norms(sq, held) if done else None


@functools.lru_cache(maxsize=64)
def _ghost_plan(shape: tuple[int, ...]) -> torch.Tensor | None:
    """``arena_conv_ghost_plan``'s reads for a geometry (C, O, H, W, Ho, Wo, kernel, stride, padding, dilation):
    int32 triples, made once per geometry; None where the kernel cannot take it."""
    lib = library()
    assert lib is not None  # only ``norms`` asks, once it has the kernel
    g = (ctypes.c_int64 * 16)(0, 1, *shape)
    size = lib.arena_conv_ghost_plan(g, None, 0)
    if size < 0:
        return None
    plan = torch.empty(max(size, 1), dtype=torch.int32)
    return plan[:size] if lib.arena_conv_ghost_plan(g, plan.data_ptr(), size) == size else None


def over_examples(kernel: Callable[..., int], shape: tuple[int, ...], B: int, K: int,
                  args: Sequence[tuple[torch.Tensor | None, bool]]) -> bool:
    """``kernel((b1 - b0, *shape), *pointers)`` over examples b0 <= b < b1 of every model, split across torch's
    intra-op threads: ``args`` are each tensor (None: a null pointer) and whether it holds a row per example (row b
    of it is example b of all K models), whose pointer then starts at row b0. True where every call returned 0.
    A kernel computes each example alone, so the split changes no bit of the result."""
    at = [(0, 0) if t is None else (t.data_ptr(), t.stride(0) * t.element_size() if rows else 0) for t, rows in args]

    def rows(b0: int, b1: int) -> int:
        pointers = [p + b0 * step if p else None for p, step in at]
        return kernel((ctypes.c_int64 * (1 + len(shape)))(b1 - b0, *shape), *pointers)

    parts = max(1, min(torch.get_num_threads(), B * K // MIN_EXAMPLES_PER_THREAD, B))
    if parts == 1:
        return rows(0, B) == 0
    bounds = [B * i // parts for i in range(parts + 1)]
    return not any(pool(parts).map(rows, bounds[:-1], bounds[1:]))
