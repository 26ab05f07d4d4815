"""The counter RNG in one pass of compiled C: the SplitMix64 words, Poisson coins (and the rows they sample) and
float32 normals that ``arena.engine.rng`` otherwise builds from ~20 eager int64 and ~40 float32 tensor passes; and
DP-SGD's noise added straight into the gradient sums, never written out as a tensor of normals, with the optimizer's
heavy-ball step taken in the same pass.

Only exact operations make the draws (64-bit integer arithmetic, integer-to-float conversions, float32 operations
each rounded once, no fused multiply-adds: ``arena.engine.box_muller``'s formula), so a draw is bit for bit the same
with or without the kernel (tests/engine/test_rng_kernel.py); a sum the noise is added to rounds once per element,
as torch's addition does.

Built by ``arena kernels build`` (never at run time) and loaded by ``arena.engine.native``
(``ARENA_KERNELS=off``: never); where ``library()`` is None the eager
tensor passes run instead.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from arena.engine import box_muller, native

SOURCE = r"""
#include <stdint.h>
""" + box_muller.C_SOURCE + r"""
#define GOLDEN 0x9E3779B97F4A7C15ULL
static inline uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}
/* out[s * models + k] = mix(streams[s] ^ keys[k]): the key of (already mixed) stream id s of model k */
void arena_stream_keys(const int64_t *keys, int64_t models, const int64_t *streams, int64_t n_streams, int64_t *out) {
    for (int64_t s = 0; s < n_streams; s++)
        for (int64_t k = 0; k < models; k++) out[s * models + k] = (int64_t)mix((uint64_t)(streams[s] ^ keys[k]));
}
/* out[r, c] = mix64(keys[r] + (first + c + 1) * GOLDEN), c < n; rows `stride` apart */
void arena_words(const int64_t *keys, int64_t rows, int64_t first, int64_t n, int64_t *out, int64_t stride) {
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        uint64_t *o = (uint64_t *)(out + r * stride);
        for (int64_t c = 0; c < n; c++) o[c] = mix(k + (uint64_t)(first + c + 1) * GOLDEN);
    }
}
/* out[r, c] = (word c of row r) >>> 11 < threshold: a coin with probability threshold / 2^53 */
void arena_bernoulli(const int64_t *keys, int64_t rows, int64_t n, int64_t threshold, uint8_t *out) {
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        uint8_t *o = out + r * n;
        for (int64_t c = 0; c < n; c++) o[c] = (int64_t)(mix(k + (uint64_t)(c + 1) * GOLDEN) >> 11) < threshold;
    }
}
/* per row, the counters c < n whose coin (as arena_bernoulli's) came up and whose present[r % models, c] is set
   (present NULL: all are), ascending in idx[r, :counts[r]], then zeros up to the largest count of rows
   r - r % models .. r - r % models + models - 1 (one step's models); the rest of idx is left unwritten */
void arena_sampled_rows(const int64_t *keys, int64_t rows, int64_t n, int64_t threshold, const uint8_t *present,
                        int64_t models, int64_t *idx, int64_t *counts) {
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        const uint8_t *pr = present ? present + (r % models) * n : 0;
        int64_t *o = idx + r * n, m = 0;
        uint8_t coin[256];
        for (int64_t c0 = 0; c0 < n; c0 += 256) {
            const int64_t w = n - c0 < 256 ? n - c0 : 256;
            for (int64_t j = 0; j < w; j++)  /* the hashes of a block first, vectorised */
                coin[j] = (int64_t)(mix(k + (uint64_t)(c0 + j + 1) * GOLDEN) >> 11) < threshold;
            if (pr)
                for (int64_t j = 0; j < w; j++) coin[j] &= pr[c0 + j] != 0;
            for (int64_t j = 0; j < w; j++) {
                o[m] = c0 + j;
                m += coin[j];
            }
        }
        counts[r] = m;
        if (r % models == models - 1) {  /* a step's last model: zeros up to the step's largest count */
            int64_t most = 0;
            for (int64_t q = r + 1 - models; q <= r; q++) most = counts[q] > most ? counts[q] : most;
            for (int64_t q = r + 1 - models; q <= r; q++)
                for (int64_t c = counts[q]; c < most; c++) idx[q * n + c] = 0;
        }
    }
}
/* pair first + c of row r: its fields k1 = x >>> (64 - bits), k2 = bits 31..32-bits of x through box_muller, r cos θ
   into cos_out[r, c] and r sin θ into sin_out[r, c]; rows `stride` apart. Blocks of 256: the hashes first, then
   the float32 arithmetic, each loop vectorised on its own. */
void arena_normals32(const int64_t *keys, int64_t rows, int64_t first, int64_t n, int64_t bits, float unit,
                     float *cos_out, float *sin_out, int64_t stride) {
    const uint32_t mask = (1u << bits) - 1u;
    uint32_t k1[256], k2[256];
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = (uint64_t)keys[r];
        float *co = cos_out + r * stride, *so = sin_out + r * stride;
        for (int64_t c0 = 0; c0 < n; c0 += 256) {
            const int64_t w = n - c0 < 256 ? n - c0 : 256;
            for (int64_t j = 0; j < w; j++) {
                const uint64_t x = mix(k + (uint64_t)(first + c0 + j + 1) * GOLDEN);
                k1[j] = (uint32_t)(x >> (64 - bits));
                k2[j] = ((uint32_t)x >> (32 - bits)) & mask;
            }
            for (int64_t j = 0; j < w; j++) box_muller(k1[j], k2[j], (int)bits, unit, co + c0 + j, so + c0 + j);
        }
    }
}
/* where the tensors' elements go: part p holds a row's elements start[p] .. start[p] + size[p] - 1 at
   ptr[p] + r * stride[p] (floats), and, for a heavy-ball step, the velocity's and the parameters' at velocity[p] and
   param[p] + the same offset, with weight decay l2[p] */
struct parts { int64_t n; const int64_t *ptr, *start, *size, *stride, *velocity, *param; const float *l2; };
/* element e0 + j of row r, j < w: g += alpha * src[j], then, if parts->velocity, the heavy-ball step as
   steps.HeavyBall.step takes it: g += l2 * w, g += momentum * v, w += -lr * g (g becomes the velocity); *part:
   a cursor that only moves forward */
static inline void add_range(float alpha, const float *src, int64_t e0, int64_t w, int64_t r, const struct parts *pt,
                             float momentum, float neg_lr, int64_t *part) {
    while (w > 0) {
        while (*part < pt->n && e0 >= pt->start[*part] + pt->size[*part]) (*part)++;
        if (*part == pt->n) return;
        const int64_t p = *part, start = pt->start[p], end = start + pt->size[p];
        if (e0 < start) {  /* elements no part holds */
            const int64_t skip = start - e0 < w ? start - e0 : w;
            src += skip; e0 += skip; w -= skip;
            continue;
        }
        const int64_t take = end - e0 < w ? end - e0 : w, at = r * pt->stride[p] + (e0 - start);
        float *g = (float *)pt->ptr[p] + at;
        if (pt->velocity) {
            const float *v = (const float *)pt->velocity[p] + at, decay = pt->l2[p];
            float *wt = (float *)pt->param[p] + at;
            for (int64_t j = 0; j < take; j++) {
                float x = g[j] + alpha * src[j];
                x = x + decay * wt[j];
                x = x + momentum * v[j];
                g[j] = x;
                wt[j] = wt[j] + neg_lr * x;
            }
        } else {
            for (int64_t j = 0; j < take; j++) g[j] = g[j] + alpha * src[j];
        }
        src += take; e0 += take; w -= take;
    }
}
/* alpha * the n float32 normals of model r's stream (its key: arena_stream_keys's of the mixed stream id and the
   model's key; the normals: arena_normals32's, pair c gives element c and element h + c, h = n/2 rounded up) added
   into the parts (and the heavy-ball step taken, velocity non-NULL), model by model, in blocks of 256 pairs that
   never leave the cache */
void arena_add_normals32(const int64_t *model_keys, int64_t rows, int64_t stream, int64_t n, int64_t bits,
                         float unit, float alpha, int64_t parts, const int64_t *ptr, const int64_t *start,
                         const int64_t *size, const int64_t *stride, const int64_t *velocity, const int64_t *param,
                         const float *l2, float momentum, float lr) {
    const struct parts pt = {parts, ptr, start, size, stride, velocity, param, l2};
    const uint32_t mask = (1u << bits) - 1u;
    const int64_t h = (n + 1) / 2;
    uint32_t k1[256], k2[256];
    float co[256], si[256];
    for (int64_t r = 0; r < rows; r++) {
        const uint64_t k = mix((uint64_t)(stream ^ model_keys[r]));
        int64_t cos_part = 0, sin_part = 0;
        for (int64_t c0 = 0; c0 < h; c0 += 256) {
            const int64_t w = h - c0 < 256 ? h - c0 : 256, w_sin = n - h - c0 < w ? n - h - c0 : w;
            for (int64_t j = 0; j < w; j++) {
                const uint64_t x = mix(k + (uint64_t)(c0 + j + 1) * GOLDEN);
                k1[j] = (uint32_t)(x >> (64 - bits));
                k2[j] = ((uint32_t)x >> (32 - bits)) & mask;
            }
            for (int64_t j = 0; j < w; j++) box_muller(k1[j], k2[j], (int)bits, unit, co + j, si + j);
            add_range(alpha, co, c0, w, r, &pt, momentum, -lr, &cos_part);
            if (w_sin > 0) add_range(alpha, si, h + c0, w_sin, r, &pt, momentum, -lr, &sin_part);
        }
    }
}
"""

def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i, f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
    lib.arena_stream_keys.argtypes = [p, i, p, i, p]
    lib.arena_words.argtypes = [p, i, i, i, p, i]
    lib.arena_bernoulli.argtypes = [p, i, i, i, p]
    lib.arena_sampled_rows.argtypes = [p, i, i, i, p, i, p, p]
    lib.arena_normals32.argtypes = [p, i, i, i, i, f, p, p, i]
    lib.arena_add_normals32.argtypes = [p, i, i, i, i, f, f, i, p, p, p, p, p, p, p, f, f]
    for fn in (lib.arena_stream_keys, lib.arena_words, lib.arena_bernoulli, lib.arena_sampled_rows,
               lib.arena_normals32, lib.arena_add_normals32):
        fn.restype = None
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled kernels, loaded once per process if built (``native.load``); None where they are not built
    or disabled."""
    return native.load("rng", SOURCE, _bind)


def usable(*tensors: torch.Tensor) -> ctypes.CDLL | None:
    """The library, if every tensor is a CPU tensor it can write or read directly (contiguous rows)."""
    if any(t.device.type != "cpu" for t in tensors):
        return None
    return library()
