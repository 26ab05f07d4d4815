"""l. The canary audit's estimators on one matchup of 128 models × 512 gradient canaries (and 64 input canaries a
model): each estimator of the verdict, and the whole verdict, in CPU seconds, against one second a matchup; then the
post-processing of a fresh run of scenarios/audit.yaml (`arena leaderboard` + `arena report`) against ten seconds."""

from __future__ import annotations

import resource
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.processes import ROOT, arena_command, run_command
from benchmarks.timing import CPU, Check, Section, Table, Timings, compare

TARGET = 1.0  # CPU seconds a matchup, each estimator
POST_TARGET = 10.0  # CPU seconds, `arena leaderboard` + `arena report` of a fresh run of scenarios/audit.yaml
MODELS, GRADIENT, INPUTS = 128, 512, 64
CLAIMS = {"subsampled": (2.0772682039227575, 0.20035460992907803, 250),  # audit-subsampled.yaml's ε = 4 claim
          "full batch": (9.0, 1.0, 50)}
DELTA, ALPHA = 1e-5, 0.01
BEFORE = (
    "Before (commit e21339e, this machine, load ~3; the same simulated matchups, caches cleared, median of 3): the "
    "whole verdict 1.53 s subsampled and 0.42 s full batch; the f-DP test of the subsampled claim's curve 1.15 s "
    "(its curve tabulated from every line of the profile), the one-run bound of the gradient canaries 0.36 s, the "
    "σ fit 0.22 s (unchanged since: the optimistic PLD and the RDP ε that picks its discretisation). "
    "On a real run the verdict recomputed from a 15-matchup run of "
    "scenarios/audit-subsampled.yaml (5 seeds × ε 1, 4, 8) took 10.1 s of CPU (0.67 s a matchup): the one-run "
    "bounds 4.4 s (its largest certifiable bound recomputed per matchup, scipy's binomial pmf at every step of each "
    "bisection), the σ fit 1.7 s, the claims' f-DP curves 1.9 s (every line of the privacy profile at each of "
    "20,001 points; dp_accounting's Python loop for δ(ε)), the f-DP tests 0.7 s. Whole commands on that run: "
    "`arena leaderboard` 19.0 s CPU the first time (the audit, and the plugins loaded, torch with them, to learn "
    "the game's rule), `arena report` 31.9 s (the audit again, the plugins, 12 figure files of 15 log-log panels, "
    "the report's PLD curves at 1e-4 with dp_accounting's δ loop)."
)


def _canaries(rng: np.random.Generator, sigma: float, q: float, steps: int) -> tuple[np.ndarray, ...]:
    """White-box Dirac canaries of DP-SGD at (σ, q, T) in units of the step: included B + N(0, Tσ²), B ~ Bin(T, q),
    excluded N(0, Tσ²); black-box input canaries as tied losses (one decimal) that barely separate."""
    truth = rng.random(MODELS * GRADIENT) < 0.5
    noise = rng.normal(0.0, sigma * np.sqrt(steps), truth.size)
    scores = noise + truth * rng.binomial(steps, q, truth.size)
    t_in = rng.random(MODELS * INPUTS) < 0.5
    s_in = np.round(rng.normal(size=t_in.size) + 0.1 * t_in, 1)
    return scores, truth, s_in, t_in


def _clear() -> None:
    """Every per-claim and per-design cache, so that a call pays what the first matchup of a new claim pays."""
    from arena.privacy import accounting, fdp_one_run, one_run, tradeoff

    for f in (fdp_one_run.claim_fbar, tradeoff.pld_profile, one_run._max_certifiable,
              accounting.epsilon_optimistic, accounting.epsilon_under):
        f.cache_clear()


def run(quick: bool, repeats: int) -> Section:
    from arena.games.audit.verdict import verdict_bounds
    from arena.privacy.fdp_one_run import claim_fbar, fdp_one_run
    from arena.privacy.gdp import gaussian_bound
    from arena.privacy.one_run import one_run_epsilon
    from arena.privacy.sigma_fit import sigma_fit

    section = Section(
        "l",
        "The canary audit's estimators: one matchup of 128 models × 512 canaries",
        f"Simulated canary scores of one audit matchup: {MODELS} models × {GRADIENT} white-box gradient canaries "
        f"({MODELS * GRADIENT:,}, Poisson-subsampled DP-SGD's Gaussian mixture at σ, q, T of a claim) and × {INPUTS} "
        "black-box input canaries (tied scores), each included w.p. ½. Each estimator of the verdict, at "
        f"α = {ALPHA} and δ = {DELTA:g}, in CPU seconds of this process, every per-claim cache cleared before each "
        "call (what the first matchup of a new claim pays; later seeds of the claim pay less), and the whole "
        "verdict of the matchup (`verdict_bounds` for both kinds, the claim's f-DP curve included).",
    )
    rng = np.random.default_rng(0)
    contenders, checks = {}, []
    for name, (sigma, q, steps) in CLAIMS.items():
        s, t, s_in, t_in = _canaries(rng, sigma, q, steps)
        claim = {"epsilon": 4.0, "delta": DELTA, "noise_multiplier": sigma, "sample_rate": q, "steps": steps}

        def cold(fn, *args, **kwargs):
            def call(_r: int):
                _clear()
                return fn(*args, **kwargs)
            return call

        def verdict(_r: int, s=s, t=t, s_in=s_in, t_in=t_in, claim=claim, mech=(sigma, q, steps)):
            _clear()
            curve = claim_fbar(*mech)
            return (verdict_bounds(claim, "gradient", s, t, ALPHA, True, 0, curve),
                    verdict_bounds(claim, "input", s_in, t_in, ALPHA, False, 0, curve))

        mine = {f"{name}: one-run, gradient": cold(one_run_epsilon, s, t, ALPHA, DELTA),
                f"{name}: one-run, input": cold(one_run_epsilon, s_in, t_in, ALPHA, DELTA),
                f"{name}: f-DP vs the claim's curve, gradient": cold(
                    lambda s=s, t=t, m=(sigma, q, steps): fdp_one_run(s, t, ALPHA, DELTA, claim=claim_fbar(*m))),
                f"{name}: " + ("σ fit" if q < 1 else "Gaussian fit"): cold(
                    sigma_fit, s, t, q, steps, DELTA, ALPHA) if q < 1 else cold(gaussian_bound, s, t, DELTA, ALPHA),
                f"{name}: the whole verdict": verdict}
        contenders |= mine
    timings = compare(contenders, 1 if quick else repeats, warmup=False, clock=CPU)
    section.tables.append(Table("CPU seconds a matchup, caches cleared before each call", timings))
    for label in contenders:
        checks.append(Check(f"{label}, CPU", timings.median(label), TARGET, "<=", " s",
                            tuple(timings.seconds[label]), "the estimator is slower than one second a matchup"))
    section.checks += checks
    if not quick:
        _post_processing(section, repeats)
    section.figures["before"] = BEFORE
    return section


def _cpu_of(command: list[str]) -> float:
    """CPU seconds (user + system, children included) of running ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run_command(command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _post_processing(section: Section, repeats: int) -> None:
    """Play scenarios/audit.yaml once, then time `arena leaderboard` and `arena report` on it, each a fresh process:
    as `arena run` leaves the run (its audit kept), and cold (the kept audit and findings removed first)."""
    with tempfile.TemporaryDirectory(prefix="arena-bench-audit-") as tmp:
        out = Path(tmp) / "run"
        run_command(arena_command("run", str(ROOT / "scenarios" / "audit.yaml"), "--out", str(out), "--no-report"))
        run_command(arena_command("leaderboard", str(out)))  # keeps the audit, as `arena run` does
        seconds: dict[str, list[float]] = {"kept: leaderboard + report": [], "cold: leaderboard + report": []}
        for _ in range(repeats):
            seconds["kept: leaderboard + report"].append(
                _cpu_of(arena_command("leaderboard", str(out))) + _cpu_of(arena_command("report", str(out))))
            for kept in (out / "artifacts").glob("audit*.json"):
                kept.unlink()
            seconds["cold: leaderboard + report"].append(
                _cpu_of(arena_command("leaderboard", str(out))) + _cpu_of(arena_command("report", str(out))))
    timings = Timings(seconds, {})
    section.tables.append(Table("`arena leaderboard` + `arena report` of a fresh run of scenarios/audit.yaml (4 "
                                "matchups), CPU seconds of the two commands' processes", timings))
    section.checks.append(Check("post-processing a fresh run of scenarios/audit.yaml, CPU",
                                timings.median("kept: leaderboard + report"), POST_TARGET, "<=", " s",
                                tuple(seconds["kept: leaderboard + report"]),
                                "the report's figures (three formats each) and imports dominate"))
