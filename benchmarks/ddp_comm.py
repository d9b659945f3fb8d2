"""Communication per sample on CPU: per-batch gradient sync against local steps with averaging
(ElChe's automatic cadence, a fixed window H with plain averaging, DiLoCo at H = 100 and 500).

Two CPU ranks (one torch thread each, no slowdown) train the same MLP classifier on the same
seeded synthetic data; every run sees the same number of samples (``--epochs`` passes over
``--samples``), so the final held-out loss is compared at equal samples.

- ``fast rank alone``: one process, one thread, the whole dataset (the loss reference);
- ``flodl cpu-sync``: gradients all-reduced every batch (torch DDP's buckets under flodl's hook);
- ``flodl cpu-cadence``: weights averaged every window; ElChe tunes the window (the anchor);
- ``avg H=<h>``, ``DiLoCo... H=<h>``: cpu-cadence with the window held at ``h`` batches
  (``.anchor(h).min_anchor(h).max_anchor(h)``) and an outer optimizer on the averages
  (``bf16``: the averaged parameters travel as bfloat16, ``.bf16_wire(True)``).

Columns: ``samples`` trained (all ranks), ``averagings`` (sum of ``EpochMetrics.syncs``: one per
batch in sync mode), ``bytes/sample`` (``RankMetrics.comm_bytes`` summed over ranks and epochs,
divided by the samples: what the ranks handed to all-reduce), the reduction against per-batch
sync, the held-out loss and its difference to solo, and the training wall time (sum of the epoch
times; process start-up excluded).

Learning rates: every inner optimizer is SGD lr ``--lr`` (0.02), momentum 0.9. Per-batch sync
steps on the pooled batch of both ranks and takes the linear scaling rule (lr x 2, flodl's
default ``lr_scale_ratio=1.0``); the windowed rows average replicas that each step on their own
batches and keep the solo lr (``lr_scale_ratio=0.0``). DiLoCo's outer step is Nesterov SGD on
the pseudo-gradient: the paper's lr 0.7 / momentum 0.9, and ``--diloco-lr`` for a gentler
outer lr (see ``docs/benchmark.md`` for why both are shown).

Usage: ``python benchmarks/ddp_comm.py [--samples 64000] [--epochs 3] [--batch 32]
[--width 256] [--lr 0.02] [--diloco-lr 0.35] [--rows solo,sync,diloco500,...]`` (every row
by default; an unknown key lists them). Timings move by tens of percent when other processes
share the cores; the bytes are exact.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from _ddp_task import held_out_loss, make_data, mlp, train_alone, train_step
from torch import nn

from flodl_ddp import DiLoCo, OuterAvg, SlowMo, Trainer

WORLD = 2
ARGS: dict[str, float] = {"width": 256, "lr": 0.02}  # read by the factories in the spawned ranks


def make_model() -> nn.Module:
    w = int(os.environ.get("DDP_COMM_WIDTH", ARGS["width"]))
    return mlp(w)


def make_optim(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    lr = float(os.environ.get("DDP_COMM_LR", ARGS["lr"]))
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def eval_loss(state: dict[str, torch.Tensor]) -> float:
    """Cross-entropy on 4096 held-out samples (a seed the training set never uses)."""
    return held_out_loss(make_model(), state, 4096)


@dataclass
class Row:
    name: str
    samples: int
    averagings: int
    bytes_per_sample: float
    loss: float
    train_s: float
    note: str


def run_solo(x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int) -> Row:
    """The fast rank alone: same model, optimizer, data order and batch size, in this process."""
    torch.manual_seed(42)
    model = make_model()
    samples, seconds = train_alone(model, make_optim(list(model.parameters())), x, y, epochs, batch)
    return Row("fast rank alone", samples, 0, 0.0, eval_loss(model.state_dict()), seconds,
               "1 rank, no communication")  # fmt: skip


def run_flodl(
    name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    epochs: int,
    batch: int,
    *,
    mode: str,
    window: int | None = None,
    outer: object | None = None,
    bf16: bool = False,
) -> Row:
    """One flodl run on 2 CPU ranks; ``window`` fixes the anchor, ``outer`` the outer step,
    ``bf16`` sends the averaged parameters as bfloat16."""
    sync = mode.endswith("-sync")
    b = (
        Trainer.builder(make_model, make_optim, train_step)
        .dataset((x, y))
        .batch_size(batch)
        .num_epochs(epochs)
        .devices(["cpu"] * WORLD)
        .mode(mode)
        .threads_per_rank(1)
        .lr_scale_ratio(1.0 if sync else 0.0)
    )
    if window is not None:
        b = b.anchor(window).min_anchor(window).max_anchor(window)
    if outer is not None:
        b = b.outer_optimizer(outer)
    if bf16:
        b = b.bf16_wire(True)
    handle = b.run()
    state = handle.join()
    hist = handle.history
    samples = sum(r.samples for m in hist for r in m.per_rank)
    sent = sum(r.comm_bytes for m in hist for r in m.per_rank)
    lr = "lr x 2" if sync else "lr x 1"
    last = hist[-1]
    if sync:
        note = f"per batch, {lr}"
    else:
        note = f"anchor {last.anchor}, counts {last.counts}, {lr}"
        if outer is not None:
            note += f", {outer!r}"
        if bf16:
            note += ", bf16 wire"
    syncs = sum(m.syncs for m in hist)
    train_s = sum(m.epoch_ms for m in hist) / 1000.0
    loss = eval_loss(state.state_dict())
    return Row(name, samples, syncs, sent / max(samples, 1), loss, train_s, note)


def row_runners(diloco_lr: float) -> dict[str, tuple[str, Callable[..., Row]]]:
    """Row key -> (label, runner(x, y, epochs, batch))."""

    def fl(label: str, **kw: object) -> tuple[str, Callable[..., Row]]:
        return label, lambda x, y, e, b: run_flodl(label, x, y, e, b, **kw)  # type: ignore[arg-type]

    gentle = f"DiLoCo(lr={diloco_lr:g})"
    return {
        "solo": ("fast rank alone", run_solo),
        "sync": fl("flodl cpu-sync", mode="cpu-sync"),
        "cadence": fl("flodl cpu-cadence", mode="cpu-cadence"),
        "avg100": fl("avg H=100", mode="cpu-cadence", window=100, outer=OuterAvg()),
        "slowmo100": fl("SlowMo H=100", mode="cpu-cadence", window=100, outer=SlowMo()),
        "diloco100": fl("DiLoCo() H=100", mode="cpu-cadence", window=100, outer=DiLoCo()),
        "diloco500": fl("DiLoCo() H=500", mode="cpu-cadence", window=500, outer=DiLoCo()),
        "diloco100lr": fl(
            gentle + " H=100", mode="cpu-cadence", window=100, outer=DiLoCo(diloco_lr)
        ),
        "diloco500lr": fl(
            gentle + " H=500", mode="cpu-cadence", window=500, outer=DiLoCo(diloco_lr)
        ),
        "diloco500lrbf16": fl(
            gentle + " H=500 bf16",
            mode="cpu-cadence",
            window=500,
            outer=DiLoCo(diloco_lr),
            bf16=True,
        ),
    }


DEFAULT_ROWS = (
    "solo,sync,cadence,avg100,slowmo100,diloco100,diloco500,diloco100lr,diloco500lr,diloco500lrbf16"
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=64000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.02, help="inner SGD lr (momentum 0.9)")
    p.add_argument("--diloco-lr", type=float, default=0.35, help="the gentler DiLoCo outer lr")
    p.add_argument("--rows", default=DEFAULT_ROWS, help="comma-separated row keys")
    args = p.parse_args()
    ARGS["width"], ARGS["lr"] = args.width, args.lr
    os.environ["DDP_COMM_WIDTH"] = str(args.width)  # spawned ranks build the same model
    os.environ["DDP_COMM_LR"] = repr(args.lr)
    runners = row_runners(args.diloco_lr)
    keys = [k.strip() for k in args.rows.split(",") if k.strip()]
    unknown = [k for k in keys if k not in runners]
    if unknown:
        p.error(f"--rows: unknown {unknown}; choose from {', '.join(runners)}")
    x, y = make_data(args.samples, seed=0)

    rows = [runners[k][1](x, y, args.epochs, args.batch) for k in keys]
    solo = next((r for r in rows if r.name == "fast rank alone"), None)
    per_batch = next((r for r in rows if r.name == "flodl cpu-sync"), None)
    n_params = sum(t.numel() for t in make_model().parameters())
    per_rank = args.samples // WORLD // args.batch
    print(
        f"flodl ddp_comm: {WORLD} CPU ranks x 1 thread, no slowdown, MLP width {args.width} "
        f"({n_params} parameters, {4 * n_params} bytes fp32), {args.samples} samples x "
        f"{args.epochs} epochs, batch {args.batch} per rank (~{per_rank} batches per rank and "
        f"epoch), inner SGD lr {args.lr:g} momentum 0.9"
    )
    print(
        f"{'run':<28}{'samples':>9}{'averagings':>11}{'bytes/sample':>13}{'reduction':>11}"
        f"{'loss':>8}{'vs solo':>9}{'train s':>9}  notes"
    )
    for r in rows:
        if r.bytes_per_sample == 0:
            red = "-"
        elif per_batch is not None:
            red = f"{per_batch.bytes_per_sample / r.bytes_per_sample:.0f}x"
        else:
            red = "?"
        vs = f"{(r.loss - solo.loss) / solo.loss:+.1%}" if solo is not None else "?"
        print(
            f"{r.name:<28}{r.samples:>9}{r.averagings:>11}{r.bytes_per_sample:>13.1f}{red:>11}"
            f"{r.loss:>8.4f}{vs:>9}{r.train_s:>9.1f}  {r.note}"
        )
    print(
        f"bytes are what each rank hands to all-reduce, summed over ranks; a ring all-reduce moves "
        f"2(W-1)/W of each tensor over each rank's link ({2 * (WORLD - 1) / WORLD:g}x at "
        f"W={WORLD}), so the wire carries about that multiple of the counted bytes"
    )


if __name__ == "__main__":
    main()
