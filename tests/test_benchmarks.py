"""The benchmark harness: the timing protocol, the ratio arithmetic, and a well-formed results.md.

Speed is not asserted (the figures depend on the machine); what must hold is that every figure is the median of
its per-repeat ratios, sits next to its target with a verdict consistent with it, and that results.md carries
the machine, the command and every pair that ran.
"""

from __future__ import annotations

import os
import re
import statistics
from datetime import datetime, timezone

import pytest

from benchmarks.__main__ import main, render
from benchmarks.timing import Check, Section, Table, Timings, compare, ratio


def test_compare_rotates_the_order_and_warms_up_untimed():
    calls: list[tuple[str, int]] = []
    contenders = {name: (lambda r, name=name: calls.append((name, r)) or name) for name in "ABC"}
    t = compare(contenders, repeats=3)
    assert calls[:3] == [("A", -1), ("B", -1), ("C", -1)]  # warm-up, not timed
    assert [name for name, _ in calls[3:]] == list("ABC" "BCA" "CAB")
    assert all(len(t.seconds[n]) == 3 and all(s >= 0 for s in t.seconds[n]) for n in "ABC")
    assert t.results["B"] == ["B", "B", "B"]
    scaled = compare({"A": lambda r: None}, repeats=2, warmup=False, scale={"A": 0.0})
    assert scaled.seconds["A"] == [0.0, 0.0]


def test_ratio_is_the_median_of_per_repeat_ratios():
    t = Timings({"slow": [10.0, 30.0, 8.0], "fast": [1.0, 2.0, 4.0]}, {})
    check = ratio("slow / fast", t, "slow", "fast", target=5.0)
    assert check.per_repeat == (10.0, 15.0, 2.0)
    assert check.value == 10.0 and check.passed  # not the ratio of medians (10 / 2 = 5) nor of means
    at_most = ratio("fast / slow", t, "fast", "slow", target=0.1, op="<=")
    assert at_most.value == pytest.approx(0.1) and at_most.passed
    assert not Check("x", 1.6, 1.5, "<=").passed and Check("x", 1.5, 1.5, "<=").passed


def _floats(cells: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", cells)]


@pytest.mark.slow
def test_quick_run_of_the_pure_python_pairs_writes_a_well_formed_results_file(tmp_path):
    out = tmp_path / "results.md"
    assert main(["--quick", "--only", "a,b", "--repeats", "2", "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert "`python -m benchmarks --quick --only a,b --repeats 2 --out" in text
    for row in ("| CPU |", "| cores |", "| RAM |", "| torch threads |", "| load average at start"):
        assert row in text
    assert re.search(r"torch \d+\.\d+", text) and re.search(r"opacus \d+\.\d+", text)
    assert "## a. " in text and "## b. " in text and "## c. " not in text

    summary = text.split("## Summary")[1].split("\n## ")[0]
    rows = [line for line in summary.splitlines() if re.match(r"\| [ab] \|", line)]
    # a: 2 MLP, 1 CNN and 3 logistic-regression ratios; b at K = 1 and 4: the CNN against a torch loop, its own
    # non-private epoch (twice) and Opacus (twice), the MLP against a torch loop and its own non-private epoch (twice)
    assert len(rows) == 14
    checks = re.findall(r"^\| (.+?) \| ([^|]+) \| \*\*([^|*]+)×\*\* \| (>=|<=) ([^|]+)× \| (PASS|\*\*MISS\*\*) \|$",
                        text, flags=re.M)
    assert len(checks) == len(rows)
    for name, per_repeat, median, op, target, verdict in checks:
        values = _floats(per_repeat)
        assert len(values) == 2
        assert float(median) == pytest.approx(statistics.median(values), rel=0.01)
        passed = float(median) >= float(target) if op == ">=" else float(median) <= float(target)
        if float(median) != float(target):  # at the target as printed, the unrounded figure decides either way
            assert verdict == ("PASS" if passed else "**MISS**"), name
        if verdict != "PASS":
            explanation = re.search(rf"\*\*Missed: {re.escape(name)}\.\*\* (.+)", text)
            assert explanation and "No explanation" not in explanation.group(1)
    for table in re.findall(r"\| contender \|.*?\n\n", text, flags=re.S):
        for line in filter(None, table.splitlines()[2:]):
            *repeats, median = _floats(line.split("|", 2)[2])
            assert len(repeats) == 2 and median == pytest.approx(statistics.median(repeats), rel=0.02)


def test_sections_not_run_are_carried_over_from_an_earlier_results_file_and_marked():
    t = Timings({"slow": [2.0], "fast": [1.0]}, {})
    new = Section("a", "New", "what", [Table("cap", t)], [ratio("new ratio", t, "slow", "fast", target=1.0)])
    old = Section("d", "Old", "old what", [], [Check("old ratio", 3.0, 5.0, ">=", why_missed="because")])
    info = {"CPU": "x"}
    earlier = render([Section("a", "Stale", "stale", [], [Check("stale ratio", 9.0, 1.0, ">=")]), old], info,
                     "python -m benchmarks", datetime(2020, 1, 2, tzinfo=timezone.utc), 1.0)
    text = render([new], info, "python -m benchmarks --only a", datetime(2021, 1, 2, tzinfo=timezone.utc), 1.0,
                  carried=earlier)
    assert "| a | new ratio |" in text and "stale" not in text  # a pair run now replaces its earlier section
    assert "| d (earlier run) | old ratio | 3× | >= 5× | **MISS** |" in text
    d_section = text.split("## d. Old")[1]
    assert "Carried over unchanged from `python -m benchmarks` on 2020-01-02" in d_section
    assert "**Missed: old ratio.** because" in d_section
    again = render([new], info, "python -m benchmarks --only a", datetime(2022, 1, 2, tzinfo=timezone.utc), 1.0,
                   carried=text)  # carried twice: the row stays, marked once
    assert again.count("| d (earlier run) | old ratio | 3× | >= 5× | **MISS** |") == 1
    d_again = again.split("## d. Old")[1]
    assert d_again.count("Carried over unchanged") == 1, "a section carried twice names the one run that measured it"
    assert "on 2020-01-02" in d_again and "2021-01-02" not in d_again and "on x; not re-measured" in d_again


@pytest.mark.slow
def test_the_gpu_check_runs_on_the_cpu_and_writes_its_section(tmp_path):
    """Without CUDA the check compares the CPU with itself (everything agrees), still through the synthetic CIFAR
    batches the `cifar10` plugin reads, and says so; its section lands in results.md beside carried ones."""
    from benchmarks import gpu_check

    section = gpu_check.run(quick=True, repeats=1)
    assert section.key == "k" and len(section.checks) == 8  # 2 pools × 2 engines × (non-private, DP-SGD)
    assert all(c.passed and c.op == "<=" for c in section.checks)
    for pool in ("digits CNN pool", "WRN-10-1"):
        for engine in ("batched engine", "loop engine"):
            assert sum(name.startswith(f"{pool}, {engine}") for name in section.figures) == 2
    assert sum("seconds per model" in name for name in section.figures) == 8
    assert "Poisson masks equal: yes" in next(v for k, v in section.figures.items() if "counter RNG" in k)
    if not __import__("torch").cuda.is_available():
        assert "CUDA not available" in section.what
    text = render([section], {"CPU": "test"}, "python -m benchmarks --only k", datetime.now(timezone.utc), 0.1)
    assert "## k. GPU check" in text and "| k |" in text


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_the_synthetic_cifar_batches_train_the_same_on_cuda_as_on_the_cpu():
    from benchmarks import gpu_check

    section = gpu_check.run(quick=True, repeats=1)
    assert "CUDA not available" not in section.what
    assert all(c.passed for c in section.checks), [(c.name, c.value) for c in section.checks]


@pytest.mark.slow
def test_the_engines_pair_sets_the_loop_engine_beside_the_batched_engine_and_opacus(monkeypatch):
    """Pair g times the loop engine, the batched engine with and without its kernels and Opacus on the same
    models; non-private the loop and batched engines train the same models (float rounding), and switching the
    kernels off for one contender leaves the switch as it was."""
    from arena.engine import rng_kernel
    from benchmarks import bench_engines
    from benchmarks.__main__ import PAIRS

    monkeypatch.setenv("ARENA_KERNELS", "auto")
    section = bench_engines.run(quick=True, repeats=1)
    assert PAIRS["g"] == "benchmarks.bench_engines" and os.environ["ARENA_KERNELS"] == "auto"
    for name in ("cnn", "mlp"):
        table = next(t for t in section.tables if t.caption.startswith(f"{name} DP-SGD"))
        assert set(table.timings.seconds) == {"batched engine, DP-SGD", "batched engine, kernels off, DP-SGD",
                                              "loop engine, DP-SGD", "Opacus hooks by hand, one model after another"}
        assert float(section.figures[f"{name} non-private: max |Δ parameter|, loop vs batched engine"]) < 1e-5
        kernels = f"{name} DP-SGD: max |Δ parameter|, batched engine with vs without kernels"
        assert float(section.figures[kernels]) < 1e-5
    with bench_engines.kernels_off():
        assert rng_kernel.library() is None


def test_a_plain_run_leaves_the_gpu_checks_to_make_gpu_check():
    from benchmarks.__main__ import PAIRS, _parser

    default = _parser().parse_args([]).only.split(",")
    assert {"k", "n"} <= set(PAIRS) and set(default) == set(PAIRS) - {"k", "n"}  # n: make gpu-check-lm


ORPHAN_CPU = """
import json, sys
from benchmarks.cpu import cpu_of
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass"
# the command exits at once; the child it started (in a session of its own, never waited for) burns 0.4 s of CPU
command = [sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', %r], "
           "start_new_session=True)" % burn]
cost = cpu_of(command)
print(json.dumps({"cpu": cost.cpu, "wall": cost.wall}))
"""


@pytest.mark.subprocess
def test_cpu_of_counts_the_orphans_a_command_leaves_behind() -> None:
    """``benchmarks.cpu.cpu_of`` counts every process a command started, one it left running included (Ray's
    workers outlive their raylet so), by making the benchmark a child subreaper and waiting for them."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", ORPHAN_CPU], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    cost = json.loads(done.stdout)
    assert cost["cpu"] >= 0.4, "the orphan's CPU is counted"
    assert cost["wall"] < cost["cpu"] + 5


def test_the_fixed_cost_copy_of_the_quickstart_trains_one_epoch_everywhere(tmp_path) -> None:
    import yaml

    from benchmarks.bench_fixed_cost import scenarios

    real, one = scenarios(False, tmp_path)
    spec, cut = yaml.safe_load(real.read_text()), yaml.safe_load(one.read_text())

    def epochs(node) -> list:
        if isinstance(node, dict):
            return [v for k, v in node.items() if k == "epochs"] + [e for v in node.values() for e in epochs(v)]
        return [e for v in node for e in epochs(v)] if isinstance(node, list) else []

    assert len(epochs(cut)) == len(epochs(spec)) >= 4 and set(epochs(cut)) == {1} and max(epochs(spec)) > 1
    assert cut["tracks"][0]["attacks"] == spec["tracks"][0]["attacks"], "the same shadows, the same matchups"


def test_the_breaching_pair_says_breaching_is_not_installed_and_measures_nothing(monkeypatch):
    from benchmarks import bench_gradients, peer_breaching

    monkeypatch.setattr(peer_breaching, "unavailable", lambda: "ModuleNotFoundError: No module named 'breaching'")
    monkeypatch.setattr(bench_gradients, "game", lambda *a: pytest.fail("the pair built its game without breaching"))
    section = bench_gradients.run(quick=True, repeats=1)
    assert section.key == "t" and not section.checks and not section.tables
    assert section.what.startswith("breaching not installed") and "No module named 'breaching'" in section.what
    text = render([section], {}, "python -m benchmarks --only t", datetime.now(timezone.utc), 0.1)
    assert "## t. " in text and "breaching not installed" in text


def test_the_dense_network_handed_to_breaching_as_a_sequential_is_the_same_function():
    import torch

    from arena_plugins.models import DenseNet
    from benchmarks.peer_breaching import sequential

    module = DenseNet([64, 16, 12, 10], "tanh")
    seq = sequential(module)
    assert isinstance(seq, torch.nn.Sequential) and isinstance(seq[0], torch.nn.Flatten)
    assert [p.data_ptr() for p in seq.parameters()] == [p.data_ptr() for p in module.parameters()]
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(seq(x), module(x))
