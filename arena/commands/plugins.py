"""``arena plugins`` (list, ``install`` into the untrusted site) and ``arena kernels``."""

from __future__ import annotations

import argparse
import sys

from arena.commands.common import EXIT_INPUT, EXIT_OK, apply_trust, problems, shown, third_party_lines, trust_module


def cmd_plugins(args: argparse.Namespace) -> int:
    if args.plugins_command == "install":
        return install(args)
    apply_trust(args.trust)
    import arena.pipeline  # noqa: F401 - installs the sandbox's catalog: attack-only plugins are listed from there
    from arena.plugins import registries

    regs = registries()
    print("plugins:")
    for info in regs.plugins:
        print(shown(f"  {info.name:40} {info.distribution} {info.version} ({info.module})"))
    site = trust_module().untrusted_site()
    print(shown(f"third-party code (untrusted site: {site}{'' if site.is_dir() else ', absent'}):"))
    for line in third_party_lines(regs) or ["(none)"]:
        print(f"  {shown(line)}")
    kinds = (("games", regs.games), ("datasets", regs.datasets), ("models", regs.models),
             ("defenses", regs.defenses), ("attacks", regs.attacks), ("metrics", regs.metrics))
    for kind, reg in kinds:
        print(f"{kind}:")
        for e in reg:
            print(shown(f"  {e.name:24} from {e.distribution} {e.version}"))
    return EXIT_OK


def install(args: argparse.Namespace) -> int:
    """``arena plugins install``: pip installs the distributions into the untrusted site (never the arena's
    environment), then lists what the attack sandbox finds there."""
    import subprocess

    trust = trust_module()
    site = (args.site or trust.untrusted_site()).expanduser().absolute()
    if site.exists() and not site.is_dir():
        return problems([f"--site: {site}: not a directory"])
    site.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(trust.install_command(list(args.sources), site, list(args.pip_option)), check=False)
    if done.returncode != 0:
        return problems([f"pip could not install {' '.join(args.sources)} into {site} (exit {done.returncode})"])
    print(f"installed into the untrusted site {site}: only sandboxed attack processes load it"
          + ("" if args.site is None or str(site) == str(trust.untrusted_site()) else
             f"; set {trust.SITE_ENV}={site} for the arena to find it"))
    return EXIT_OK


def cmd_kernels(args: argparse.Namespace) -> int:
    from arena.engine import kernels

    try:
        return kernels.main([args.action])
    except ValueError as exc:  # ARENA_KERNELS set to something else than auto, off or on
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
