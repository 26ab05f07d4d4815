"""A convolution's per-example gradient norms for ghost clipping (``arena.engine.ghost``): which input pixels each
kernel offset reads, and the ghost norm ||G·Aᵀ||² from the input's Gram matrix, the unfolded input never formed."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn


def positions_first(t: torch.Tensor, K: int) -> torch.Tensor:
    """[B, K·C, H, W] (K models' channels) → [B·K, H·W, C]: each example's map with its positions first and its
    channels contiguous. From channels-last memory that is one copy that moves runs of C numbers (a quarter of the
    cost of [B·K, C, H·W] here), and batched matmuls read it as it is. The runs move as 16-byte elements where
    they can (``torch.complex128``: ~1.7× faster than copying their numbers one by one on CPU, the same bits)."""
    B, KC = t.shape[:2]
    C = KC // K
    runs = t.permute(0, 2, 3, 1).reshape(B, -1, K, C)
    per_run = 16 // t.element_size() if t.is_floating_point() and 16 % t.element_size() == 0 else 0
    if per_run and C % per_run == 0 and runs.is_contiguous() and runs.data_ptr() % 16 == 0:
        moved = runs.view(torch.complex128).transpose(1, 2).contiguous()
        return moved.view(t.dtype).reshape(B * K, -1, C)
    return runs.transpose(1, 2).reshape(B * K, -1, C)


def unfold(a: torch.Tensor, m: nn.Conv2d) -> torch.Tensor:
    """``F.unfold(a, ...)`` for ``m``'s kernel, stride, dilation and zero padding ([N, C·kh·kw, L] of a [N, C, H, W]
    in any memory format), as one strided view of the padded input, copied once: im2col's per-image loop took 2-3×
    as long on CPU (0.25 against 0.09 ms for 64 digits, 17 against 9 ms for 5,120)."""
    (kh, kw), (sh, sw), (dh, dw) = m.kernel_size, m.stride, m.dilation
    ph, pw = cast(tuple[int, int], m.padding)  # ``ghost_plan._kind`` admits numeric padding only
    x = F.pad(a, (pw, pw, ph, ph)).contiguous()
    N, C, Hp, Wp = x.shape
    Ho, Wo = (Hp - dh * (kh - 1) - 1) // sh + 1, (Wp - dw * (kw - 1) - 1) // sw + 1
    view = x.as_strided((N, C, kh, kw, Ho, Wo), (C * Hp * Wp, Hp * Wp, dh * Wp, dw, sh * Wp, sw))
    return view.reshape(N, C * kh * kw, Ho * Wo)


Offsets = tuple[tuple[slice, ...], ...]
"""Per kernel offset: (out_rows, out_cols, in_rows, in_cols) slices (``conv_offsets``)."""


def conv_offsets(m: nn.Conv2d, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> Offsets:
    """For each kernel offset (i, j): the output rows and columns whose input pixel under that offset lies inside
    the (unpadded) input, and those input rows and columns, as slices (out_rows, out_cols, in_rows, in_cols).
    Output h reads input row h·s + i·d − p."""

    def axis(k: int, n_in: int, n_out: int, s: int, d: int, p: int) -> tuple[slice, slice] | None:
        first = max(0, -(-(p - k * d) // s))
        last = min(n_out - 1, (n_in - 1 + p - k * d) // s)
        if first > last:
            return None
        start = first * s + k * d - p
        return slice(first, last + 1), slice(start, start + (last - first) * s + 1, s)

    assert not isinstance(m.padding, str)  # ``_kind`` admits numeric padding only
    out = []
    for i in range(m.kernel_size[0]):
        for j in range(m.kernel_size[1]):
            rows = axis(i, in_shape[1], out_shape[1], m.stride[0], m.dilation[0], m.padding[0])
            cols = axis(j, in_shape[2], out_shape[2], m.stride[1], m.dilation[1], m.padding[1])
            if rows and cols:
                out.append((rows[0], cols[0], rows[1], cols[1]))
    return tuple(out)


PAIR_MAP_LIMIT = 256
"""Largest (input pixels × output positions) of a map whose offsets' sub-block sums are one product with a 0/1
pair map (at most 256² entries): on a 4×4 map of 16 channels the whole norm took 16 ms instead of 29 ms (5,120
examples) and 0.22 ms instead of 0.63 ms (64), the nine strided sums' per-offset calls gone; past that size the
map, and the product's work, grow as the fourth power of the map's side."""


def pair_map(offsets: Offsets, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> torch.Tensor | None:
    """[Li·Li, Lo·Lo] float32 0/1 (or counts) matrix S with (XᵀX flattened) · S = AᵀA flattened: entry (p·Li + p',
    l·Lo + l') counts the kernel offsets under which output positions l, l' read input pixels p, p'. None when the
    map is larger than ``PAIR_MAP_LIMIT`` allows."""
    H, W = in_shape[1:]
    Ho, Wo = out_shape[1:]
    Li, Lo = H * W, Ho * Wo
    if Li * Lo > PAIR_MAP_LIMIT:
        return None
    S = torch.zeros(Li * Li, Lo * Lo)
    pixels, positions = torch.arange(Li).view(H, W), torch.arange(Lo).view(Ho, Wo)
    for out_rows, out_cols, in_rows, in_cols in offsets:
        p, l = pixels[in_rows, in_cols].reshape(-1), positions[out_rows, out_cols].reshape(-1)
        S.index_put_(((p[:, None] * Li + p).reshape(-1), (l[:, None] * Lo + l).reshape(-1)),
                     torch.ones(p.numel() ** 2), accumulate=True)
    return S


def conv_ghost_norm(
    in_shape: tuple[int, ...], out_shape: tuple[int, ...], offsets: Offsets, pairs: torch.Tensor | None,
    a: torch.Tensor, Gl: torch.Tensor, B: int, K: int,
) -> torch.Tensor:
    """||G·Aᵀ||² = ⟨AᵀA, GᵀG⟩ per example [B, K] for a convolution, A never formed: AᵀA[l, l'] is the sum over
    kernel offsets of the input Gram matrix XᵀX at the pixels that offset reads for output positions l and l'
    (zero padding contributes nothing, so each offset adds a sub-block): one product with ``pairs`` (``pair_map``)
    on small maps, else a strided sum per offset. Examples stay first, as the batched matmuls make them (moving
    them last for contiguous sub-block sums cost more in transposes than it saved). ``a`` [B, K·C, H, W] the
    layer's input, ``Gl`` [B·K, L, O] its output gradient (``positions_first``)."""
    H, W = in_shape[1:]
    Ho, Wo = out_shape[1:]
    n = B * K
    x = positions_first(a, K)
    gram = torch.bmm(x, x.mT).view(n, H, W, H, W)
    if pairs is not None:
        ata = torch.mm(gram.view(n, -1), pairs.to(gram))
    else:
        ata = gram.new_zeros(n, Ho, Wo, Ho, Wo)
        for out_rows, out_cols, in_rows, in_cols in offsets:
            ata[:, out_rows, out_cols, out_rows, out_cols] += gram[:, in_rows, in_cols, in_rows, in_cols]
    gtg = torch.bmm(Gl, Gl.mT).view(n, -1)  # [n, Lo·Lo]
    return torch.linalg.vecdot(ata.view(n, -1), gtg).view(B, K)
