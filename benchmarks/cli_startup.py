"""``fdl --help`` and ``fdl --version``: whole-process wall time against the 150 ms goal.

Each command runs as a fresh process (the venv's ``fdl`` console script) ``--runs`` times,
alternating between the commands; the median is printed next to the goal and a bare
``python -c pass`` (the interpreter's own start-up, the floor).

Usage: ``python benchmarks/cli_startup.py [--runs 21]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_MS = 150.0


def fdl_command() -> list[str]:
    script = Path(sys.executable).parent / "fdl"
    if script.exists():
        return [str(script)]
    found = shutil.which("fdl")
    if found is None:
        sys.exit("cli_startup: no fdl console script next to this Python or on PATH")
    return [found]


def wall_ms(cmd: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=21)
    args = p.parse_args()
    fdl = fdl_command()
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "fdl --version": [*fdl, "--version"],
        "fdl --help": [*fdl, "--help"],
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    with tempfile.TemporaryDirectory() as cwd:  # no fdl.yml: the plain start-up
        for cmd in cases.values():
            wall_ms(cmd, cwd)  # warm the file cache
        for _ in range(args.runs):
            for name, cmd in cases.items():
                times[name].append(wall_ms(cmd, cwd))
    print(f"flodl fdl start-up, median of {args.runs} runs (goal {GOAL_MS:.0f} ms)")
    for name, ts in times.items():
        med = statistics.median(ts)
        verdict = "" if name.startswith("python") else ("  ok" if med <= GOAL_MS else "  OVER")
        print(f"  {name:<16} {med:7.1f} ms   ({med / GOAL_MS:4.2f} x goal){verdict}")


if __name__ == "__main__":
    main()
