"""PSNR, SSIM and the matching of reconstructions to records, against scikit-image and by hand."""

from __future__ import annotations

import numpy as np
import pytest

from arena.games.gradients.quality import PSNR_CAP, match, pairwise_mse, psnr, ssim

metrics = pytest.importorskip("skimage.metrics")


def images(seed: int, n: int = 6, shape: tuple[int, int] = (8, 8)) -> tuple[np.ndarray, np.ndarray]:
    """Fixed pairs: random images in [0, 1] and noisy, shifted and inverted versions of them."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, 1, *shape))
    b = np.stack([np.clip(a[0] + 0.1 * rng.standard_normal(a[0].shape), 0, 1), np.roll(a[1], 1, axis=-1),
                  1.0 - a[2], a[3] * 0.5, rng.random(a[4].shape), a[5]])
    return a, b


@pytest.mark.parametrize("shape", [(8, 8), (12, 9)])
def test_ssim_equals_scikit_image_on_fixed_images(shape) -> None:
    a, b = images(0, shape=shape)
    ours = ssim(a, b, data_range=1.0)
    theirs = [metrics.structural_similarity(x[0], y[0], data_range=1.0) for x, y in zip(a, b, strict=True)]
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    assert ours[5] == pytest.approx(1.0), "an image is identical to itself"


def test_ssim_of_colour_images_is_scikit_images_channel_mean() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((2, 3, 10, 10)), rng.random((2, 3, 10, 10))
    theirs = [metrics.structural_similarity(x, y, data_range=1.0, channel_axis=0) for x, y in zip(a, b, strict=True)]
    np.testing.assert_allclose(ssim(a, b, 1.0), theirs, rtol=1e-10)


@pytest.mark.parametrize("data_range", [1.0, 2.0])
def test_psnr_equals_scikit_image_on_fixed_images(data_range: float) -> None:
    a, b = images(2)
    a, b = a * data_range, b * data_range
    mse = np.diag(pairwise_mse(a.reshape(6, -1), b.reshape(6, -1)))
    ours = psnr(mse[:5], data_range)
    theirs = [metrics.peak_signal_noise_ratio(x, y, data_range=data_range) for x, y in zip(a[:5], b[:5], strict=True)]
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert psnr(mse[5:], data_range)[0] == pytest.approx(PSNR_CAP), "an exact copy scores the cap, not infinity"


def test_psnr_by_hand() -> None:
    assert psnr(np.array([0.01]), 1.0)[0] == pytest.approx(20.0)
    assert psnr(np.array([0.04]), 2.0)[0] == pytest.approx(20.0)


def test_matching_is_the_minimum_total_mse_assignment_not_the_greedy_one() -> None:
    records = np.array([[0.0], [1.0]])
    # greedy (record 0 takes its nearest, 0.45) leaves record 1 with 2.0: total 0.2025 + 1.0 = 1.2025;
    # the optimum gives record 0 -0.5 and record 1 0.45: 0.25 + 0.3025 = 0.5525
    recon = np.array([[0.45], [-0.5], [2.0]])
    assert match(records, recon).tolist() == [1, 0]
    with pytest.raises(ValueError, match="cannot be matched"):
        match(records, recon[:1])
