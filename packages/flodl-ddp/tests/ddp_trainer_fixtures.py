"""Top-level factories and steps for the multi-process trainer tests.

Spawned ranks import this module by name (the tests put its folder on ``sys.path``), which is why
everything a rank calls lives here and not inside a test function.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.distributed as dist
from rank_harness import write_result
from torch import nn

from flodl_ddp import record_scalar

IN, HIDDEN = 4, 16


def make_data(n: int = 512, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded regression task: ``y = x @ w + 0.05 noise``, x ``(n, 4)``, y ``(n, 1)``."""
    w = torch.randn(IN, 1, generator=torch.Generator().manual_seed(1234))  # one task for all seeds
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    y = x @ w + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def make_bn_model() -> nn.Module:
    """With BatchNorm: float and integer buffers to average."""
    return nn.Sequential(
        nn.Linear(IN, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1)
    )


def make_sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05)


def make_slow_sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.005)


def make_adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=0.01)


def mse_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    loss = nn.functional.mse_loss(model(batch[0]), batch[1])
    record_scalar("half_loss", float(loss.detach()) / 2)
    return loss


def fp16_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """:func:`mse_step` under float16 autocast on the model's device (CPU autocast has it too)."""
    with torch.autocast(next(model.parameters()).device.type, dtype=torch.float16):
        pred = model(batch[0])
    return nn.functional.mse_loss(pred.float(), batch[1])


def threads_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """``mse_step`` that also records the torch thread count the batch trained with."""
    record_scalar("threads", float(torch.get_num_threads()))
    return mse_step(model, batch)


def sleepy_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """A batch that takes ~4 ms of wall time without using a core: timings that other processes
    on a busy machine cannot distort (the slowdown hook then doubles it on the slowed rank)."""
    time.sleep(0.004)
    return mse_step(model, batch)


def id_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """:func:`sleepy_step` that also appends the batch's sample ids (its third tensor) to a file
    of this process in ``$FLODL_TEST_IDS_DIR``: the test counts how often each sample was run.
    Where the platform tells, it records the cores the rank may run on, as a scalar named
    ``cores 0,1`` (the name carries the set; the value is 1)."""
    _record_ids(batch)
    if hasattr(os, "sched_getaffinity"):
        record_scalar("cores " + ",".join(map(str, sorted(os.sched_getaffinity(0)))), 1.0)
    return sleepy_step(model, batch)


def quick_id_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """:func:`id_step` without the sleep: a batch costs far less than an averaging round."""
    _record_ids(batch)
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def _record_ids(batch: tuple[torch.Tensor, ...]) -> None:
    folder = os.environ.get("FLODL_TEST_IDS_DIR")
    if folder:
        with open(os.path.join(folder, f"ids-{os.getpid()}.txt"), "a") as f:
            f.write(" ".join(str(i) for i in batch[2].tolist()) + "\n")


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


_calls = {"n": 0}


def failing_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Rank 1 raises at its 7th batch."""
    _calls["n"] += 1
    if _rank() == 1 and _calls["n"] == 7:
        raise ValueError("boom at batch 7 on rank 1")
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def shape_error_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Feeds the model a wrongly shaped input."""
    return model(batch[0][:, :2]).sum()


def mismatched_model() -> nn.Module:
    """Rank 1 builds a wider hidden layer than rank 0."""
    hidden = HIDDEN + _rank()
    return nn.Sequential(nn.Linear(IN, hidden), nn.Tanh(), nn.Linear(hidden, 1))


class _WithSpare(nn.Module):
    """The regression MLP beside a layer no forward uses (a branch not taken, a head left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.spare = make_model(), nn.Linear(IN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def model_with_a_spare_layer() -> nn.Module:
    return _WithSpare()


class Tied(nn.Module):
    """The regression MLP whose output layer reuses the input layer's weight: one parameter
    under two ``state_dict`` names, as a language model's tied embeddings are; and a buffer
    ``state_dict`` leaves out (``persistent=False``, as a rotary embedding's cache is)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(IN, IN, bias=False), nn.Linear(IN, IN)
        self.out.weight = self.inp.weight
        self.head = nn.Linear(IN, 1)
        self.register_buffer("scale", torch.ones(IN), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.out(torch.tanh(self.inp(x * self.scale)))))


def check_tied(state: Any) -> None:
    """``state`` (of a :class:`Tied`) holds what ``state_dict()`` does, the tied weight under
    both names and no ``scale``, and loads into a fresh one, strictly too; it stays tied."""
    assert set(state.params) == {"inp.weight", "out.weight", "out.bias", "head.weight", "head.bias"}
    assert state.buffers == {}
    assert torch.equal(state.params["inp.weight"], state.params["out.weight"])
    model = Tied()
    state.load_into(model)
    model.load_state_dict(state.state_dict())  # strict
    assert model.out.weight is model.inp.weight
    assert torch.equal(model.inp.weight.detach(), state.params["inp.weight"])


def regression_builder(x: torch.Tensor, y: torch.Tensor, epochs: int, step: Any = mse_step) -> Any:
    """The regression task's trainer builder: Adam, batches of 16, anchor 4 (the caller adds the
    mode and the devices). Every mode takes the linear scaling rule (lr x world): this small
    task's tolerances against the solo run were set for it, whatever the policy's default."""
    from flodl_ddp import Trainer

    return (
        Trainer.builder(make_model, make_adam, step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(epochs)
        .anchor(4)
        .lr_scale_ratio(1.0)
    )


def mean_eval(model: nn.Module) -> float:
    x, y = make_data(128, seed=99)
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


# ---- the heavier model of the cadence test: a batch takes a few ms, so timings mean something ---


def make_heavy_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(IN, 384), nn.Tanh(), nn.Linear(384, 384), nn.Tanh(), nn.Linear(384, 1)
    )


# ---- rank bodies started directly (not through Trainer) ----------------------------------------


def _join_group(rank: int, world: int, port: int) -> None:
    import os
    from datetime import timedelta

    torch.set_num_threads(1)
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1"
    )
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


def averaging_worker(rank: int, port: int, world: int, out_dir: str) -> None:
    """Averager and the sync comm hook on hand-made numbers: rank r holds the value r + 1 in
    every parameter, ran ``r + 1`` batches, and has buffers ``running_mean = r``,
    ``num_batches_tracked = 3 r``."""
    import traceback

    from flodl_ddp import DiLoCo
    from flodl_ddp._average import Averager
    from flodl_ddp._modes import Backend
    from flodl_ddp._reduce import GroupReducer, SharedReducer
    from flodl_ddp._shm import SharedSlots
    from flodl_ddp._sync_hook import wrap_sync

    results: dict = {}
    try:
        _join_group(rank, world, port)
        counts = [r + 1 for r in range(world)]
        weight = counts[rank] / sum(counts)

        def model_with(value: float) -> nn.Module:
            m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
            with torch.no_grad():
                for p in m.parameters():
                    p.fill_(value)
                m[1].running_mean.fill_(float(rank))
                m[1].num_batches_tracked.fill_(3 * rank)
            return m

        from torch.distributed.distributed_c10d import _get_default_store

        from flodl_ddp._comm import StoreComm as Comm

        comm = Comm(dist.PrefixStore("avg", _get_default_store()), rank, world)
        weights = [c / sum(counts) for c in counts]
        shm_paths: list[str] = []
        for name, backend, kw in [
            ("nccl", Backend.NCCL, {}),
            ("cpu", Backend.CPU, {}),
            ("cpu_bf16", Backend.CPU, {"bf16_wire": True}),
            ("easgd", Backend.CPU, {"easgd_alpha": 0.5}),
            ("shm", Backend.CPU, {}),
            ("shm_easgd", Backend.CPU, {"easgd_alpha": 0.5}),
            ("shm_bf16", Backend.CPU, {"bf16_wire": True}),
        ]:
            m = model_with(rank + 1.0)
            wire = torch.bfloat16 if kw.get("bf16_wire") else None
            averager = Averager(
                m, on_host=backend is Backend.CPU, easgd_alpha=kw.get("easgd_alpha")
            )
            slots = None
            if name.startswith("shm"):  # the rule of a run: host buffers, no bf16 wire
                slots = SharedSlots.open(comm, averager.specs(), eligible=wire is None)
            averager.reducer = SharedReducer(slots, rank) if slots else GroupReducer(wire)
            shared = slots is not None
            for _ in range(2):  # the second round reuses the first one's slots
                with torch.no_grad():
                    m.load_state_dict(model_with(rank + 1.0).state_dict())
                averager.stage()
                comm.barrier()  # stands in for the round's arrival exchange
                div = averager.average(weights, range(world), rank)
                comm.barrier()  # and for its closing one
            results[name] = {
                "weight": m[0].weight.flatten().tolist(),
                "running_mean": m[1].running_mean.tolist(),
                "tracked": int(m[1].num_batches_tracked),
                "divergence": div,
                "shared": shared,
            }
            if slots is not None:
                shm_paths.append(slots.path)
        results["shm_files"] = [p for p in shm_paths if os.path.exists(p)]
        # DiLoCo: every rank starts the window from 0 (the global weights), then drifts to r + 1.
        m = model_with(0.0)
        avg = Averager(m, on_host=True, outer=DiLoCo(lr=0.7, momentum=0.9))
        avg.reducer = GroupReducer()
        with torch.no_grad():
            for p in m.parameters():
                p.fill_(rank + 1.0)
        avg.average(weights, range(world), rank)
        results["diloco"] = {"weight": m[0].weight.flatten().tolist()}
        # The sync hook: d loss / d w = r + 1 on every element, weighted by counts.
        # Equal weights take DDP's own mean (no hook); the cpu backend's bf16 wire, the hook.
        for name, backend, bf16, w in [
            ("hook_grad", Backend.NCCL, False, weight),
            ("mean_grad", Backend.NCCL, False, None),
            ("bf16_grad", Backend.CPU, True, weight),
        ]:
            lin = nn.Linear(3, 1, bias=False)
            ddp, state = wrap_sync(lin, torch.device("cpu"), backend, bf16, w)
            for _ in range(2):  # the second step reuses the buckets the gradients now view
                lin.zero_grad(set_to_none=True)
                (ddp(torch.ones(1, 3)) * (rank + 1.0)).sum().backward()
            results[name] = {
                "grad": lin.weight.grad.flatten().tolist(),
                "native": state.native,
                "step_bytes": state.step_bytes,
            }
    except Exception:
        results["error"] = traceback.format_exc()
    write_result(out_dir, rank, results)


def _eval_mse(state, x: torch.Tensor, y: torch.Tensor) -> float:
    m = make_model()
    state.load_into(m)
    with torch.no_grad():
        return float(nn.functional.mse_loss(m(x), y))


def _cooperative_session(
    x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor, yt: torch.Tensor
) -> dict:
    """The cooperative tier on this rank: the user's own loop over ``session.epoch(n)``."""
    from flodl_ddp import DdpConfig, Trainer

    torch.manual_seed(100 + _rank())  # different initial weights per rank: setup must unify them
    cfg = DdpConfig(dataset=(x, y), batch_size=16, mode="cpu-cadence", anchor=4)
    session = Trainer.setup(make_model(), make_adam, cfg)
    batches = 0
    for epoch in range(3):
        for batch in session.epoch(epoch):
            loss = nn.functional.mse_loss(session.model(batch[0]), batch[1])
            session.step(loss)
            batches += 1
    state = session.state()
    out = {
        "world": session.world_size,
        "batches": batches,
        "losses": [m.avg_loss for m in session.metrics],
        "eval": _eval_mse(state, xt, yt),
        "params": {k: v.flatten().tolist() for k, v in state.params.items()},
    }
    session.close()
    return out


def torchrun_worker(rank: int, port: int, world: int, out_dir: str, epochs: int, ckpt: str) -> None:
    """Runs as one rank with torchrun's environment set: every mode in turn, the resume test,
    mismatched replicas, then unused parameters in sync; each result is written before the next
    run starts."""
    import time
    import traceback

    from flodl_ddp import MODES, DdpError, Trainer

    results: dict = {}
    try:
        _join_group(rank, world, port)
        x, y = make_data(512, seed=0)
        xt, yt = make_data(256, seed=1)

        def builder(mode: str, n_epochs: int):
            return regression_builder(x, y, n_epochs).mode(mode)

        for mode in MODES:
            t = time.perf_counter()
            h = builder(mode, epochs).run()
            state = h.join(timeout=120)
            results[mode] = {
                "eval": _eval_mse(state, xt, yt),
                "losses": [m.avg_loss for m in h.history],
                "seconds": time.perf_counter() - t,
                # per epoch: the averagings (sync: steps) and each rank's bytes to all-reduce
                "syncs": [m.syncs for m in h.history],
                "comm_bytes": [[r.comm_bytes for r in m.per_rank] for m in h.history],
            }
            write_result(out_dir, rank, results)

        # Resume: 4 epochs straight vs 2 epochs + checkpoint, then resumed to 4.
        straight = builder("cpu-sync", 4).run().join(timeout=120)
        builder("cpu-sync", 2).checkpoint_every(2, ckpt).run().join(timeout=120)
        resumed_handle = builder("cpu-sync", 4).resume(ckpt).run()
        resumed = resumed_handle.join(timeout=120)
        results["resume"] = {
            "identical": all(
                torch.equal(straight.params[k], resumed.params[k]) for k in straight.params
            ),
            "epochs_run": [m.epoch for m in resumed_handle.history],
        }
        write_result(out_dir, rank, results)

        results["session"] = _cooperative_session(x, y, xt, yt)
        write_result(out_dir, rank, results)

        try:
            Trainer.builder(mismatched_model, make_adam, mse_step).dataset((x, y)).batch_size(
                16
            ).num_epochs(1).mode("cpu-cadence").run().join(timeout=60)
            results["mismatch"] = "no error"
        except DdpError as e:
            results["mismatch"] = str(e)
        write_result(out_dir, rank, results)

        # tied weights under EASGD: the run's result is its consensus, one tensor per parameter
        b = Trainer.builder(Tied, make_adam, mse_step).dataset((x, y)).batch_size(16)
        state = b.num_epochs(2).mode("cpu-async").anchor(4).easgd_alpha(0.5).run().join(timeout=60)
        try:
            check_tied(state)
            results["tied_easgd"] = "ok"
        except AssertionError as e:
            results["tied_easgd"] = f"failed: {e!r}"
        write_result(out_dir, rank, results)

        # sync with a parameter the loss never reaches: trains with the option, DDP's error without
        for on in (True, False):
            b = Trainer.builder(model_with_a_spare_layer, make_adam, mse_step).dataset((x, y))
            b = b.batch_size(16).num_epochs(2).mode("cpu-sync").find_unused_parameters(on)
            try:
                h = b.run()
                h.join(timeout=60)
                results[f"unused_{on}"] = [m.avg_loss for m in h.history]
            except DdpError as e:
                results[f"unused_{on}"] = str(e)
        write_result(out_dir, rank, results)

        # micro-batches in sync: DDP reduces the gradients once per batch, after its last part
        # (bf16_wire runs flodl's comm hook, whose all-reduce calls are counted here)
        reduce, calls = torch.distributed.all_reduce, [0]

        def counted(*a: Any, **kw: Any) -> Any:
            calls[0] += 1
            return reduce(*a, **kw)

        torch.distributed.all_reduce = counted
        try:
            for k in (1, 4):
                calls[0] = 0
                h = builder("cpu-sync", 2).micro_batches(k).bf16_wire().run()
                state = h.join(timeout=60)
                results[f"micro{k}"] = {
                    "params": [float(v.double().sum()) for v in state.params.values()],
                    "all_reduces": calls[0],
                }
        finally:
            torch.distributed.all_reduce = reduce
        write_result(out_dir, rank, results)

        # float16 with loss scaling in sync: DDP averages the scaled gradients, so every rank
        # unscales, clips and skips alike and the replicas stay one model
        b = Trainer.builder(make_model, make_adam, fp16_step).dataset((x, y)).batch_size(16)
        h = b.num_epochs(2).mode("cpu-sync").grad_scaler().max_grad_norm(1.0).run()
        state = h.join(timeout=60)
        results["fp16"] = {
            "losses": [m.avg_loss for m in h.history],
            "params": [float(v.double().sum()) for v in state.params.values()],
        }
    except Exception:
        results["error"] = traceback.format_exc()
    write_result(out_dir, rank, results)
