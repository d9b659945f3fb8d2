"""flodl graphs vs hand-written PyTorch: training-step time of the ten benchmark models.

Each model is written twice (``models/``): as a flodl graph and as the ``nn.Module`` a skilled
PyTorch user would write, with the same initial weights, the same data and Adam (lr 1e-3).
Within a round the sides take turns step by step (alternating which goes first); each side's
statistic in a round is the median of its timed steps; the report gives, per model, the median
over rounds of each side, the median of the per-round ratios (flodl / hand-written), and the
scaled MAD (1.4826 x MAD over rounds). ``torch.compile(graph)`` is timed as a third side.

    python benchmarks/run.py                      # everything, writes docs/benchmark.md
    python benchmarks/run.py --rounds 9 --models mlp,gated_routing --no-compile

Only the part of docs/benchmark.md between ``<!-- graph:start -->`` and ``<!-- graph:end -->``
is rewritten.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from models import MODELS, Bench  # noqa: E402

from flodl_core import atomic_write  # noqa: E402
from flodl_graph import FlowBuilder  # noqa: E402

START, END = "<!-- graph:start -->", "<!-- graph:end -->"
GOAL_MAX, GOAL_MEDIAN = 1.03, 1.01


def mad(values: list[float]) -> float:
    """Scaled median absolute deviation (a robust sigma)."""
    m = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - m) for v in values)


class Side:
    """One model instance with its optimizer and data, timed step by step."""

    def __init__(self, bench: Bench, kind: str) -> None:
        self.bench = bench
        model = bench.make("hand" if kind == "hand" else "flodl")
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.model: nn.Module = torch.compile(model) if kind == "compiled" else model
        self.x, self.y = bench.data(bench.batch)

    def step(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        loss = self.bench.loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()

    def timed_step(self) -> float:
        t0 = time.perf_counter()
        self.step()
        return (time.perf_counter() - t0) * 1e3


def _order(kinds: list[str], i: int) -> list[str]:
    """The order of the sides at step ``i``: rotated every step and reversed every other cycle,
    so each side runs in every position (first, middle, last, after each other side) equally
    often. A fixed middle slot next to the compiled side measured ~2 % slower on its own."""
    shift = i % len(kinds)
    order = kinds[shift:] + kinds[:shift]
    return order[::-1] if (i // len(kinds)) % 2 else order


def bench_model(bench: Bench, args: argparse.Namespace) -> dict[str, list[float]]:
    """Per side, one median step time (ms) per round.

    Within a round the sides take turns step by step, so a change in machine load hits every
    side alike; each side is warmed up at the round start.
    """
    kinds = ["hand", "flodl"] + (["compiled"] if args.compile and bench.compile_ok else [])
    sides = {k: Side(bench, k) for k in kinds}
    if "compiled" in sides:
        t0 = time.perf_counter()
        sides["compiled"].step()  # compile forward and backward outside the timing
        sides["compiled"].step()
        print(f"  {bench.name}: compiled in {time.perf_counter() - t0:.1f}s", flush=True)
    results: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for k in kinds:
            for _ in range(args.warmup):
                sides[k].step()
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(args.steps):
            for k in _order(kinds, i):
                times[k].append(sides[k].timed_step())
        for k in kinds:
            results[k].append(statistics.median(times[k]))
    return results


def overhead(reps: int) -> dict[str, float]:
    """Pure framework cost: forward of a tiny 8-layer MLP (no grad), µs per call.

    Dispatch-bound on purpose; ``tagged`` tags every node (the cost of ``graph.tagged``).
    """
    torch.manual_seed(0)
    layers = [m for _ in range(8) for m in (nn.Linear(16, 16), nn.ReLU())]
    hand = nn.Sequential(*layers)

    def graph(tag: bool) -> nn.Module:
        fb = FlowBuilder(layers[0])
        fb = fb.tag("t0") if tag else fb
        for i, m in enumerate(layers[1:], 1):
            fb = fb.through(m)
            fb = fb.tag(f"t{i}") if tag else fb
        return fb.build()

    fns: dict[str, Callable[..., object]] = {
        "hand": hand, "flodl": graph(False), "tagged": graph(True)}  # fmt: skip
    x = torch.randn(2, 16)
    chunk = 50
    out: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for f in fns.values():
            for _ in range(chunk):
                f(x)
        # Chunks of calls, the sides taking turns, so load changes hit them alike.
        for r in range(max(1, reps // chunk)):
            for k in fns if r % 2 == 0 else list(fns)[::-1]:
                f = fns[k]
                t0 = time.perf_counter()
                for _ in range(chunk):
                    f(x)
                out[k].append((time.perf_counter() - t0) / chunk * 1e6)
    return {k: statistics.median(v) for k, v in out.items()}


def render(results: dict[str, dict[str, list[float]]], ovh: dict[str, float],
           args: argparse.Namespace, wall: float) -> str:  # fmt: skip
    lines = [
        START,
        "## Graph builder: flodl vs hand-written PyTorch",
        "",
        f"Measured {_dt.date.today().isoformat()} by `benchmarks/run.py` "
        f"(`--rounds {args.rounds} --steps {args.steps} --warmup {args.warmup}`) on "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
        f"Python {platform.python_version()}; {wall:.0f} s in all.",
    ]
    if args.note:
        lines += ["", f"_{args.note}_"]
    lines += [
        "",
        "Median training-step time (forward, loss, backward, Adam step); the sides take turns "
        "step by step; ratio = median of the per-round ratios flodl / hand-written (< 1: flodl "
        "faster); σ = 1.4826 × MAD over rounds. Compiled = `torch.compile(graph)` (default "
        "mode), against the hand-written model in eager mode. Sizes are scaled down from "
        "floDl (Rust)'s table for a CPU; see `benchmarks/models/`.",
        "",
        "| model | sizes | hand-written ms (σ) | flodl ms (σ) | ratio | compiled ms | "
        "compiled / hand |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    ratios = []
    for name, res in results.items():
        hand, fl = res["hand"], res["flodl"]
        ratio = statistics.median(f / h for f, h in zip(fl, hand, strict=True))
        ratios.append(ratio)
        comp = res.get("compiled")
        cms = f"{statistics.median(comp):.2f}" if comp else "-"
        cr = (
            f"{statistics.median(c / h for c, h in zip(comp, hand, strict=True)):.3f}"
            if comp
            else "-"
        )
        lines.append(
            f"| {name} | {MODELS[name].spec} | {statistics.median(hand):.2f} ({mad(hand):.2f}) "
            f"| {statistics.median(fl):.2f} ({mad(fl):.2f}) | {ratio:.3f} | {cms} | {cr} |"
        )
    med, worst = statistics.median(ratios), max(ratios)
    ok = "met" if worst <= GOAL_MAX and med <= GOAL_MEDIAN else "not met"
    lines += [
        "",
        f"Eager ratio: median {med:.3f}, worst {worst:.3f} (goal: every model <= {GOAL_MAX}, "
        f"median <= {GOAL_MEDIAN}: {ok}).",
        "",
        "Framework overhead alone (forward of an 8 x [Linear(16,16), ReLU] MLP on a 2 x 16 "
        "batch, no grad, µs per call — dispatch-bound on purpose):",
        "",
        "| hand-written `nn.Sequential` | flodl graph | flodl, every node tagged |",
        "|---:|---:|---:|",
        f"| {ovh['hand']:.1f} | {ovh['flodl']:.1f} ({ovh['flodl'] / ovh['hand']:.3f}×) | "
        f"{ovh['tagged']:.1f} ({ovh['tagged'] / ovh['hand']:.3f}×) |",
        END,
    ]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace (or append) the graph section of ``path``, atomically; other sections stay."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = path.read_text() if path.exists() else "# Benchmarks\n"  # re-read right before writing
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        new = head + section + tail
    else:
        new = text.rstrip("\n") + "\n\n" + section
    atomic_write(path, new)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    p.add_argument("--steps", type=int, default=24, help="timed steps per side per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before each timing")
    p.add_argument("--models", default="all", help=f"comma list of {', '.join(MODELS)}")
    p.add_argument("--no-compile", dest="compile", action="store_false",
                   help="skip the torch.compile(graph) side")  # fmt: skip
    p.add_argument("--overhead-reps", type=int, default=4000, help="calls per side")
    p.add_argument("--note", default="", help="a line added to the report (e.g. machine load)")
    p.add_argument("--output", type=Path, default=HERE.parent / "docs" / "benchmark.md")
    args = p.parse_args(argv)
    names = list(MODELS) if args.models == "all" else args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be >= 1, --warmup >= 0")
    # Inductor's imports touch deprecated torch.jit APIs; keep the report output clean.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    t0 = time.perf_counter()
    results = {}
    for name in names:
        results[name] = bench_model(MODELS[name], args)
        r = results[name]
        ratio = statistics.median(f / h for f, h in zip(r["flodl"], r["hand"], strict=True))
        hand_ms, flodl_ms = statistics.median(r["hand"]), statistics.median(r["flodl"])
        print(f"{name:17s} hand {hand_ms:8.2f} ms  flodl {flodl_ms:8.2f} ms  ratio {ratio:.3f}")
    ovh = overhead(args.overhead_reps)
    print(f"overhead µs/call: {ovh}")
    section = render(results, ovh, args, time.perf_counter() - t0)
    write_section(args.output, section)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
