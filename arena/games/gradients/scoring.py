"""The gradients game's metrics: each trial's reconstructions matched to its client batch, scored by PSNR and SSIM;
the target's success at the PSNR threshold; label accuracy; κ for the reconstruction bounds.

``success_rate`` and ``label_accuracy`` are over the trials' targets (one per trial, independent given the global
model), so the board's intervals are exact binomial ones over the trials of every seed. ``psnr_mean``,
``ssim_mean`` and ``record_success_rate`` average over every record of every client batch: descriptive, since
records of one batch are not independent trials.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from arena.contracts.game import Outcome
from arena.contracts.metric import NON_NEGATIVE, UNIT, Metric
from arena.games.gradients.guess import GradientsGuess
from arena.games.gradients.quality import SSIM_WINDOW, match, pairwise_mse, psnr, ssim
from arena.games.reconstruction.game import kappa_estimate

METRICS = (
    Metric("target_success_rate", "gradients", True, "share of trials whose target is reconstructed above the PSNR "
           "threshold", UNIT, trials="n_trials"),
    Metric("target_psnr_mean", "gradients", True, "mean PSNR (dB) of each trial's target against its matched "
           "reconstruction", NON_NEGATIVE),
    Metric("target_psnr_median", "gradients", True, "median PSNR (dB) of the trials' targets", NON_NEGATIVE),
    Metric("psnr_mean", "gradients", True, "mean PSNR (dB) over every record of the client batches", NON_NEGATIVE),
    Metric("ssim_mean", "gradients", True, "mean SSIM over every record of the client batches (images)",
           (-1.0, 1.0)),
    Metric("record_success_rate", "gradients", True, "share of every batch record above the PSNR threshold "
           "(records of a batch are not independent)", UNIT),
    Metric("target_label_accuracy", "gradients", True, "share of targets whose matched reconstruction carries "
           "their label", UNIT, trials="n_trials"),
)

KAPPA_NEIGHBOURS = 3
KAPPA_SHIFTS = 3
_KAPPA: dict[bytes, tuple[float, int]] = {}
"""κ by its inputs' digest: every matchup of a seed scores against the same prior (seconds each otherwise)."""


def kappa(prior: np.ndarray, population: np.ndarray, radius: float) -> tuple[float, int]:
    """(κ, guesses searched): ``kappa_estimate`` with the client pool as the prior sample and success meaning MSE
    below ``radius``, the population among the guesses; kept per process."""
    h = hashlib.blake2b(digest_size=20)
    for part in (prior, population, np.array([radius])):
        h.update(np.ascontiguousarray(part, dtype=np.float64).tobytes())
    key = h.digest()
    if key not in _KAPPA:
        _KAPPA[key] = kappa_estimate(prior, np.full(len(prior), radius), population, neighbours=KAPPA_NEIGHBOURS,
                                     shift_steps=KAPPA_SHIFTS)
    return _KAPPA[key]


def _checked(attack: str, guess: Any, expected: int, d: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(records [expected, d] float64, labels [expected] or None), or a ValueError/TypeError naming the attack."""
    if not isinstance(guess, GradientsGuess):
        raise TypeError(f"attack {attack!r} returned {type(guess).__name__}, not a GradientsGuess")
    records = np.asarray(guess.records, dtype=np.float64)
    if records.ndim != 2 or records.shape != (expected, d):
        raise ValueError(f"attack {attack!r} returned records of shape {records.shape}, need {(expected, d)}")
    if not np.all(np.isfinite(records)):
        raise ValueError(f"attack {attack!r} returned non-finite reconstructions")
    labels = None if guess.labels is None else np.asarray(guess.labels).reshape(-1)
    if labels is not None and len(labels) != expected:
        raise ValueError(f"attack {attack!r} returned {len(labels)} labels for {expected} reconstructions")
    return records, labels


def score_trials(attack: str, guesses: list[Any], *, records: np.ndarray, labels: np.ndarray, target_pos: np.ndarray,
                 expected: int, prior: np.ndarray, population: np.ndarray, kind: str, shape: tuple[int, ...],
                 data_range: float, threshold: float, labels_known: bool) -> Outcome:
    """Score trial j's guess against ``records[j]`` [B, d] (labels ``labels[j]``), whose ``target_pos[j]``-th
    record is the target; ``prior`` is the client pool (the target's prior), ``population`` the attacker's."""
    J, B, d = records.shape
    image = kind == "image" and len(shape) == 3 and min(shape[1:]) >= SSIM_WINDOW
    matched = np.empty((J, B, d))
    psnrs, ssims = np.empty((J, B)), np.full((J, B), np.nan)
    label_hit: list[bool] = []
    returned_labels = True
    for j, guess in enumerate(guesses):
        recon, guessed = _checked(attack, guess, expected, d)
        idx = match(records[j], recon)
        matched[j] = recon[idx]
        psnrs[j] = psnr(np.diag(pairwise_mse(records[j], matched[j])), data_range)
        if image:
            ssims[j] = ssim(records[j].reshape(B, *shape), matched[j].reshape(B, *shape), data_range)
        if guessed is None:
            returned_labels = False
        else:
            label_hit.append(bool(guessed[idx[target_pos[j]]] == labels[j, target_pos[j]]))
    target = np.zeros((J, B), dtype=bool)
    target[np.arange(J), target_pos] = True
    target_psnr = psnrs[target]
    notes = [f"success: the target's PSNR above {threshold:g} dB; PSNR of an exact copy capped at 100 dB"]
    metrics: dict[str, Any] = {
        "target_success_rate": float((target_psnr > threshold).mean()),
        "target_psnr_mean": float(target_psnr.mean()),
        "target_psnr_median": float(np.median(target_psnr)),
        "psnr_mean": float(psnrs.mean()),
        "ssim_mean": float(np.nanmean(ssims)) if image else None,
        "record_success_rate": float((psnrs > threshold).mean()),
        "target_label_accuracy": None,
        "n_trials": J,
        "n_targets": J,
        "n_records": J * B,
        "psnr_threshold": threshold,
    }
    if labels_known:
        notes.append("target_label_accuracy null: the game told the server the labels")
    elif not returned_labels:
        notes.append("target_label_accuracy null: the attack reconstructs features only")
    else:
        metrics["target_label_accuracy"] = float(np.mean(label_hit))
    if not image:
        notes.append("ssim_mean null: SSIM applies to images of at least 7×7")
    radius = data_range**2 * 10.0 ** (-threshold / 10.0)  # PSNR > threshold ⇔ MSE < radius
    metrics["kappa"], searched = kappa(prior, population, radius)
    metrics["kappa_exact"] = False
    notes.append(f"kappa: a lower estimate of the best success of a guess that ignores the update, over the "
                 f"{len(prior)} records of the client pool (the target's prior), best of {searched} guesses")
    arrays = {
        "records": records.reshape(J * B, d),
        "reconstructions": matched.reshape(J * B, d),
        "psnr": psnrs.reshape(-1),
        "is_target": target.reshape(-1).astype(np.float64),
    }
    if image:
        arrays["ssim"] = ssims.reshape(-1)
    return Outcome(metrics, notes, arrays)
