"""The runtime without spawning: validation before any process starts, a world of one (same
API, metrics and result, in the calling process), checkpoints, the cooperative session and the
policy helpers. The multi-process behaviour is in ``test_trainer_multiprocess.py``."""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_ddp import (
    MODES,
    DdpConfig,
    DdpError,
    EpochMetrics,
    NoGuard,
    TrainedState,
    Trainer,
    TrainerConfig,
    record_scalar,
)
from flodl_ddp._gate import Overshoot, Pace, auto_overshoot, waiting
from flodl_ddp._handle import DdpHandle, state_of
from flodl_ddp._options import check_config

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx


def _builder(n: int = 256, epochs: int = 2, step: Any = fx.mse_step) -> Any:
    x, y = fx.make_data(n)
    return (
        Trainer.builder(fx.make_model, fx.make_adam, step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(epochs)
        .devices(["cpu"])
    )


# ---- bad input, refused before anything starts -------------------------------------------------


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda b: b.batch_size(0), "batch_size must be an int >= 1, got 0"),
        (lambda b: b.num_epochs(-1), "num_epochs"),
        (lambda b: b.mode("gpu-turbo"), "unknown mode 'gpu-turbo'"),
        (lambda b: b.policy("eventually"), "unknown policy 'eventually'"),
        (lambda b: b.overhead_target(0.9), "overhead_target"),
        (lambda b: b.easgd_alpha(0.0), "easgd_alpha"),
        (lambda b: b.slowdown({0: 0.5}), "slowdown[0]"),
        (lambda b: b.partition_ratios([]), "partition_ratios"),
        (lambda b: b.guard(object()), "guard must have a report() method"),
        (lambda b: b.devices([]), "devices is empty"),
        (lambda b: b.shared_memory("no"), "shared_memory must be True or False, got 'no'"),
        (lambda b: b.bf16_wire(1), "bf16_wire must be True or False, got 1"),
        (lambda b: b.grad_scaler("yes"), "grad_scaler must be True or False, got 'yes'"),
        (lambda b: b.num_workers(-1), "num_workers must be an int >= 0, got -1"),
        (lambda b: b.micro_batches(0), "micro_batches must be an int >= 1, got 0"),
    ],
)
def test_builder_refuses_bad_values(call: Any, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        call(_builder())
    assert needle in str(info.value)


def test_config_refuses_a_non_bool_switch() -> None:
    cfg = TrainerConfig(dataset=(torch.zeros(8, 2),), batch_size=2, num_epochs=1)
    cfg.timeline = "yes"  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="timeline must be True or False, got 'yes'"):
        check_config(cfg)


def test_more_micro_batches_than_samples_per_batch_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"micro_batches \(32\) exceeds batch_size \(16\)"):
        _builder().micro_batches(32).run()  # refused before any rank starts


def test_unknown_mode_lists_all_six() -> None:
    with pytest.raises(ConfigError) as info:
        _builder().mode("cpu-turbo")
    for name in MODES:
        assert name in str(info.value)


def test_dataset_smaller_than_world_size() -> None:
    x, y = fx.make_data(3)
    b = Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step).dataset((x, y)).batch_size(1)
    with pytest.raises(ConfigError, match="3 samples, fewer than the 4 ranks"):
        b.num_epochs(1).devices(["cpu"] * 4).run()


def test_no_batch_per_rank() -> None:
    with pytest.raises(ConfigError, match="less than batch_size 16"):
        _builder(n=30).devices(["cpu", "cpu"]).run()


def test_non_picklable_factory_is_refused_before_spawning() -> None:
    x, y = fx.make_data(64)
    b = Trainer.builder(lambda: nn.Linear(4, 1), fx.make_adam, fx.mse_step)
    b = b.dataset((x, y)).batch_size(8).num_epochs(1).devices(["cpu", "cpu"])
    with pytest.raises(ConfigError) as info:
        b.run()
    msg = str(info.value)
    assert "model_factory" in msg and "top level of an importable module" in msg


class _Readers(torch.utils.data.Dataset):
    """A map-style dataset (it streams) that records which threads read it."""

    def __init__(self) -> None:
        self.x, self.y = fx.make_data(128)
        self.threads: set[str] = set()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.threads.add(threading.current_thread().name)
        time.sleep(0.001)  # a read that releases the GIL, as a file or an image decoder does
        return self.x[i], self.y[i]


@pytest.mark.parametrize("workers", [0, 3])
def test_num_workers_reads_a_ranks_batches_on_that_many_threads(workers: int) -> None:
    data = _Readers()
    b = Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step).dataset(data).batch_size(8)
    b.num_epochs(1).devices(["cpu"]).num_workers(workers).run().join(timeout=60)
    readers = {t for t in data.threads if t.startswith("flodl-data-worker")}
    assert len(readers) == workers  # 0: the loader's one background thread reads


def test_a_dataset_that_does_not_pickle_is_named_and_nothing_is_left_running() -> None:
    class Local(torch.utils.data.Dataset):  # a class inside a function: spawn cannot send it
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.ones(4), torch.ones(1)

    b = Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step).dataset(Local())
    with pytest.raises(ConfigError) as info:
        b.batch_size(8).num_epochs(1).devices(["cpu", "cpu"]).mode("cpu-cadence").run()
    msg = str(info.value)
    assert "dataset" in msg and "Local" in msg and "top level of an importable module" in msg
    assert not multiprocessing.active_children()


def test_cuda_devices_this_machine_lacks_are_refused_before_spawning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flodl_core import GpuInfo
    from flodl_ddp import _launch

    b = _builder().mode("cpu-cadence")
    monkeypatch.setattr(_launch.torch.version, "cuda", None)
    monkeypatch.setattr(_launch.torch.version, "hip", None, raising=False)
    with pytest.raises(ConfigError, match=r"name cuda:0, but this torch \(.+\) is built without"):
        b.devices(["cuda:0", "cpu"]).run()
    monkeypatch.setattr(_launch.torch.version, "cuda", "12.8")
    one = [GpuInfo(index=0, name="NVIDIA H200", vendor="nvidia")]
    monkeypatch.setattr(_launch, "detect_gpus", lambda: one)
    with pytest.raises(ConfigError, match=r"name cuda:1, but this machine shows 1 GPU \(cuda:0\)"):
        b.devices(["cuda:0", "cuda:1"]).run()


def test_missing_required_fields() -> None:
    b = Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step).batch_size(4).num_epochs(1)
    with pytest.raises(ConfigError, match="dataset is required"):
        b.run()


def test_checks_that_need_the_world_size() -> None:
    with pytest.raises(ConfigError, match="slowdown names rank 3"):
        _builder().slowdown({3: 2.0}).run()
    with pytest.raises(ConfigError, match="easgd_alpha applies to mode 'cpu-async' only"):
        _builder().mode("cpu-cadence").easgd_alpha(0.5).run()
    with pytest.raises(ConfigError, match="partition_ratios has 2 entries for 1 ranks"):
        _builder().partition_ratios([1.0, 2.0]).run()


def test_config_object_form_round_trips() -> None:
    cfg = TrainerConfig(batch_size=8, num_epochs=3, mode="cpu-async", anchor=7)
    b = Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step).config(cfg)
    got = b.build_config()
    assert (got.batch_size, got.num_epochs, got.mode, got.anchor) == (8, 3, "cpu-async", 7)
    assert TrainerConfig().max_anchor == 1000 and TrainerConfig().divergence_threshold == 0.05
    assert DdpConfig(batch_size=4).to_trainer_config().batch_size == 4
    with pytest.raises(ConfigError, match="config must be a TrainerConfig"):
        b.config({"batch_size": 3})  # type: ignore[arg-type]


# ---- a world of one --------------------------------------------------------------------------


def test_world_of_one_runs_in_process_with_the_same_api(tmp_path: Path) -> None:
    from flodl_monitor import Monitor

    seen: list[EpochMetrics] = []
    monitor = Monitor(3, stream=io.StringIO(), resources=False)
    handle = (
        _builder(epochs=3)
        .mode("cpu-async")
        .eval_fn(fx.mean_eval)
        .metrics_fn(seen.append)
        .monitor(monitor)
        .timeline(True)
        .run()
    )
    streamed = []
    while (m := handle.next_metrics(timeout=60)) is not None:
        streamed.append(m)
    state = handle.join(timeout=60)
    assert [m.epoch for m in streamed] == [0, 1, 2] == [m.epoch for m in seen]
    first, last = streamed[0], streamed[-1]
    assert last.avg_loss < first.avg_loss
    assert last.scalars["half_loss"] == pytest.approx(last.avg_loss / 2, rel=1e-6)
    assert last.per_rank[0].batches == 16 and last.per_rank_batch_share == [1.0]
    assert last.per_rank[0].peak_memory_bytes == 0  # a CPU device: torch keeps no count
    assert isinstance(last.eval, float) and math.isfinite(last.lr)
    model = fx.make_model()
    state.load_into(model)
    assert fx.mean_eval(model) == pytest.approx(last.eval, rel=1e-6)
    assert handle.world_size == 1 and handle.devices == ["cpu"]
    tl = handle.timeline()
    assert tl is not None and tl.ranks == [0]
    assert any(p.endswith("/rank0") for p in monitor.records.paths())
    assert len(monitor.history) == 3


def test_world_of_one_trains_with_threads_per_rank_and_leaves_the_caller_alone() -> None:
    before = torch.get_num_threads()
    want = 1 if before > 1 else 2

    handle = _builder(epochs=1, step=fx.threads_step).threads_per_rank(want).run()
    handle.join(timeout=60)
    assert handle.history[-1].scalars["threads"] == want
    assert torch.get_num_threads() == before  # set on the training thread, not the caller's


def test_failure_in_a_world_of_one_names_the_rank() -> None:
    x, y = fx.make_data(256)

    h = (
        Trainer.builder(fx.make_model, fx.make_adam, fx.shape_error_step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(1)
        .devices(["cpu"])
        .run()
    )
    with pytest.raises(DdpError) as info:
        h.join(timeout=60)
    assert info.value.rank == 0 and info.value.host
    assert "shape_error_step" in (info.value.remote_traceback or "")
    assert h.next_metrics() is None


def test_metrics_fn_errors_do_not_stop_training(caplog: pytest.LogCaptureFixture) -> None:
    def bad(m: EpochMetrics) -> None:
        raise RuntimeError("callback broke")

    state = _builder().metrics_fn(bad).run().join(timeout=60)
    assert state.params
    assert "metrics_fn raised" in caplog.text


@pytest.mark.parametrize("mode", ["cpu-sync", "cpu-cadence"])
def test_stop_after_epoch_ends_the_run_with_its_state(mode: str) -> None:
    handle: Any = None

    def stop_at_one(m: EpochMetrics) -> None:
        if m.epoch == 1:  # epoch 2 is in progress when the ranks next look
            handle.stop(after_epoch=True)

    handle = _builder(epochs=6).mode(mode).metrics_fn(stop_at_one).run()
    state = handle.join(timeout=60)
    assert [m.epoch for m in handle.history] == [0, 1, 2]
    model = fx.make_model()
    state.load_into(model)
    assert fx.mean_eval(model) < fx.mean_eval(fx.make_model())  # it trained


def test_stop_after_epoch_asked_before_the_rank_starts_ends_after_the_first() -> None:
    handle = _builder(epochs=4).run()
    handle.stop(after_epoch=True)
    assert handle.join(timeout=60).params and [m.epoch for m in handle.history] == [0]


def test_an_elastic_run_cannot_stop_after_an_epoch() -> None:
    handle = DdpHandle(2, ["cpu", "cpu"])
    handle._attach(object())  # a supervisor and no way to reach the ranks: an elastic run's
    with pytest.raises(DdpError, match="an elastic run cannot stop after an epoch"):
        handle.stop(after_epoch=True)


def test_record_scalar_outside_a_run_is_a_no_op() -> None:
    record_scalar("x", 1.0)
    with pytest.raises(ConfigError):
        record_scalar("", 1.0)


def test_a_nan_scalar_shows_in_its_epochs_mean() -> None:
    calls = [0]

    def step(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        calls[0] += 1  # one NaN in epoch 1's batches: that epoch's mean says so, as a loss would
        record_scalar("grad_norm", math.nan if calls[0] == 20 else 1.0)
        return fx.mse_step(model, batch)

    handle = _builder(epochs=2, step=step).run()
    handle.join(timeout=60)
    first, second = (m.scalars["grad_norm"] for m in handle.history)
    assert first == 1.0 and math.isnan(second)


def test_a_model_with_tied_weights_comes_back_whole() -> None:
    """The trained state holds what ``state_dict()`` holds: a parameter under two names (tied
    embeddings) under both (``out.weight`` was missing), and no non-persistent buffer (it was
    there, unexpected): it loads into a fresh model, which stays tied. (The EASGD consensus,
    one tensor per parameter: the 2-rank torchrun run.)"""
    x, y = fx.make_data(256)
    b = Trainer.builder(fx.Tied, fx.make_adam, fx.mse_step).dataset((x, y)).batch_size(16)
    state = b.num_epochs(2).devices(["cpu"]).run().join(timeout=60)
    fx.check_tied(state)


def test_trained_state_refuses_another_architecture() -> None:
    state = TrainedState({"w": torch.zeros(2)}, {})
    with pytest.raises(DdpError, match="does not match"):
        state.load_into(nn.Linear(2, 2))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile imports jit
def test_a_compiled_models_state_loads_into_the_plain_model_and_back() -> None:
    # torch.compile's wrapper names every tensor _orig_mod.*; a TrainedState uses plain names.
    def body() -> nn.Module:
        return nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))

    inner = body()
    compiled = nn.ModuleDict({"body": torch.compile(inner)})  # type: ignore[dict-item]
    state = state_of(compiled)
    assert sorted(state.params) == ["body.0.bias", "body.0.weight", "body.1.bias", "body.1.weight"]
    assert "body.1.running_mean" in state.buffers
    plain = nn.ModuleDict({"body": body()})
    state.load_into(plain)
    assert torch.equal(plain["body"][0].weight, inner[0].weight)
    again = nn.ModuleDict({"body": torch.compile(body())})  # type: ignore[dict-item]
    state_of(plain).load_into(again)
    assert torch.equal(again.state_dict()["body._orig_mod.0.bias"], inner[0].bias)


@pytest.mark.parametrize(
    ("keep", "match"),
    [
        (("0.weight", "0.bias"), r"missing \['1.bias', '1.weight'\], unexpected \[\], other"),
        (("0.weight", "0.bias", "1.weight", "1.bias"), r"other shapes \['1.weight', '1.bias'\]"),
    ],
)
def test_a_refused_trained_state_leaves_the_model_as_it_was(keep: tuple, match: str) -> None:
    """Checked before anything is copied: torch's own load copied the matching tensors first
    (``0.*`` here), then failed on the rest."""
    trained = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # the target's second layer is 2 -> 3
    state = TrainedState({k: v for k, v in trained.state_dict().items() if k in keep}, {})
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(DdpError, match=match + r".*nothing was loaded"):
        state.load_into(model)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


# ---- checkpoints (world of one; the cpu-sync bit-identity over 2 ranks is multiprocess) ------


@pytest.mark.parametrize("mode", ["cpu-cadence", "cpu-async"])
def test_resume_continues_exactly(tmp_path: Path, mode: str) -> None:
    straight = _builder(epochs=4).mode(mode).no_divergence_guard().run().join(timeout=60)
    _builder(epochs=2).mode(mode).checkpoint_every(2, str(tmp_path)).run().join(timeout=60)
    assert (tmp_path / "latest.json").is_file()
    h = _builder(epochs=4).mode(mode).resume(str(tmp_path)).run()
    resumed = h.join(timeout=60)
    assert [m.epoch for m in h.history] == [2, 3]
    for k in straight.params:
        assert torch.equal(straight.params[k], resumed.params[k]), k


def test_resume_errors_are_clear(tmp_path: Path) -> None:
    # refused before any rank starts: no handle, no process
    with pytest.raises(CheckpointError, match=r"holds no latest\.json"):
        _builder().resume(str(tmp_path)).run()
    with pytest.raises(CheckpointError, match="does not exist"):
        _builder().resume(str(tmp_path / "missing")).run()
    _builder(epochs=1).checkpoint_every(1, str(tmp_path)).run().join(timeout=60)
    h = _builder().devices(["cpu", "cpu"]).resume(str(tmp_path))
    assert h.build_config().resume == str(tmp_path)


def test_checkpoint_keeps_only_the_latest_pair(tmp_path: Path) -> None:
    _builder(epochs=3).checkpoint_every(1, str(tmp_path)).run().join(timeout=60)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest.json", "model-e00002.fdl", "trainer-e00002.state"]
    from flodl_ddp._resume import read_latest

    with pytest.raises(CheckpointError):
        read_latest(tmp_path / "model-e00002.fdl")


# ---- the cooperative tier ---------------------------------------------------------------------


def test_cooperative_session_in_a_world_of_one() -> None:
    x, y = fx.make_data(256)
    model = fx.make_model()
    session = Trainer.setup(
        model, fx.make_adam, DdpConfig(dataset=(x, y), batch_size=16, mode="cpu-cadence")
    )
    assert session.world_size == 1 and session.rank == 0
    for epoch in range(2):
        for batch in session.epoch(epoch):
            loss = nn.functional.mse_loss(session.model(batch[0]), batch[1])
            session.step(loss)
    assert [m.epoch for m in session.metrics] == [0, 1]
    assert session.metrics[1].avg_loss < session.metrics[0].avg_loss
    assert session.state().params.keys() == dict(model.named_parameters()).keys()
    session.close()
    with pytest.raises(DdpError, match="closed"):
        session.epoch(2)


def test_session_needs_a_step_per_batch() -> None:
    x, y = fx.make_data(256)
    session = Trainer.setup(fx.make_model(), fx.make_adam, DdpConfig(dataset=(x, y), batch_size=16))
    it = session.epoch(0)
    next(it)
    with pytest.raises(DdpError, match="without step"):
        next(it)
    with pytest.raises(DdpError, match="called twice"):
        session.step(torch.zeros((), requires_grad=True))


@pytest.mark.parametrize(
    ("loss", "got"), [(torch.ones(2), r"Tensor of shape \(2,\)"), (1.0, "float")]
)
def test_step_names_a_loss_that_is_no_scalar_tensor(loss: Any, got: str) -> None:
    x, y = fx.make_data(64)
    session = Trainer.setup(fx.make_model(), fx.make_adam, DdpConfig(dataset=(x, y), batch_size=16))
    next(session.epoch(0))
    with pytest.raises(
        ConfigError, match=r"what step\(loss\) is given\) must be a scalar tensor, got " + got
    ):
        session.step(loss)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((None, "make_adam", "cfg"), "model must be an nn.Module"),
        (("model", None, "cfg"), "optim_factory must be callable"),
        (("model", "make_adam", {"batch_size": 16}), "config must be a DdpConfig"),
    ],
)
def test_setup_names_an_argument_of_the_wrong_kind(args: tuple[Any, ...], match: str) -> None:
    x, y = fx.make_data(64)
    given = {"model": fx.make_model(), "make_adam": fx.make_adam}
    given["cfg"] = DdpConfig(dataset=(x, y), batch_size=16)
    with pytest.raises(ConfigError, match=match):
        Trainer.setup(*(given.get(a, a) if isinstance(a, str) else a for a in args))


def test_an_optim_factory_that_makes_no_optimizer_is_named() -> None:
    x, y = fx.make_data(64)
    cfg = DdpConfig(dataset=(x, y), batch_size=16)
    with pytest.raises(ConfigError, match=r"optim_factory returned a list, not a torch\.optim"):
        Trainer.setup(fx.make_model(), lambda params: params, cfg)


def test_a_refused_epoch_number_leaves_the_session_usable() -> None:
    x, y = fx.make_data(64)
    session = Trainer.setup(fx.make_model(), fx.make_adam, DdpConfig(dataset=(x, y), batch_size=16))
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="epoch must be an int >= 0"):
            session.epoch(bad)  # type: ignore[arg-type]
    for batch in session.epoch(0):  # it used to fail: "rank 0 left epoch -1 before its end"
        session.step(nn.functional.mse_loss(session.model(batch[0]), batch[1]))
    assert [m.epoch for m in session.metrics] == [0]
    session.close()


# ---- policy helpers -------------------------------------------------------------------------


def test_overshoot_grows_and_resets() -> None:
    assert auto_overshoot(50) == 2 and auto_overshoot(350) == 3 and auto_overshoot(10_000) == 5
    o = Overshoot(None, 350)
    o.after_round(True, anchor=10)
    o.after_round(True, anchor=10)
    assert o.current == 5
    o.after_round(False, anchor=10)
    assert o.current == 3
    for _ in range(20):
        o.after_round(True, anchor=10)
    assert o.current == 10  # never more than a window
    fixed = Overshoot(4, 350)
    fixed.after_round(False, anchor=10)
    assert fixed.current == 4


@pytest.mark.parametrize(
    ("async_", "calibrated", "fixed", "fill", "expect"),
    [
        # calibrated cadence of equal ranks: run the count, then meet
        (False, True, None, (False, False), (False, 0)),
        # calibrated cadence, a faster rank fills the window up to one more count ...
        (False, True, None, (True, True), (True, 12)),
        # ... and the slow cohort says "ready" at its count, so that the filling stops
        (False, True, None, (False, True), (True, 0)),
        (False, False, None, (False, False), (True, 32 * 12)),  # cadence probe: keep going
        (True, True, None, (True, True), (True, 2)),  # async: the automatic overshoot
        (True, False, None, (False, False), (True, 32 * 12)),  # async probe: likewise
        (True, False, 1, (False, False), (True, 1)),  # ... unless the user fixed the overshoot
    ],
)
def test_when_a_rank_waits_for_the_others(
    async_: bool,
    calibrated: bool,
    fixed: int | None,
    fill: tuple[bool, bool],
    expect: tuple[bool, int],
) -> None:
    assert waiting(async_, calibrated, Overshoot(fixed, 50), 12, Pace(*fill)) == expect


def test_no_guard_object_is_accepted() -> None:
    assert _builder().guard(NoGuard()).build_config().guard is not None


def test_summary_line_under_torchrun_counts_the_whole_world() -> None:
    from flodl_ddp._launch import summary_line
    from flodl_ddp._modes import parse_mode

    mode = parse_mode("cpu-cadence")
    assert summary_line(["cpu", "cpu"], mode).startswith("  ddp: 2 ranks (homogeneous) | cpu")
    line = summary_line(["cpu"], mode, world=4)
    assert line.startswith("  ddp: 4 ranks under torchrun | this node: cpu |"), line


def test_summary_line_names_a_simulated_slowdown() -> None:
    from flodl_ddp._launch import summary_line
    from flodl_ddp._modes import parse_mode

    mode = parse_mode("cpu-async")
    line = summary_line(["cpu"] * 3, mode, slowdown={2: 1.5, 0: 1.0, 1: 2.0})
    expect = "(homogeneous, rank 1 slowed 2x, rank 2 slowed 1.5x) | cpu | cpu | cpu | cpu-async"
    assert line == f"  ddp: 3 ranks {expect}", line
    line = summary_line(["cpu"], mode, world=2, slowdown={1: 2.0})
    assert line.startswith("  ddp: 2 ranks under torchrun, rank 1 slowed 2x | this node: cpu |")


def test_a_slowed_rank_pays_what_it_owes_before_it_claims_pool_work() -> None:
    # The others see a rank's clock through its claims: the debt is paid first, as compute.
    import time
    from types import MethodType, SimpleNamespace

    from flodl_ddp._rank import RankEngine
    from flodl_ddp._slowdown import Slowdown

    slow = Slowdown(2.0, torch.device("cpu"), pay_every_s=1.0)
    slow.after_batch(time.perf_counter() - 0.005)  # owes 5 ms, below the piece
    seen: list[float] = []

    def counter(key: str, add: int) -> int:
        seen.append(slow.owed)
        return 4

    engine = SimpleNamespace(slowdown=slow, comm=SimpleNamespace(counter=counter), _compute_s=0.0)
    engine._settle_slowdown = MethodType(RankEngine._settle_slowdown, engine)
    assert RankEngine._claim(engine, "pool1", 1) == 3  # type: ignore[arg-type]
    assert seen == [0.0]  # nothing owed any more when the store saw the claim
    assert engine._compute_s >= 0.005


# ---- the learning rate, the floDl names, reports -----------------------------------------------


@pytest.mark.parametrize(
    ("mode", "world", "scale"),
    [("cpu-sync", 2, 2.0), ("cpu-cadence", 2, 1.0), ("cpu-async", 4, 1.0), ("cpu-sync", 4, 4.0)],
)
def test_the_default_lr_scale_follows_the_policy(mode: str, world: int, scale: float) -> None:
    """Sync steps on the pooled batch of every rank (linear scaling); cadence and async average
    replicas that each step on their own batch, at the lr one device would use."""
    spec = check_config(_builder().mode(mode).build_config())
    assert spec.lr_scale(world) == scale
    assert check_config(_builder().mode(mode).lr_scale_ratio(0.5).build_config()).lr_scale(3) == 2.0


def test_the_start_up_line_prints_the_lr_the_ranks_train_with() -> None:
    from flodl_ddp._launch import start_lr, summary_line
    from flodl_ddp._modes import parse_mode

    assert start_lr(fx.make_adam, 1.0) == "lr 0.01"
    assert start_lr(fx.make_adam, 2.0) == "lr 0.02 (x2: linear scaling)"
    line = summary_line(["cpu", "cpu"], parse_mode("cpu-async"), lr="lr 0.01")
    assert line.endswith("| cpu-async | lr 0.01"), line


def test_one_device_with_too_few_samples_is_worded_for_one_device() -> None:
    with pytest.raises(ConfigError) as info:
        _builder(n=10).run()
    msg = str(info.value)
    assert "10 samples, fewer than batch_size 16" in msg and "ranks" not in msg, msg
    assert "fewer devices" not in msg


def test_elche_config_sets_the_mode_and_the_knobs_it_names() -> None:
    from flodl_ddp import ElCheConfig

    cfg = ElCheConfig.cpu_async().easgd_alpha(0.6).anchor(20).max_batch_diff(40)
    b = _builder().max_anchor(500).elche(cfg).build_config()
    assert (b.mode, b.easgd_alpha, b.anchor, b.max_batch_diff, b.max_anchor) == (
        "cpu-async", 0.6, 20, 40, 500,
    )  # fmt: skip
    assert ElCheConfig.default().options() == {"mode": "nccl-cadence"}
    assert ElCheConfig.cpu_cadence().relax_up().options()["elche_relax_up"] is True
    with pytest.raises(ConfigError, match="easgd_alpha"):
        ElCheConfig.cpu_async().easgd_alpha(2.0)
    with pytest.raises(ConfigError, match="elche needs an ElCheConfig"):
        _builder().elche({"mode": "cpu-async"})


def test_reports_within_epochs_record_log_and_dashboard(tmp_path: Path) -> None:
    handle = (
        _builder(n=512, epochs=2)
        .mode("cpu-cadence")
        .anchor(2)
        .reports_per_epoch(4)
        .record_log(str(tmp_path / "records"))
        .save_dashboard(str(tmp_path / "dash.html"))
        .run()
    )
    handle.join(timeout=60)
    reports = handle.reports
    # 3 between each pair of epochs: reports fall on window ends, and windows are cut to a
    # quarter of the epoch, but the epoch's last window may take in the sliver after it (the
    # last quarter's report is then the epoch's own metrics)
    per_epoch = [sum(r.epoch == e for r in reports) for e in (0, 1)]
    assert all(2 <= k <= 3 for k in per_epoch), per_epoch
    assert [r.epoch for r in reports] == sorted(r.epoch for r in reports)
    assert all(0 < r.fraction < 1 and math.isfinite(r.loss) for r in reports)
    first = [r.samples for r in reports if r.epoch == 0]
    assert first == sorted(first)
    assert [r.step for r in reports] == sorted(r.step for r in reports)
    assert list((tmp_path / "records").rglob("*.jsonl")), "no record log written"
    html = (tmp_path / "dash.html").read_text(encoding="utf-8")
    assert "<html" in html.lower() and "rank0" in html


@pytest.mark.parametrize(("policy", "bad"), [("first", "eval_on"), (-1, "eval_on")])
def test_eval_on_takes_fastest_or_a_rank(policy: object, bad: str) -> None:
    assert _builder().eval_on(0).build_config().eval_on == 0
    assert _builder().build_config().eval_on == "fastest"
    with pytest.raises(ConfigError, match=bad):
        _builder().eval_on(policy)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="eval_on names rank 3 but the world has 1 ranks"):
        _builder().eval_on(3).run()


def test_the_fastest_rank_evaluates() -> None:
    """eval_on('fastest') picks the rank ElChe measured fastest (rank 0 before any reading)."""
    from types import SimpleNamespace

    from flodl_ddp import ElChe
    from flodl_ddp._rank import RankEngine

    elche = ElChe(3)
    spec = SimpleNamespace(eval_on="fastest", sync=False)
    engine = SimpleNamespace(spec=spec, elche=elche, world=3)
    assert RankEngine.evaluator(engine, [0, 1, 2]) == 0  # type: ignore[arg-type]
    elche.report_timing([300.0, 100.0, 200.0], [10, 10, 10], 0.0)  # rank 1 the fastest
    assert RankEngine.evaluator(engine, [0, 1, 2]) == 1  # type: ignore[arg-type]
    assert RankEngine.evaluator(engine, [0, 2]) == 2  # type: ignore[arg-type]
    spec.eval_on = 0
    assert RankEngine.evaluator(engine, [0, 1, 2]) == 0  # type: ignore[arg-type]


def test_a_cooperative_session_without_torchrun_says_it_is_one_rank(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    x, y = fx.make_data(64)
    with caplog.at_level("WARNING", logger="flodl.ddp"):
        session = Trainer.setup(
            fx.make_model(), fx.make_adam, DdpConfig(dataset=(x, y), batch_size=16)
        )
    session.close()
    assert "world of ONE rank" in caplog.text and "torchrun --nproc-per-node" in caplog.text


def test_a_run_with_a_timeline_records_utilization_and_exports_a_chrome_trace(
    tmp_path: Path,
) -> None:
    handle = _builder(n=512, epochs=2, step=fx.sleepy_step).timeline(True).run()  # ~0.3 s
    handle.join(timeout=60)
    tl = handle.timeline()
    assert tl.samples and all(s.rank == 0 and s.cpu_pct is not None for s in tl.samples)
    trace = json.loads(tl.save_chrome_trace(tmp_path / "trace.json").read_text())
    kinds = {e["ph"] for e in trace["traceEvents"]}
    assert {"X", "C"} <= kinds  # spans as complete events, utilization as counters
