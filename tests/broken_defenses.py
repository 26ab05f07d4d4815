"""Deliberately broken DP-SGD defenses, written as plugins: each subclasses the real ``dpsgd`` and claims the
correct algorithm's ε (its accountant's, for the configured target), but trains with one classic bug."""

from __future__ import annotations

from arena.contracts.defense import Claim, Fit, FitTask
from arena.engine.batching import steps_and_rate
from arena.engine.lm import train_lm
from arena.engine.recipe import DPNoise
from arena.engine.trainer import train
from arena.privacy.accounting import accountant_label, calibrate_noise
from arena_plugins.defenses import DPSGD
from arena_plugins.lm_defenses import LMDPSGD


class _Broken(DPSGD):
    """``fit`` as DP-SGD's, with ``noise`` (the DPNoise it trains with) and ``sigma_for`` (the σ it computes) open
    to each bug; the claim is always the correct algorithm's."""

    def sigma_for(self, q: float, steps: int) -> float:
        return calibrate_noise(self.target_epsilon(), q, steps, self.params.delta, self.params.accountant)[0]

    def noise(self, sigma: float, q: float, n: int) -> DPNoise:
        return DPNoise(clip=self.params.clip, noise_multiplier=sigma)

    def fit(self, task: FitTask) -> Fit:
        steps, q = steps_and_rate(task.n, task.recipe)
        correct, achieved = calibrate_noise(self.target_epsilon(), q, steps, self.params.delta, self.params.accountant)
        noise = self.noise(self.sigma_for(q, steps), q, task.n)
        state = train(task.arch, task.X, task.y, task.recipe, task.init_seeds, task.train_seeds, dp=noise)
        claim = Claim(epsilon=achieved, delta=self.params.delta, accountant=accountant_label(self.params.accountant),
                      target_epsilon=self.target_epsilon(), noise_multiplier=correct, sample_rate=q, steps=steps,
                      mechanism="DP-SGD, Poisson-subsampled Gaussian, add/remove")
        return Fit(state, claim)


class NoClipping(_Broken):
    """Per-example gradients are never clipped (clip 10⁶), the noise σ·C computed for the configured C."""

    name = "broken-no-clipping"

    def noise(self, sigma: float, q: float, n: int) -> DPNoise:
        return DPNoise(clip=1e6, noise_multiplier=sigma * self.params.clip / 1e6)


class QuarterNoise(_Broken):
    """Noise of the wrong scale: σ/4."""

    name = "broken-quarter-noise"

    def noise(self, sigma: float, q: float, n: int) -> DPNoise:
        return DPNoise(clip=self.params.clip, noise_multiplier=sigma / 4)


class NoiseOnMean(_Broken):
    """Noise meant for the mean added to the sum: σC/B on the sum, then divided by B again (σ/B overall)."""

    name = "broken-noise-on-mean"

    def noise(self, sigma: float, q: float, n: int) -> DPNoise:
        return DPNoise(clip=self.params.clip, noise_multiplier=sigma / (q * n))


class HalfSteps(_Broken):
    """The accountant is told half the steps, so σ is too small for the steps really taken."""

    name = "broken-half-steps"

    def sigma_for(self, q: float, steps: int) -> float:
        return super().sigma_for(q, max(1, steps // 2))


class NoNoise(_Broken):
    """Clipping, but no noise at all."""

    name = "broken-no-noise"

    def noise(self, sigma: float, q: float, n: int) -> DPNoise:
        return DPNoise(clip=self.params.clip, noise_multiplier=0.0)


BROKEN = (NoClipping, QuarterNoise, NoiseOnMean, HalfSteps, NoNoise)



class LMNoNoise(LMDPSGD):
    """DP-SGD fine-tuning of a language model (every weight) that clips but adds no noise, and claims the correct
    algorithm's ε, σ, q and steps: the language track's broken defense for the canary audit."""

    name = "broken-lm-no-noise"

    def fit(self, task: FitTask) -> Fit:
        steps, q = steps_and_rate(task.n, task.recipe)
        sigma, achieved = calibrate_noise(self.target_epsilon(), q, steps, self.params.delta, self.params.accountant)
        state = train_lm(task.arch, task.X, task.init_seeds, task.train_seeds, task.recipe,
                         dp=DPNoise(clip=self.params.clip, noise_multiplier=0.0), optimizer=self.params.optimizer)
        return Fit(state, Claim(epsilon=achieved, delta=self.params.delta,
                                accountant=accountant_label(self.params.accountant),
                                target_epsilon=self.target_epsilon(), noise_multiplier=sigma, sample_rate=q,
                                steps=steps, mechanism="DP-SGD fine-tuning (every weight), Poisson-subsampled "
                                                       "Gaussian, add/remove"))
