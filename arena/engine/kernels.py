"""The compiled kernels as one set: building them for this CPU (``arena kernels build``, run by ``make setup``)
and saying which are built (``arena kernels status``). ``arena.engine.native`` holds the build and load mechanics;
each kernel's module holds its C source and the Python that calls it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from typing import TextIO

from arena.engine import native

KERNELS = {
    "conv": "arena.engine.conv_kernel",
    "conv_sum": "arena.engine.conv_sum",
    "conv_forward": "arena.engine.conv_forward",
    "dense": "arena.engine.dense_kernel",
    "rng": "arena.engine.rng_kernel",
}
"""Each kernel's name (its library's prefix) and the module whose ``SOURCE`` it is built from."""


def source(name: str) -> str:
    """Kernel ``name``'s C source."""
    return str(importlib.import_module(KERNELS[name]).SOURCE)


def build(out: TextIO | None = None) -> int:
    """Build every kernel not yet built for this CPU into ``native.folder()``, one line each; 0 if all are built,
    1 where a kernel could not be (no compiler, a compile error: the arena then runs without it)."""
    out = out or sys.stdout
    failed = 0
    for name in KERNELS:
        try:
            built = native.build(name, source(name))
        except FileNotFoundError as exc:
            print(f"{name}: not built: {exc}", file=out)
            failed += 1
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            print(f"{name}: not built: {exc}" + (f"\n{detail.strip()}" if detail else ""), file=out)
            failed += 1
        else:
            print(f"{name}: {built}", file=out)
    if failed:
        print(f"{failed} of {len(KERNELS)} kernels not built: training on the CPU runs in pure PyTorch "
              "without them (the same results, slower)", file=out)
    return 1 if failed else 0


def status(out: TextIO | None = None) -> int:
    """One line per kernel, built or missing (with its path), and the switch's setting; 0 if all are built."""
    out = out or sys.stdout
    missing = 0
    print(f"{native.SWITCH}={native.mode()}; folder {native.folder()}", file=out)
    for name in KERNELS:
        target = native.path(name, source(name))
        built = target.exists()
        missing += not built
        print(f"{name}: {'built' if built else 'missing'} ({target})", file=out)
    return 1 if missing else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m arena.engine.kernels [build|status]`` (``status`` by default), as ``arena kernels``."""
    args = sys.argv[1:] if argv is None else argv
    action = args[0] if args else "status"
    if action not in ("build", "status") or len(args) > 1:
        print("usage: python -m arena.engine.kernels [build|status]", file=sys.stderr)
        return 2
    return build() if action == "build" else status()


if __name__ == "__main__":
    sys.exit(main())
