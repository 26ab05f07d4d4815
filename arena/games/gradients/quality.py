"""Image-quality scores of reconstructions, and the optimal matching of reconstructions to records.

* PSNR = 10·log10(range² / MSE) over the record's features, ``range`` the data's (max − min); an exact copy
  (MSE below ``MSE_FLOOR``) scores the PSNR of that floor, ``PSNR_CAP`` dB, so that means stay finite.
* SSIM (Wang et al. 2004) as scikit-image's ``structural_similarity`` computes it by default: 7×7 uniform
  windows, sample covariances (N/(N − 1)), K1 = 0.01, K2 = 0.03, the mean over the windows that lie wholly inside
  the image (scikit-image averages over the image cropped by (7 − 1)/2, which is the same set of windows), the mean
  over channels for a multi-channel image.
* Matching: the reconstructions are assigned to the records one to one minimising the total MSE (the Hungarian
  method, ``scipy.optimize.linear_sum_assignment``); an attack may return more reconstructions than there are
  records (secure aggregation: every record in the aggregate), the extra ones are left unmatched.
"""

from __future__ import annotations

import math

import numpy as np

MSE_FLOOR = 1e-10
PSNR_CAP = 10.0 * math.log10(1.0 / MSE_FLOOR)
"""The PSNR of an exact copy, in dB, for data of range 1 (100 dB)."""
SSIM_WINDOW = 7
K1, K2 = 0.01, 0.03


def pairwise_mse(records: np.ndarray, reconstructions: np.ndarray) -> np.ndarray:
    """[len(records), len(reconstructions)] mean squared error between flat rows, in float64."""
    a, b = records.astype(np.float64), reconstructions.astype(np.float64)
    return ((a[:, None, :] - b[None, :, :]) ** 2).mean(axis=2)


def psnr(mse: np.ndarray, data_range: float) -> np.ndarray:
    """10·log10(range² / MSE) in dB, MSE floored at ``MSE_FLOOR``·range²."""
    mse = np.maximum(np.asarray(mse, dtype=np.float64), MSE_FLOOR * data_range**2)
    return 10.0 * np.log10(data_range**2 / mse)


def match(records: np.ndarray, reconstructions: np.ndarray) -> np.ndarray:
    """For each record, the index of the reconstruction matched to it (minimum total MSE, one to one); needs at
    least as many reconstructions as records."""
    if len(reconstructions) < len(records):
        raise ValueError(f"{len(reconstructions)} reconstructions cannot be matched to {len(records)} records")
    from scipy.optimize import linear_sum_assignment  # imported when scored: registering a game must stay cheap

    rows, cols = linear_sum_assignment(pairwise_mse(records, reconstructions))
    out = np.empty(len(records), dtype=np.int64)
    out[rows] = cols
    return out


def _windows(img: np.ndarray, w: int) -> np.ndarray:
    """Every w×w window lying wholly inside the [..., H, W] images, flattened: [..., nH, nW, w·w]."""
    view = np.lib.stride_tricks.sliding_window_view(img, (w, w), axis=(-2, -1))
    return view.reshape(*view.shape[:-2], w * w)


def ssim(a: np.ndarray, b: np.ndarray, data_range: float) -> np.ndarray:
    """SSIM of image pairs a[i], b[i], each [C, H, W] (H, W >= 7): the mean over windows and channels; [n]."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    if min(a.shape[-2:]) < SSIM_WINDOW:
        raise ValueError(f"SSIM needs images of at least {SSIM_WINDOW}×{SSIM_WINDOW}, got {a.shape[-2:]}")
    wa, wb = _windows(a, SSIM_WINDOW), _windows(b, SSIM_WINDOW)
    n = SSIM_WINDOW * SSIM_WINDOW
    ma, mb = wa.mean(-1), wb.mean(-1)
    va = ((wa - ma[..., None]) ** 2).sum(-1) / (n - 1)
    vb = ((wb - mb[..., None]) ** 2).sum(-1) / (n - 1)
    cov = ((wa - ma[..., None]) * (wb - mb[..., None])).sum(-1) / (n - 1)
    c1, c2 = (K1 * data_range) ** 2, (K2 * data_range) ** 2
    s = ((2 * ma * mb + c1) * (2 * cov + c2)) / ((ma**2 + mb**2 + c1) * (va + vb + c2))
    return s.reshape(len(a), -1).mean(axis=1)
