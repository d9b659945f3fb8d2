"""``fdl diagnose [--json]``: system, Python, torch build, GPUs, flodl packages; exit 1 when
something is wrong, with the fix on the same line."""

from __future__ import annotations

import argparse
import json

from . import _console as con


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("diagnose", help="report this machine and environment")
    p.description = "System, Python, torch build, GPUs and flodl packages; exit 1 on a problem."
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from ._facts import collect

    f = collect()
    if args.json:
        print(json.dumps(f.to_dict(), indent=2))
        return 1 if f.failed else 0
    m, t = f.machine, f.torch
    ram = f"{m.ram_mib / 1024:.1f} GiB" if m.ram_mib else "unknown"
    print(con.bold("system"))
    print(f"  {m.os}; {m.cpu}, {m.cores} cores; RAM {ram}")
    print(con.bold("python"))
    print(
        f"  {f.python['version']} at {f.python['executable']}"
        + (" (venv)" if f.python["venv"] else " (not a venv)")
    )
    print(con.bold("torch"))
    if not t["installed"]:
        print("  not installed")
    else:
        print(f"  {t['version']} ({t['variant']} build)")
        if "archs" in t:
            accel = f"CUDA {t['cuda']}" if t["cuda"] else f"ROCm {t['hip']}" if t["hip"] else "none"
            print(f"  accelerator: {accel}; kernels: {' '.join(t['archs']) or '-'}")
            print(f"  distributed: gloo {_yes(t['gloo'])}, nccl {_yes(t['nccl'])}")
    print(con.bold(f"gpus ({m.gpu_source})"))
    if not m.gpus:
        print("  none")
    for g in m.gpus:
        mem = f"{g.memory_mib} MiB ({g.free_mib} free)" if g.memory_mib else "VRAM unknown"
        drv = f", driver {g.driver}" if g.driver else ""
        print(f"  {g.index}: {g.name}, {g.arch}, {mem}{drv}")
    print(con.bold("flodl packages"))
    for dist, info in f.packages.items():
        pins = f"  pins {', '.join(info['pins'])}" if info["pins"] else ""
        print(f"  {dist} {info['version']}{pins}")
    print(con.bold("dashboard"))
    print(f"  port 3000 {'free' if f.port_free else 'in use'} on 127.0.0.1")
    problems = [c for c in f.checks if c.level != "ok"]
    if problems:
        print(con.bold("problems"))
    for c in problems:
        label = con.red("error") if c.level == "error" else con.yellow("warning")
        print(f"  {label}: {c.name}: {c.detail}" + (f"; fix: {c.fix}" if c.fix else ""))
    if not problems:
        print(con.green("no problems found"))
    return 1 if f.failed else 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"
