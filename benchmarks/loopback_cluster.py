"""A real Ray cluster on loopback, measured: ``python -m benchmarks.loopback_cluster SCENARIO [--nodes 2]``.

Starts a head node and ``nodes - 1`` more with ``ray start`` (each its own raylet, object store and workers, and
its own custom resource ``node_<i>``; ``--cpus`` CPUs each), runs ``arena run SCENARIO --address`` on it and
``arena run SCENARIO --serial`` beside it (order rotated per repeat), and prints, per repeat, the wall time of
each, the speed-up (serial / cluster) and the parallel efficiency (speed-up / the cluster's CPUs), with the CPU
of each: the serial command's process tree, and for the cluster run the driver's tree plus what the cluster's
processes used while it ran (user + system of every process of the cluster, what their exited children used
included). The cluster runs with token authentication off (``RAY_AUTH_MODE=disabled``, loopback only) and its
workers at the arena's priority (``RAY_worker_niceness=0``). Only the processes this script's ``ray start``
commands created (found by the cluster's port and session folder) are stopped, by pid: never ``ray stop``,
which ends every Ray process of the user.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.cpu import cpu_of, reap_all
from benchmarks.processes import ROOT

TICKS = os.sysconf("SC_CLK_TCK")


def _ray() -> list[str]:
    """Ray's command line, run by this interpreter (a console script's shebang may name another)."""
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()"]


def _cluster_pids(marks: tuple[str, ...]) -> list[int]:
    """Processes whose command line names one of ``marks`` (the cluster's port, its session folder)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                line = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if any(m in line for m in marks):
                    found.append(int(entry.name))
    return found


def _cpu_seconds(pids: list[int]) -> float:
    """User + system seconds of ``pids``, with what their waited-for children used."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / TICKS


class Cluster:
    """``nodes`` Ray nodes on 127.0.0.1 started with ``ray start``, ``cpus`` CPUs each."""

    def __init__(self, nodes: int, cpus: int) -> None:
        self.port = random.randint(20000, 40000)
        self.folder = tempfile.mkdtemp(prefix="arena-loopback-")
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}
        self.address = f"127.0.0.1:{self.port}"
        self.marks = (f"127.0.0.1:{self.port}", f"port={self.port}", self.folder)
        common = ["--num-cpus", str(cpus), "--disable-usage-stats", "--node-ip-address", "127.0.0.1"]
        self._start(["--head", "--port", str(self.port), "--include-dashboard", "false", "--temp-dir", self.folder,
                     "--resources", json.dumps({"node_0": 1}), *common])
        for i in range(1, nodes):
            self._start(["--address", self.address, "--resources", json.dumps({f"node_{i}": 1}), *common])

    def _start(self, args: list[str]) -> None:
        done = subprocess.run([*_ray(), "start", *args], env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")

    def pids(self) -> frozenset[int]:
        return frozenset(_cluster_pids(self.marks))

    def cpu(self) -> float:
        return _cpu_seconds(sorted(self.pids()))

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _cluster_pids(self.marks):
                with contextlib.suppress(OSError):
                        os.kill(pid, sig)
            time.sleep(2.0)
        reap_all(time.monotonic() + 5.0)  # those re-parented to this process (a subreaper, benchmarks.cpu)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loopback_cluster", description=__doc__.split("\n")[0])
    p.add_argument("scenario", type=Path)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--cpus", type=int, default=1, help="CPUs of each node (default 1)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--serial-seconds", type=float,
                   help="the serial run's wall time, measured elsewhere (e.g. pair r's): the serial run is skipped")
    args = p.parse_args(argv)
    total = args.nodes * args.cpus
    with tempfile.TemporaryDirectory(prefix="arena-loopback-runs-") as tmp:
        for r in range(args.repeats):
            figures: dict[str, float] = {}
            modes = ["serial", "cluster"] if r % 2 == 0 else ["cluster", "serial"]
            if args.serial_seconds:
                modes, figures["serial_wall"] = ["cluster"], args.serial_seconds
            for mode in modes:
                out = str(Path(tmp) / f"{mode}-{r}")
                command = [sys.executable, "-m", "arena.cli", "run", str(args.scenario), "--out", out]
                load = os.getloadavg()[0]
                if mode == "serial":
                    cost = cpu_of([*command, "--serial"], cwd=ROOT)
                    figures.update(serial_wall=cost.wall, serial_cpu=cost.cpu, serial_load=load)
                    continue
                cluster = Cluster(args.nodes, args.cpus)
                try:
                    before = cluster.cpu()
                    cost = cpu_of([*command, "--address", cluster.address], cwd=ROOT, keep=cluster.pids())
                    used = cluster.cpu() - before
                finally:
                    cluster.stop()
                figures.update(cluster_wall=cost.wall, cluster_cpu=cost.cpu + used, cluster_load=load)
            speedup = figures["serial_wall"] / figures["cluster_wall"]
            print(json.dumps({"scenario": str(args.scenario), "nodes": args.nodes, "cpus_per_node": args.cpus,
                              "repeat": r, **{k: round(v, 2) for k, v in figures.items()},
                              "speedup": round(speedup, 3), "efficiency": round(speedup / total, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
