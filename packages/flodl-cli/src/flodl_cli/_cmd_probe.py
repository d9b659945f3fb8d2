"""``fdl probe [--json]``: readiness checks, one line each (ok / warn / FAIL) with the fix;
exit 0 when every check passes, 1 otherwise. ``fdl probe @cluster`` checks every worker of the
cluster file instead (reachability, versions, interface, shared data): :mod:`._cmd_cluster`."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from . import _console as con


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("probe", help="readiness checks with fixes")
    p.description = (
        "Readiness checks (torch, GPUs, distributed backends, packages, dashboard port)."
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("target", nargs="?", help="@cluster: probe every worker of fdl.cluster.yml")
    p.add_argument("--file", help="with @cluster: the cluster file (default: fdl.cluster.yml)")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="with @cluster: seconds each worker has to answer, data listing included (30)",
    )


def run(args: argparse.Namespace) -> int:
    if args.target is not None:
        if args.target != "@cluster":
            from ._errors import UsageError

            raise UsageError(f"probe: unknown target {args.target!r}", hint="fdl probe @cluster")
        from ._cmd_cluster import probe

        timeout = [f"--timeout={args.timeout}"] if args.timeout is not None else []
        return probe(["--json"] * bool(args.json) + timeout, args.file)
    from ._facts import collect

    f = collect()
    if args.json:
        print(json.dumps({"ok": not f.failed, "checks": [asdict(c) for c in f.checks]}, indent=2))
        return 1 if f.failed else 0
    width = max(len(c.name) for c in f.checks)
    for c in f.checks:
        tag = {"ok": con.green("ok  "), "warn": con.yellow("warn"), "error": con.red("FAIL")}[
            c.level
        ]
        fix = f"  -> fix: {c.fix}" if c.fix else ""
        print(f"{tag}  {c.name:<{width}}  {c.detail}{fix}")
    return 1 if f.failed else 0
