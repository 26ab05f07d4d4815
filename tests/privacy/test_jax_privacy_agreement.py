"""The arena's one-run bounds agree with jax_privacy 2.x's auditors on the same scores (an optional dependency:
skipped without it): Steinke et al.'s (ε, δ) bound and Mahloujifar et al.'s f-DP bound (GDP family), at one
explicit threshold, to 1e-6."""

from __future__ import annotations

import numpy as np
import pytest

from arena.privacy.fdp_one_run import gdp_family_epsilon
from arena.privacy.one_run import one_run_epsilon_from_counts

auditing = pytest.importorskip("jax_privacy.auditing")


@pytest.mark.slow
@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_one_run_and_fdp_bounds_match_jax_privacy_at_a_threshold(mu: float) -> None:
    rng = np.random.default_rng(int(mu * 10))
    truth = rng.random(4000) < 0.5
    scores = rng.normal(size=4000) + mu * truth
    auditor = auditing.CanaryScoreAuditor(scores[truth], scores[~truth])
    for quantile in (0.9, 0.99):
        t = float(np.quantile(scores, quantile))
        r, v = int((scores >= t).sum()), int((scores[truth] >= t).sum())
        strategy = auditing.Explicit(t)
        for delta in (1e-5, 1e-3):
            theirs = auditor.epsilon_one_run(0.05, delta, threshold_strategy=strategy)
            ours = one_run_epsilon_from_counts(len(scores), r, v, 0.05, delta, tol=1e-10)
            assert ours == pytest.approx(theirs, abs=1e-6), (quantile, delta)
            theirs = auditor.epsilon_one_run_fdp(0.05, delta, threshold_strategy=strategy)
            ours = gdp_family_epsilon(len(scores), r, v, 0.05, delta, tol=1e-10)
            assert ours == pytest.approx(theirs, abs=1e-6), (quantile, delta, "fdp")
