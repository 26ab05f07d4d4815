"""The DP mathematics, each formula written once: accounting, relations, binomial bounds, the ε estimators, Gaussian
DP, trade-off curves and privacy profiles. Game-agnostic: functions of claims, scores and truths (or counts).

- ``accounting``: ε of DP-SGD from dp_accounting, under add/remove or replace-one; σ calibrated for a target ε.
- ``relations``: a claim restated for the relation an experiment plays (replace-one by PLD or group privacy).
- ``binomial``: Clopper–Pearson intervals, rates of one fixed test → ε lower bound, the most a sample can certify.
- ``heldout``: the held-out Clopper–Pearson bound (proved for independent trials; the conventional estimate for
  many points scored on one model).
- ``one_run``: the one-run bound of Steinke, Nasr & Jagielski 2023 (proved from one run; guess set held out).
- ``fdp_one_run``: the f-DP one-run test of Mahloujifar, Melis & Chaudhuri 2025 against a whole trade-off curve
  (proved), and its Gaussian-family ε estimate.
- ``sigma_fit``: Cohen's d of Dirac canaries bounding Poisson-subsampled DP-SGD's σ from above.
- ``gdp``: μ ↔ (ε, δ); the one-threshold Gaussian-DP estimate (measured, never a verdict) and the Gaussian-fit bound
  (proved where its hypothesis holds exactly: full-batch white-box gradient canaries; an estimate otherwise).
- ``tradeoff``: trade-off curves of a claim (f-DP), full-batch DP-SGD's μ, and the PLD privacy profile δ(ε).

**Verdicts** belong to the games (``arena.games.<game>.rule``): flagged iff a lower bound at level α exceeds the
claim's ε for the relation the experiment plays (the Gaussian-fit bound only where its hypothesis holds, the
one-threshold Gaussian-DP estimate never); under a true claim the flag fires with probability at most α
(simulated in the tests).
"""
