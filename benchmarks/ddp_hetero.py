"""Heterogeneous data parallelism on CPU: flodl's six modes against the fast rank alone and
against plain per-batch ``torch.nn.parallel.DistributedDataParallel``.

Two CPU ranks (one torch thread each) train the same MLP classifier on the same synthetic
data; rank 1 is slowed 2x by the slowdown hook (it sleeps as long as its batches took, in pieces),
standing in for an older processor next to a newer one. Every run sees the same number of
samples (``--epochs`` passes over ``--samples``), so the final held-out loss is compared at
equal samples.

- ``fast rank alone``: one process, one thread, the whole dataset;
- ``torch DDP per-batch``: 2 spawned ranks, equal shards, gradients all-reduced every batch
  (DDP's own bucketed, backward-overlapped all-reduce): every step waits for the slow rank;
- ``flodl <mode>``: ``Trainer.builder(...).mode(mode).slowdown({1: 2.0})``.

Throughput is samples per second of training (process start-up excluded: the epoch wall times
for flodl, the timed loop inside the ranks for torch DDP). Each cadence and async row also
gives the engine's share of its ranks' speed: its throughput over the sum of what each rank's
measured compute speed in that same run would give with no waiting and no averaging, a figure
the machine's drift does not move. Goals: cadence and async >= 1.35x the fast rank alone (ideal
1.5x: the pair has 1.5 fast ranks' worth of compute), final loss within 2 % of solo, flodl
sync's step time <= 1.03x torch DDP's (that one is settled by ``ddp_sync_step.py``, which runs
both in the same two processes, epoch for epoch; the separate runs here only show its order).

Measured in interleaved rounds (``--rounds``, default 3), because a shared or virtual machine
drifts by 10-20 % over minutes: the sequence is solo, every run, solo, every run, ..., solo. Each
run's ratio is taken against the better of the two solo runs around it (the reference least
slowed by the machine, so the ratio errs low), and the table shows the median over the rounds
with the lowest and highest. ``vs mean`` is the median ratio against the mean of those two solo
runs instead: the machine's speed at that moment if it drifted linearly, which neither favours
nor penalises a run that fell on a fast or slow moment. For the sync step-time ratio each flodl
sync run follows a torch DDP run of its own, and the ratio is the median over the rounds of each
pair's (two runs a minute apart, not several: on identical code paths, fastest-of-3 ratios taken
minutes apart measured 0.98 and 1.12 in one run); the fastest-of ratio is printed beside it.
Losses and notes are from the first round.

Learning rates: the solo run uses SGD lr 0.02. Per-batch gradient averaging (torch DDP, flodl
sync) steps on the pooled batch of both ranks, so it takes the linear scaling rule (lr x 2, which
is flodl's default ``lr_scale_ratio=1.0``); cadence and async average *replicas* that each step
on their own batches, so they keep the solo lr (``lr_scale_ratio=0.0``).

Usage: ``python benchmarks/ddp_hetero.py [--samples 16384] [--epochs 5] [--width 1280]
[--rounds 3] [--modes cpu-cadence,cpu-async]``. Run it on a quiet machine: the ratios move by
tens of percent when other processes share the cores.

**Slow-factor sweep** (``--slow-factor 1,2,4,8,16``): how close cadence and async come to the
ideal as the second rank gets slower. A rank slowed F times adds 1/F of a fast rank, so the pair
can at best train ``1 + 1/F`` times as fast as the fast rank alone (F = 1: equal ranks, ideal
2.0). One interleaved run: solo, every mode at the first factor, solo, every mode at the next
factor, solo, ..., for ``--rounds`` rounds (default modes cpu-cadence and cpu-async; no torch
DDP). Each pair run's ratio is taken against the better of the two solo runs around it; per
factor the table gives the fast rank alone, each mode's median ratio (low-high over the rounds),
its median ratio against the mean of those two solo runs (``vs mean``), the ideal and the mode's
share of it (from the first ratio). The ranks are bound to their own cores where the machine
has two (flodl's ``.bind_cores(True)``), and the solo run to the fast rank's core. Two cores of
one machine still share caches and memory bandwidth, so each round starts with a probe
(``contention_probe`` in ``_ddp_task.py``): two one-thread processes on those cores train the
same MLP alone, then side by side with the second slowed F times; "ranks together vs each
alone" is each one's working speed (samples per second of its own steps) beside the other
over alone. A share of the ideal below that figure is the engine's; the rest is the machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _ddp_task import (
    contention_probe,
    ddp_epoch,
    held_out_loss,
    join_pair,
    make_data,
    mlp,
    spawn_pair,
    train_alone,
    train_step,
)
from torch import nn

from flodl_core import ConfigError
from flodl_ddp import MODES, Trainer, parse_mode
from flodl_ddp.testing import (  # the engine's own core slices
    Slowdown,  # the hook flodl's runs get, for torch DDP's too
    binding_supported,
    cores_for,
)

SLOW = 2.0
LR = 0.02
DDP = "torch DDP per-batch"
ARGS: dict[str, int] = {"width": 1280}  # read by the factories in the spawned ranks


def make_model() -> nn.Module:
    w = int(os.environ.get("DDP_HETERO_WIDTH", ARGS["width"]))
    return mlp(w)


def make_optim(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR, momentum=0.9)


def eval_loss(state: dict[str, torch.Tensor]) -> float:
    return held_out_loss(make_model(), state, 2048)


# ---- the baselines ------------------------------------------------------------------------------


def run_solo(x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int) -> tuple[float, float]:
    """The fast rank alone: same model, optimizer, data order and batch size, in this process."""
    torch.manual_seed(42)
    model = make_model()
    samples, seconds = train_alone(model, make_optim(list(model.parameters())), x, y, epochs, batch)
    return samples / seconds, eval_loss(model.state_dict())


def _torch_ddp_rank(rank: int, port: int, x: torch.Tensor, y: torch.Tensor, epochs: int,
                    batch: int, width: int, out: str) -> None:  # fmt: skip
    os.environ["DDP_HETERO_WIDTH"] = str(width)
    join_pair(rank, port)
    torch.manual_seed(42)
    model = nn.parallel.DistributedDataParallel(make_model())
    opt = make_optim(list(model.parameters()))
    for g in opt.param_groups:  # the linear scaling rule, as flodl sync's lr_scale_ratio=1.0
        g["lr"] = LR * 2
    slow = Slowdown(SLOW if rank == 1 else 1.0, torch.device("cpu"))
    dist.barrier()
    t = time.perf_counter()
    steps = sum(ddp_epoch(model, opt, x, y, rank, batch, epoch, slow) for epoch in range(epochs))
    slow.settle()  # what rank 1 still owes, as flodl's ranks pay it before their epoch ends
    dist.barrier()
    seconds = time.perf_counter() - t
    if rank == 0:
        state = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
        result = {"samples_per_s": 2 * steps * batch / seconds, "loss": eval_loss(state)}
        Path(out).write_text(json.dumps(result))
    dist.barrier()
    os._exit(0)  # skip gloo teardown: the result is written


def run_torch_ddp(x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int,
                  width: int) -> tuple[float, float]:  # fmt: skip
    result = spawn_pair(_torch_ddp_rank, x, y, epochs, batch, width)
    return result["samples_per_s"], result["loss"]


def run_flodl(mode: str, x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int,
              slow: float = SLOW, bind: bool = False) -> tuple[float, float, str]:  # fmt: skip
    """One flodl pair run, rank 1 slowed ``slow`` times (1: not slowed), ranks bound to their
    own cores when ``bind``. Returns (samples/s, held-out loss, note)."""
    sync = mode.endswith("-sync")
    b = (
        Trainer.builder(make_model, make_optim, train_step)
        .dataset((x, y))
        .batch_size(batch)
        .num_epochs(epochs)
        .devices(["cpu", "cpu"])
        .mode(mode)
        .lr_scale_ratio(1.0 if sync else 0.0)
        .threads_per_rank(1)
        .bind_cores(bind)
    )
    if slow > 1.0:
        b = b.slowdown({1: slow})
    handle = b.run()
    state = handle.join()
    ms = sum(m.epoch_ms for m in handle.history)
    samples = sum(r.samples for m in handle.history for r in m.per_rank)
    last = handle.history[-1]
    lr = "lr x 2" if sync else "lr x 1"
    note = (
        f"anchor {last.anchor}, counts {last.counts}, {lr}" if last.counts else f"per batch, {lr}"
    )
    if sync:  # the gradient all-reduce runs inside backward: waiting is clocked as compute
        return samples / (ms / 1000.0), eval_loss(state.state_dict()), note
    # The engine's efficiency, immune to the machine's drift: samples trained per second over
    # what the ranks' own measured speeds in this very run (compute time, slowdown included)
    # could give if nobody ever waited or averaged.
    ideal = sum(
        sum(r.samples for m in handle.history for r in m.per_rank if r.rank == k)
        / (sum(r.compute_ms for m in handle.history for r in m.per_rank if r.rank == k) / 1000.0)
        for k in range(handle.world_size)
    )
    note += f", engine {samples / (ms / 1000.0) / ideal:.0%} of its ranks' speed"
    return samples / (ms / 1000.0), eval_loss(state.state_dict()), note


def round_order(runs: list[str]) -> list[str]:
    """One round's runs in order: every flodl sync run right after a torch DDP run of its own
    (``runs`` lists torch DDP once, first, when it is measured at all)."""
    if DDP not in runs or not any(n.endswith("-sync") for n in runs):
        return runs
    out: list[str] = []
    for name in runs[1:]:
        if name.endswith("-sync"):
            out.append(DDP)
        out.append(name)
    return out


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


@dataclass
class Measured:
    """Every throughput of the interleaved rounds (samples/s), and what the first round showed."""

    solo: list[float] = field(default_factory=list)
    """Each solo run: one before every round and one after the last."""
    sps: dict[str, list[float]] = field(default_factory=dict)
    """Per run name, one value per round (torch DDP: its first run of the round)."""
    ddp_all: list[float] = field(default_factory=list)
    """Every torch DDP run."""
    paired: dict[str, list[float]] = field(default_factory=dict)
    """Per flodl sync mode, its step time over the torch DDP run's just before it, per round."""
    loss: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def measure(args: argparse.Namespace, x: torch.Tensor, y: torch.Tensor,
            runs: list[str]) -> Measured:  # fmt: skip
    """Solo, then every run in :func:`round_order`, ``args.rounds`` times, then solo again."""
    m = Measured(sps={r: [] for r in runs}, paired={n: [] for n in runs if n.endswith("-sync")},
                 notes={DDP: "per batch, lr x 2"})  # fmt: skip
    for _ in range(args.rounds):
        s, m.loss["solo"] = run_solo(x, y, args.epochs, args.batch)
        m.solo.append(s)
        last_ddp = None
        for name in round_order(runs):
            if name == DDP:
                last_ddp, lo = run_torch_ddp(x, y, args.epochs, args.batch, args.width)
                if len(m.sps[DDP]) < len(m.solo):
                    m.sps[DDP].append(last_ddp)
                m.ddp_all.append(last_ddp)
                m.loss.setdefault(DDP, lo)
                continue
            v, lo, note = run_flodl(name[6:], x, y, args.epochs, args.batch)
            m.notes.setdefault(name, note)
            m.sps[name].append(v)
            m.loss.setdefault(name, lo)
            if name in m.paired and last_ddp is not None:
                m.paired[name].append(last_ddp / v)  # step time flodl / torch DDP
    m.solo.append(run_solo(x, y, args.epochs, args.batch)[0])
    return m


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument(
        "--modes",
        help=f"comma-separated flodl modes (default all six; {','.join(SWEEP_MODES)} with "
        "--slow-factor)",
    )
    p.add_argument("--no-torch-ddp", action="store_true", help="skip the torch DDP baseline")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (>= 1)")
    p.add_argument(
        "--slow-factor",
        help="sweep rank 1's slow factor instead, e.g. 1,2,4,8,16 (modes default to "
        f"{','.join(SWEEP_MODES)}; no torch DDP)",
    )
    p.add_argument(
        "--probe-seconds", type=float, default=3.0,
        help="seconds of each phase of the sweep's contention probe (default 3)",
    )  # fmt: skip
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.slow_factor is not None:
        try:
            factors = parse_factors(args.slow_factor)
        except ValueError as e:
            p.error(str(e))
        if not args.probe_seconds > 0:
            p.error(f"--probe-seconds must be > 0, got {args.probe_seconds}")
        modes = sweep_modes(args.modes)
        if isinstance(modes, str):
            p.error(modes)
        run_sweep(args, factors, modes)
        return
    ARGS["width"] = args.width
    os.environ["DDP_HETERO_WIDTH"] = str(args.width)  # spawned flodl ranks build the same model
    x, y = make_data(args.samples, seed=0)
    modes = [m.strip() for m in (args.modes or ",".join(MODES)).split(",") if m.strip()]
    runs = ([] if args.no_torch_ddp else [DDP]) + [f"flodl {m}" for m in modes]

    m = measure(args, x, y, runs)
    solo, sps, loss, notes = m.solo, m.sps, m.loss, m.notes
    # Each run against the better solo run around it (the reference least slowed by the
    # machine), and against their mean (the machine's speed at that moment).
    before, after = solo[: args.rounds], solo[1 : args.rounds + 1]
    ratios = {n: against_solo(sps[n], before, after) for n in runs}
    centred = {n: _median(against_mean(sps[n], before, after)) for n in runs}
    _report(args, solo, sps, ratios, centred, loss, notes)
    if DDP in sps:
        for name, pairs in m.paired.items():
            fastest = max(m.ddp_all) / max(sps[name])
            print(
                f"step time {name} / torch DDP: {_median(pairs):.3f} ({min(pairs):.3f}-"
                f"{max(pairs):.3f}; against the torch DDP run just before it, {len(pairs)} "
                f"round(s); fastest of each: {fastest:.3f}) (goal <= 1.03, see ddp_sync_step.py)"
            )


def _report(args: argparse.Namespace, solo: list[float], sps: dict[str, list[float]],
            ratios: dict[str, list[float]], centred: dict[str, float], loss: dict[str, float],
            notes: dict[str, str]) -> None:  # fmt: skip
    print(
        f"flodl ddp_hetero: 2 CPU ranks x 1 thread, rank 1 slowed {SLOW:g}x, width {args.width}, "
        f"{args.samples} samples x {args.epochs} epochs, batch {args.batch}, "
        f"{args.rounds} interleaved round(s)"
    )
    print(
        f"{'run':<24}{'samples/s':>12}{'vs alone':>10}{'(low-high)':>14}{'vs mean':>9}"
        f"{'loss':>10}{'vs solo':>10}  notes"
    )
    solo_loss = loss["solo"]
    print(
        f"{'fast rank alone':<24}{_median(solo):>12.0f}{1.0:>9.2f}x{'':>14}{1.0:>8.2f}x"
        f"{solo_loss:>10.4f}"
        f"{0.0:>+9.1%}  1 rank, {len(solo)} runs ({min(solo):.0f}-{max(solo):.0f} samples/s)"
    )
    for name, r in ratios.items():
        spread = f"{min(r):.2f}-{max(r):.2f}"
        print(
            f"{name:<24}{_median(sps[name]):>12.0f}{_median(r):>9.2f}x{spread:>14}"
            f"{centred[name]:>8.2f}x{loss[name]:>10.4f}"
            f"{(loss[name] - solo_loss) / solo_loss:>+9.1%}  {notes[name]}"
        )


# ---- the slow-factor sweep ----------------------------------------------------------------------

SWEEP_MODES = ("cpu-cadence", "cpu-async")


def parse_factors(text: str) -> list[float]:
    """``"1,2,4"`` -> ``[1.0, 2.0, 4.0]``: numbers >= 1, no repeats, in the order given.

    Raises:
        ValueError: naming the bad entry and what a factor must be.
    """
    out: list[float] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            f = float(item)
        except ValueError:
            raise ValueError(f"--slow-factor: {item!r} is not a number") from None
        if not f >= 1.0 or f == float("inf"):
            raise ValueError(
                f"--slow-factor: {item} is below 1 or not finite (1 = as fast as rank 0, 2 = "
                "twice as slow)"
            )
        if f in out:
            raise ValueError(f"--slow-factor: {item} is given twice")
        out.append(f)
    if not out:
        raise ValueError(f"--slow-factor: {text!r} names no factor (e.g. --slow-factor 1,2,4)")
    return out


def sweep_modes(text: str | None) -> list[str] | str:
    """The sweep's modes (default cpu-cadence, cpu-async), or the error to print: a sync mode
    waits for the slow rank every batch, so it has no place next to the ideal."""
    names = [m.strip() for m in (text or ",".join(SWEEP_MODES)).split(",") if m.strip()]
    if not names:
        return "--modes names no mode"
    out = []
    for n in names:
        try:
            mode = parse_mode(n).name
        except ConfigError:
            return f"--modes: unknown mode {n!r}; expected one of {', '.join(MODES)}"
        if mode.endswith("-sync"):
            return (
                f"--modes with --slow-factor: {mode} waits for the slow rank every batch; use "
                "cadence or async modes"
            )
        out.append(mode)
    return list(dict.fromkeys(out))


def ideal(factor: float) -> float:
    """The pair's best throughput over the fast rank alone when the other rank is ``factor``
    times slower: ``1 + 1/factor``."""
    return 1.0 + 1.0 / factor


def against_solo(values: list[float], before: list[float], after: list[float]) -> list[float]:
    """Each run's throughput over the better of the solo runs just before and just after it
    (the reference least slowed by the machine's drift, so the ratio errs low)."""
    return [v / max(a, b) for v, a, b in zip(values, before, after, strict=True)]


def against_mean(values: list[float], before: list[float], after: list[float]) -> list[float]:
    """Each run's throughput over the mean of the solo runs just before and just after it (the
    machine's speed at the run's time, were its drift linear: no bias either way)."""
    return [2 * v / (a + b) for v, a, b in zip(values, before, after, strict=True)]


def together_ratios(probes: list[dict[str, Any]], factor: float) -> list[list[float]]:
    """Per rank, over the rounds: its working speed beside the other rank (slowed ``factor``
    times) over its speed alone."""
    return [
        [p["together"][factor][r] / p["alone"][r] for p in probes if factor in p["together"]]
        for r in range(2)
    ]


def bind_plan() -> list[list[int]] | None:
    """The cores of each of two ranks (the engine's own slices), or ``None`` where this machine
    cannot bind two one-thread ranks apart."""
    if not binding_supported() or len(os.sched_getaffinity(0)) < 2:
        return None
    return [cores_for(r, 2, 1) for r in range(2)]


@dataclass
class Sweep:
    """Everything the slow-factor sweep measured, in run order."""

    factors: list[float]
    modes: list[str]
    solo: list[float] = field(default_factory=list)
    """Solo runs: one before each factor's group of pair runs, one after the last."""
    groups: list[float] = field(default_factory=list)
    """The factor of each group of pair runs (between solo[i] and solo[i + 1])."""
    sps: dict[tuple[float, str], list[float]] = field(default_factory=dict)
    """Per (factor, mode), one throughput per round."""
    ratios: dict[tuple[float, str], list[float]] = field(default_factory=dict)
    """Per (factor, mode), each round's run over the better solo around it."""
    centred: dict[tuple[float, str], list[float]] = field(default_factory=dict)
    """Per (factor, mode), each round's run over the mean of the two solos around it."""
    notes: dict[tuple[float, str], str] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)
    losses: dict[tuple[float, str], list[float]] = field(default_factory=dict)
    """Per (factor, mode) the held-out loss of each round's run; ``"solo"`` for the solo runs."""


def run_solo_bound(x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int,
                   cores: list[int] | None) -> tuple[float, float]:  # fmt: skip
    """The fast rank alone on ``cores`` (the core rank 0 gets in the pair runs), then the
    process's cores as they were: its samples per second and held-out loss."""
    before = os.sched_getaffinity(0) if cores is not None else None
    if cores is not None:
        os.sched_setaffinity(0, cores)
    try:
        return run_solo(x, y, epochs, batch)
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)


def measure_sweep(args: argparse.Namespace, x: torch.Tensor, y: torch.Tensor,
                  sweep: Sweep, cores: list[list[int]] | None) -> Sweep:  # fmt: skip
    """``args.rounds`` rounds of: the contention probe, then per factor a solo run and every
    mode's pair run; one solo run at the very end."""
    for _ in range(args.rounds):
        sweep.probes.append(
            contention_probe(args.width, args.batch, sweep.factors, args.probe_seconds, cores)
        )
        for f in sweep.factors:
            sps, loss = run_solo_bound(x, y, args.epochs, args.batch, cores and cores[0])
            sweep.solo.append(sps)
            sweep.losses.setdefault((0.0, "solo"), []).append(loss)
            sweep.groups.append(f)
            for mode in sweep.modes:
                v, lo, note = run_flodl(mode, x, y, args.epochs, args.batch, f, cores is not None)
                sweep.sps.setdefault((f, mode), []).append(v)
                sweep.losses.setdefault((f, mode), []).append(lo)
                sweep.notes.setdefault((f, mode), note)
    sweep.solo.append(run_solo_bound(x, y, args.epochs, args.batch, cores and cores[0])[0])
    for f in sweep.factors:
        at = [i for i, g in enumerate(sweep.groups) if g == f]
        before, after = [sweep.solo[i] for i in at], [sweep.solo[i + 1] for i in at]
        for mode in sweep.modes:
            sweep.ratios[(f, mode)] = against_solo(sweep.sps[(f, mode)], before, after)
            sweep.centred[(f, mode)] = against_mean(sweep.sps[(f, mode)], before, after)
    return sweep


def _spread(xs: list[float]) -> str:
    return f"{min(xs):.2f}-{max(xs):.2f}" if len(xs) > 1 else ""


def factor_table(sweep: Sweep, f: float) -> list[str]:
    """The table of one factor: the fast rank alone, each mode's throughput, its median ratio to
    the solo runs around it (low-high), the ideal and the share of it, then how much the two
    cores slowed each other."""
    at = [i for i, g in enumerate(sweep.groups) if g == f]
    solos = sorted({sweep.solo[k] for i in at for k in (i, i + 1)})
    who = "equal ranks" if f == 1 else f"rank 1 slowed {f:g}x"
    lines = [
        f"slow factor {f:g} ({who}): ideal 1 + 1/{f:g} = {ideal(f):.2f}x the fast rank alone",
        f"{'run':<24}{'samples/s':>12}{'vs alone':>10}{'(low-high)':>12}{'vs mean':>9}"
        f"{'ideal':>8}{'of ideal':>10}{'loss/solo':>11}  notes",
        f"{'fast rank alone':<24}{_median(solos):>12.0f}{1.0:>9.2f}x{'':>12}{'':>9}{'':>8}{'':>10}"
        f"  {len(solos)} runs ({min(solos):.0f}-{max(solos):.0f} samples/s)",
    ]
    for mode in sweep.modes:
        r = sweep.ratios[(f, mode)]
        lines.append(
            f"{'flodl ' + mode:<24}{_median(sweep.sps[(f, mode)]):>12.0f}{_median(r):>9.2f}x"
            f"{_spread(r):>12}{_median(sweep.centred[(f, mode)]):>8.2f}x"
            f"{ideal(f):>7.2f}x{_median(r) / ideal(f):>10.0%}"
            f"{loss_ratio(sweep, f, mode):>11.3f}  {sweep.notes[(f, mode)]}"
        )
    fast, slow = together_ratios(sweep.probes, f)
    if fast:
        lines.append(
            f"ranks together vs each alone: fast rank {_median(fast):.2f}"
            + (f" ({_spread(fast)})" if len(fast) > 1 else "")
            + f", slow rank {_median(slow):.2f}"
            + (f" ({_spread(slow)})" if len(slow) > 1 else "")
            + f" (working speed side by side over alone, {len(fast)} round(s); 1.00 = the two "
            "cores do not slow each other)"
        )
    return lines


def loss_ratio(sweep: Sweep, f: float, mode: str) -> float:
    """The median held-out loss of a mode's runs at factor ``f`` over the solo runs' median
    (below 1: the pair ended better than the fast rank alone)."""
    return _median(sweep.losses[(f, mode)]) / _median(sweep.losses[(0.0, "solo")])


def summary_table(sweep: Sweep) -> list[str]:
    """One row per factor: the ideal, each mode's median ratio and share of the ideal, and the
    fast rank's speed beside the slowed one over alone."""
    head = f"{'factor':>7}{'ideal':>8}"
    for mode in sweep.modes:
        head += f"{mode:>14}{'of ideal':>10}{'loss':>10}"
    lines = [head + f"{'together':>10}"]
    for f in sweep.factors:
        row = f"{f:>7g}{ideal(f):>7.2f}x"
        for mode in sweep.modes:
            m = _median(sweep.ratios[(f, mode)])
            row += f"{m:>13.2f}x{m / ideal(f):>10.0%}{loss_ratio(sweep, f, mode):>10.3f}"
        fast, _ = together_ratios(sweep.probes, f)
        lines.append(row + (f"{_median(fast):>10.2f}" if fast else f"{'—':>10}"))
    return lines


def run_sweep(args: argparse.Namespace, factors: list[float], modes: list[str]) -> None:
    ARGS["width"] = args.width
    os.environ["DDP_HETERO_WIDTH"] = str(args.width)
    x, y = make_data(args.samples, seed=0)
    cores = bind_plan()
    where = (
        f"rank 0 on core(s) {cores[0]}, rank 1 on {cores[1]}, solo on rank 0's"
        if cores
        else "unbound (fewer than 2 cores to bind to)"
    )
    sweep = measure_sweep(args, x, y, Sweep(factors=factors, modes=modes), cores)
    print(
        f"flodl ddp_hetero slow-factor sweep: 2 CPU ranks x 1 thread ({where}), width "
        f"{args.width}, {args.samples} samples x {args.epochs} epochs, batch {args.batch}, "
        f"{args.rounds} interleaved round(s), factors {', '.join(f'{f:g}' for f in factors)}"
    )
    for f in factors:
        print()
        print("\n".join(factor_table(sweep, f)))
    print()
    print("summary (median ratio to the fast rank alone; loss: held-out loss over the solo")
    print("runs'; together: the fast rank's working speed beside the slowed one over alone)")
    print("\n".join(summary_table(sweep)))


if __name__ == "__main__":
    main()
