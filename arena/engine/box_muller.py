"""Box–Muller in float32 from exact operations only, so that compiled C and eager torch give the same bits.

A pair of 24-bit integer fields (k₁, k₂) gives r = √(−2 ln u₁), u₁ = (k₁ + 1)·2⁻²⁴, and θ = 2π·k₂·2⁻²⁴; the pair's
normals are r·cos θ and r·sin θ. libm's and torch's log, sin and cos round differently, so here they are written
out in IEEE float32 additions, products and one division, each rounded once (the C is compiled without fused
multiply-adds), and the correctly rounded float32 square root, in the same order in ``eager`` and in ``C_SOURCE``
(torch's float32 root is not correctly rounded, so ``eager`` takes it in float64 and rounds; C's IEEE root is the same
value, as rounding a square root through float64 is innocuous: tests/engine/test_box_muller.py checks it):

* ln u₁ = (e − b)·ln 2 + ln m, with k₁ + 1 = m·2ᵉ read off the float's exponent bits and m reduced to [√½, √2);
  ln m = 2s + 2s·z·(1/3 + z/5 + z²/7 + z³/9), s = (m − 1)/(m + 1), z = s² (|s| ≤ 0.172: truncation < 1e-9);
* θ's octant comes from k₂'s top 3 bits, exactly; within it x ∈ [0, π/4] (reflected in odd octants), whose sine and
  cosine are their Taylor polynomials to x⁹ and x¹⁰ (truncation < 2e-9), then swapped and negated per octant.

The result is within a few float32 ulps of the libm formula (tests/engine/test_rng.py checks 2e-6 against it).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch


def _f32(x: float) -> float:
    """x rounded to the nearest float32, as a Python float (exactly representable both in C and in torch)."""
    return float(np.float32(x))


SQRT2 = _f32(math.sqrt(2.0))
LN2_HI = 0.693145751953125  # ln 2's leading 16 bits: (e − b)·LN2_HI is exact for |e − b| ≤ 2⁸
LN2_LO = _f32(math.log(2.0) - LN2_HI)
LOG_COEFFS = tuple(_f32(1.0 / k) for k in (9, 7, 5, 3))
"""ln m's series in z = s², innermost first: 1/9, 1/7, 1/5, 1/3."""
SIN_COEFFS = tuple(_f32((-1) ** k / math.factorial(2 * k + 1)) for k in (4, 3, 2, 1))
"""sin x = x + x·z·(−1/3! + z·(1/5! + z·(−1/7! + z/9!))), innermost first."""
COS_COEFFS = tuple(_f32((-1) ** k / math.factorial(2 * k)) for k in (5, 4, 3, 2, 1))
"""cos x = 1 + z·(−1/2! + z·(1/4! + z·(−1/6! + z·(1/8! − z/10!)))), innermost first."""


@functools.cache
def angle_unit(bits: int) -> float:
    """x per unit of the within-octant index: π/4 / 2^(bits − 3)."""
    return _f32(math.pi / 4 / 2.0 ** (bits - 3))


def eager(k1: torch.Tensor, k2: torch.Tensor, cos_out: torch.Tensor, sin_out: torch.Tensor, bits: int) -> None:
    """``cos_out`` = r·cos θ and ``sin_out`` = r·sin θ (float32) of the integer fields k₁, k₂ ∈ [0, 2^bits)
    (int32, bits ≤ 24), in torch, bit for bit what ``C_SOURCE``'s ``box_muller`` computes; selections are integer
    arithmetic and bit masks, as there (``torch.where`` is several times slower)."""
    word = (k1 + 1).to(torch.float32).view(torch.int32)
    m = ((word & 0x7FFFFF) | 0x3F800000).view(torch.float32)
    high = (m > SQRT2).to(torch.int32)
    m = m * (1.0 - 0.5 * high.to(torch.float32))
    e = ((word >> 23) + (high - 127 - bits)).to(torch.float32)
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    q = z * LOG_COEFFS[0] + LOG_COEFFS[1]
    for c in LOG_COEFFS[2:]:
        q = q * z + c
    s2 = s + s
    log_u = e * LN2_HI + (e * LN2_LO + (s2 + s2 * (z * q)))
    r = torch.sqrt((log_u * -2.0).double()).to(torch.float32)  # torch's float32 root is not correctly rounded

    octant, within = k2 >> (bits - 3), k2 & ((1 << (bits - 3)) - 1)
    x = (within + (octant & 1) * ((1 << (bits - 3)) - 2 * within)).to(torch.float32) * angle_unit(bits)
    z = x * x
    p = z * SIN_COEFFS[0] + SIN_COEFFS[1]
    for c in SIN_COEFFS[2:]:
        p = p * z + c
    sine = (x + x * (z * p)).view(torch.int32)
    p = z * COS_COEFFS[0] + COS_COEFFS[1]
    for c in COS_COEFFS[2:]:
        p = p * z + c
    cosine = (z * p + 1.0).view(torch.int32)
    swap = -(((octant + 1) >> 1) & 1)
    c_bits = (sine & swap) | (cosine & ~swap)
    s_bits = (cosine & swap) | (sine & ~swap)
    c_bits ^= (((octant + 2) >> 2) & 1) << 31
    s_bits ^= ((octant >> 2) & 1) << 31
    torch.mul(r, c_bits.view(torch.float32), out=cos_out)
    torch.mul(r, s_bits.view(torch.float32), out=sin_out)


def _c(x: float) -> str:
    """A float32 constant as an exact C hexadecimal literal."""
    return f"{x.hex()}f"


def _horner(coeffs: tuple[float, ...], var: str) -> str:
    expr = _c(coeffs[0])
    for c in coeffs[1:]:
        expr = f"({expr} * {var} + {_c(c)})"
    return expr


C_SOURCE = rf"""
#include <string.h>
static inline float bits_float(uint32_t u) {{ float f; memcpy(&f, &u, 4); return f; }}
static inline uint32_t float_bits(float f) {{ uint32_t u; memcpy(&u, &f, 4); return u; }}
/* eager()'s formula (arena/engine/box_muller.py), operation for operation; its selections as integer arithmetic
   and bit masks (exact), so that a loop over pairs vectorises */
static inline void box_muller(uint32_t k1, uint32_t k2, int bits, float unit, float *cos_out, float *sin_out) {{
    const uint32_t word = float_bits((float)(k1 + 1u));
    float m = bits_float((word & 0x7FFFFFu) | 0x3F800000u);
    const int32_t high = m > {_c(SQRT2)};
    m = m * (1.0f - 0.5f * (float)high);
    const float ef = (float)((int32_t)(word >> 23) + (high - 127 - bits));
    const float s = (m - 1.0f) / (m + 1.0f), z = s * s;
    const float q = {_horner(LOG_COEFFS, "z")};
    const float s2 = s + s;
    const float log_u = ef * {_c(LN2_HI)} + (ef * {_c(LN2_LO)} + (s2 + s2 * (z * q)));
    const float r = __builtin_sqrtf(log_u * -2.0f);  /* = the float64 root rounded: double rounding is innocuous */
    const uint32_t octant = k2 >> (bits - 3), within = k2 & ((1u << (bits - 3)) - 1u), odd = octant & 1u;
    const int32_t j = (int32_t)within + (int32_t)odd * ((int32_t)(1u << (bits - 3)) - 2 * (int32_t)within);
    const float x = (float)j * unit, zz = x * x;
    const uint32_t sine = float_bits(x + x * (zz * {_horner(SIN_COEFFS, "zz")}));
    const uint32_t cosine = float_bits(zz * {_horner(COS_COEFFS, "zz")} + 1.0f);
    const uint32_t swap = 0u - (((octant + 1u) >> 1) & 1u);
    const uint32_t c = (sine & swap) | (cosine & ~swap), sn = (cosine & swap) | (sine & ~swap);
    *cos_out = r * bits_float(c ^ ((((octant + 2u) >> 2) & 1u) << 31));
    *sin_out = r * bits_float(sn ^ (((octant >> 2) & 1u) << 31));
}}
"""
"""The C twin of ``eager`` (``unit``: ``angle_unit(bits)``), included in ``arena.engine.rng_kernel``'s source."""
