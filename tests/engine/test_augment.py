"""Augmentation: crops stay within the zero-padded image, flips mirror left-right, and each model's draws come
from its seed and the step alone (never from the other models or the size of its batch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from arena.engine import rng
from arena.engine.augment import Augment, augment
from arena.engine.batching import augmented, batches
from arena.engine.recipe import Recipe
from tests.conftest import architecture

K, B, C, H, W = 3, 40, 2, 5, 6
SEEDS = torch.tensor([11, 12, 13])


def _images() -> torch.Tensor:
    """[K, B, C, H, W] of distinct positive values, so every pixel of a crop tells where it came from."""
    return (torch.arange(K * B * C * H * W, dtype=torch.float64) + 1).reshape(K, B, C, H, W)


def _windows(image: torch.Tensor, pad: int) -> list[tuple[int, int, bool, torch.Tensor]]:
    """Every (dy, dx, mirrored, window) of the original size in the zero-padded image."""
    padded = F.pad(image, (pad, pad, pad, pad))
    out = []
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            window = padded[:, dy : dy + H, dx : dx + W]
            out += [(dy, dx, False, window), (dy, dx, True, window.flip(-1))]
    return out


def _placement(original: torch.Tensor, result: torch.Tensor, pad: int) -> tuple[int, int, bool]:
    matches = [(dy, dx, m) for dy, dx, m, w in _windows(original, pad) if torch.equal(w, result)]
    assert matches, "the augmented image is not a window of the padded image"
    return matches[0]


def test_every_crop_is_a_window_of_the_padded_image_and_all_offsets_occur():
    images, pad = _images(), 2
    seen = set()
    for step in range(4):  # 480 draws: each of the 25 offsets is missed with probability (24/25)^480 ~ 3e-9
        out = augment(images, Augment(crop=pad, flip=True), SEEDS, step=step)
        assert out.shape == images.shape
        seen |= {_placement(images[k, b], out[k, b], pad) for k in range(K) for b in range(B)}
    assert {(dy, dx) for dy, dx, _ in seen} == {(dy, dx) for dy in range(5) for dx in range(5)}
    assert {m for _, _, m in seen} == {False, True}


def test_flip_alone_mirrors_about_half_and_moves_nothing_else():
    images = _images()
    out = augment(images, Augment(flip=True), SEEDS, step=3)
    mirrored = torch.tensor([torch.equal(out[k, b], images[k, b].flip(-1)) for k in range(K) for b in range(B)])
    kept = torch.tensor([torch.equal(out[k, b], images[k, b]) for k in range(K) for b in range(B)])
    assert bool((mirrored ^ kept).all())
    assert 0.3 < mirrored.double().mean() < 0.7


def test_crop_alone_never_mirrors():
    images, pad = _images(), 1
    out = augment(images, Augment(crop=pad), SEEDS, step=0)
    assert not any(_placement(images[k, b], out[k, b], pad)[2] for k in range(K) for b in range(B)
                   if not torch.equal(out[k, b], out[k, b].flip(-1)))


def test_zero_crop_and_no_flip_is_the_identity():
    images = _images()
    assert not Augment().active and Augment(crop=1).active and Augment(flip=True).active
    assert torch.equal(augment(images, Augment(), SEEDS, step=5), images)
    arch = architecture("cnn", (C, H, W), 3)
    X, y = images.reshape(K, B, -1).float(), torch.zeros(K, B, dtype=torch.int64)
    recipe = Recipe(epochs=1, lr=0.1, batch_size=8)
    keys = rng.Keys(SEEDS)
    for (Xa, _, _), (Xb, _, _) in zip(augmented(batches(X, y, recipe, keys), arch, Augment(), keys),
                                      batches(X, y, recipe, keys)):
        assert torch.equal(Xa, Xb)


def test_negative_crop_is_rejected():
    with pytest.raises(ValueError):
        Augment(crop=-1)


@pytest.mark.parametrize("aug", [Augment(crop=2, flip=True), Augment(crop=1), Augment(flip=True)])
def test_draws_are_deterministic_per_model_seed_and_step(aug):
    images = _images()
    once = augment(images, aug, SEEDS, step=7)
    assert torch.equal(once, augment(images, aug, SEEDS, step=7))
    assert not torch.equal(once, augment(images, aug, SEEDS, step=8))
    assert not torch.equal(once, augment(images, aug, SEEDS + 100, step=7))


@pytest.mark.parametrize("aug", [Augment(crop=2, flip=True), Augment(crop=1), Augment(flip=True)])
def test_draws_do_not_depend_on_the_batch_composition(aug):
    """Model k augments alike alone or among other models, and the first b images alike in a batch of any size."""
    images = _images()
    together = augment(images, aug, SEEDS, step=2)
    for k in range(K):
        alone = augment(images[k : k + 1], aug, SEEDS[k : k + 1], step=2)
        assert torch.equal(alone, together[k : k + 1])
    shuffled = augment(images.flip(0), aug, SEEDS.flip(0), step=2)
    assert torch.equal(shuffled, together.flip(0))
    prefix = augment(images[:, :7], aug, SEEDS, step=2)
    assert torch.equal(prefix, together[:, :7])
    # the draws belong to (seed, step, position), not to the pixels: other images get the same placement
    other = augment(images * 2, aug, SEEDS, step=2)
    assert torch.equal(other, together * 2)
