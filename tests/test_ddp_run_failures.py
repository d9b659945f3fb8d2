"""Spawned runs (2 CPU ranks, one thread each) that fail or are attacked, and what the user sees:

- rank 1 SIGKILLed in cpu-sync: the run's error names rank 1 and the signal, not rank 0's gloo
  "Connection closed by peer" that the death causes;
- rank 1 SIGSTOPped in cpu-cadence: the watchdog names rank 1 as stopped, well within the run's
  timeout (rank 0's own wait would end only at the timeout, naming itself);
- a local stranger that finds the run's store port and writes the keys a run uses, without the
  run's secret prefix: nothing changes, every sample is still trained once per epoch;
- a script without ``if __name__ == "__main__":`` that starts a spawned run: one short message
  naming the guard, not a screenful of tracebacks.

After each run, no rank process is left and the run's temporary folder (``flodl-ddp-*``, which
holds the trained weights) is gone by the time ``join()`` returns. Each run takes seconds (a
stopped rank is judged after 10 s), so they run once, here, rather than in flodl-ddp's own tests
(which CI runs twice).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from flodl_ddp import DdpError, Trainer

pytestmark = pytest.mark.multiprocess

FIXTURES = Path(__file__).resolve().parent.parent / "packages" / "flodl-ddp" / "tests"
START_TIMEOUT_S = 60.0  # two processes importing torch on a busy machine


def _fixtures() -> Any:
    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))  # spawned children inherit sys.path and import by name
    return importlib.import_module("reliability_fixtures")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:  # a zombie is not alive
        return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    return True


def _wait(cond: Any, what: str, timeout: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def _run_folders(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("flodl-ddp-*"))


@contextlib.contextmanager
def _started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builder: Any) -> Any:
    """``builder.run()`` with the launcher's temporary folders under ``tmp_path/tmp`` and the
    ranks' first-batch marks under ``tmp_path/marks``; yields ``(handle, tmp, marks)`` and
    kills whatever is left of the ranks on the way out."""
    fx = _fixtures()
    tmp, marks = tmp_path / "tmp", tmp_path / "marks"
    tmp.mkdir()
    marks.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv(fx.MARK_ENV, str(marks))  # the spawned ranks inherit it
    handle = builder.run()
    try:
        assert len(_run_folders(tmp)) == 1  # the run's folder is where we look for it
        yield handle, tmp, marks
    finally:
        for pid in handle.all_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


def _marked_builder(fx: Any, mode: str) -> Any:
    x, y, ids = fx.make_data(4096)
    return (
        Trainer.builder(fx.make_model, fx.make_sgd, fx.marked_step)
        .dataset((x, y, ids))
        .batch_size(8)
        .num_epochs(20)  # 20 ms a batch: minutes, far longer than the test waits
        .devices(["cpu", "cpu"])
        .mode(mode)
    )


def _both_training(marks: Path) -> None:
    _wait(lambda: (marks / "rank0").exists() and (marks / "rank1").exists(), "both ranks to train")


def _nothing_left(handle: Any, tmp: Path) -> None:
    pids = handle.all_pids()
    assert len(pids) == 2
    assert not [p for p in pids if _alive(p)], "rank processes outlived join()"
    assert _run_folders(tmp) == [], "the run's temporary folder outlived join()"


# ---- the right rank is blamed --------------------------------------------------------------------


def test_a_killed_rank_is_named_not_its_peers_connection_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fx = _fixtures()
    with _started(tmp_path, monkeypatch, _marked_builder(fx, "cpu-sync")) as (h, tmp, marks):
        _both_training(marks)
        os.kill(h.rank_pid(1), signal.SIGKILL)
        t = time.monotonic()
        with pytest.raises(DdpError) as info:
            h.join(timeout=30)
        took = time.monotonic() - t
        _nothing_left(h, tmp)
    err = info.value
    assert err.rank == 1, str(err)
    assert "rank 1 was killed by signal 9 (SIGKILL)" in err.message
    assert "Connection closed" not in str(err) and err.remote_traceback is None
    assert took < 10.0, took


def test_a_stopped_rank_is_named_within_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timeout 20 s: the watchdog's stop bound is min(10 s, timeout / 2) = 10 s; rank 0's
    exchange would give up only after the whole 20 s, and name itself. (A shorter timeout
    would also shorten the time a rank may take to start, which a loaded machine can need.)"""
    fx = _fixtures()
    builder = _marked_builder(fx, "cpu-cadence").anchor(4).timeout(20)
    with _started(tmp_path, monkeypatch, builder) as (h, tmp, marks):
        _both_training(marks)
        os.kill(h.rank_pid(1), signal.SIGSTOP)
        t = time.monotonic()
        with pytest.raises(DdpError) as info:
            h.join(timeout=60)
        took = time.monotonic() - t
        _nothing_left(h, tmp)
    err = info.value
    assert err.rank == 1, str(err)
    assert "rank 1 was stopped (SIGSTOP)" in err.message, str(err)
    assert took < 20.0, took


# ---- the store belongs to the run ----------------------------------------------------------------


def _listening_ports(pid: int) -> set[int]:
    """Ports of the TCP sockets process ``pid`` listens on (Linux ``/proc``)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


# The keys a run's ranks use, as they would be named without the run's secret prefix: the
# pool counters of the first epochs, the control exchanges' keys ("left" would fail the run,
# the others would feed it wrong numbers), and the same without the "ctl" namespace.
_COUNTERS = [f"{ns}pool{k}" for ns in ("ctl/", "") for k in range(1, 8)]
_EXCHANGES = [f"{ns}{tag}{k}/{r}" for ns in ("ctl/", "") for tag in ("n", "ep", "start")
              for k in range(1, 30) for r in (0, 1)]  # fmt: skip


def _stranger(port: int, stop: threading.Event, seen: dict[str, int]) -> None:
    """Another local process's view: connect to ``port`` and write the run's key names."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=10))
    while not stop.is_set():
        for key in _COUNTERS:
            seen[key] = int(store.add(key, 1000))
        for key in _EXCHANGES:
            store.set(key, b'{"left": 1, "done": 999, "more": false, "hand": false}')
        seen["rounds"] = seen.get("rounds", 0) + 1
        time.sleep(0.005)


def test_a_stranger_writing_the_runs_key_names_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fx = _fixtures()
    from ddp_trainer_fixtures import id_step  # records each batch's sample ids

    ids_dir = tmp_path / "ids"
    ids_dir.mkdir()
    monkeypatch.setenv("FLODL_TEST_IDS_DIR", str(ids_dir))
    x, y, ids = fx.make_data(512)
    builder = (
        Trainer.builder(fx.make_model, fx.make_sgd, id_step)
        .dataset((x, y, ids))
        .batch_size(16)
        .num_epochs(3)
        .devices(["cpu", "cpu"])
        .mode("cpu-cadence")
        .anchor(4)
    )
    before = _listening_ports(os.getpid())
    stop, seen = threading.Event(), {}
    with _started(tmp_path, monkeypatch, builder) as (h, tmp, _):
        ports = _listening_ports(os.getpid()) - before  # the run's store, found from outside
        assert len(ports) == 1, ports
        attack = threading.Thread(target=_stranger, args=(ports.pop(), stop, seen), daemon=True)
        attack.start()
        try:
            state = h.join(timeout=120)
        finally:
            stop.set()
            attack.join(10)
        _nothing_left(h, tmp)
    assert seen.get("rounds", 0) >= 2 and seen["ctl/pool1"] >= 2000, seen  # it did write
    runs = [int(i) for f in ids_dir.glob("ids-*.txt") for i in f.read_text().split()]
    counts = torch.bincount(torch.tensor(runs), minlength=512)
    assert bool((counts == 3).all()), f"ids run {sorted(set(counts.tolist()))} times"
    assert [m.epoch for m in h.history] == [0, 1, 2]
    assert set(state.params) == {"0.weight", "0.bias", "2.weight", "2.bias"}


# ---- a script without the __main__ guard ---------------------------------------------------------

_UNGUARDED = """\
import sys
sys.path.insert(0, {here!r})
import reliability_fixtures as fx
from flodl_ddp import Trainer

x, y, ids = fx.make_data(64)
print("training starts", flush=True)
state = (
    Trainer.builder(fx.make_model, fx.make_sgd, fx.mse)
    .dataset((x, y))
    .batch_size(8)
    .num_epochs(1)
    .devices(["cpu", "cpu"])
    .mode("cpu-sync")
    .run()
    .join(timeout=60)
)
print("trained", flush=True)
"""


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The unguarded script run once with its temporary folders in a folder of its own."""
    root = tmp_path_factory.mktemp("unguarded")
    script = root / "train.py"
    script.write_text(_UNGUARDED.format(here=str(FIXTURES)))
    tmp = root / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, tmp


def test_a_script_without_the_main_guard_gets_one_short_message(
    unguarded: tuple[Any, Path],
) -> None:
    proc, _ = unguarded
    err = proc.stderr
    assert proc.returncode != 0 and "trained" not in proc.stdout
    assert 'no `if __name__ == "__main__":` guard' in err, err
    assert "put the code that builds and runs the Trainer under that guard" in err, err
    assert "DdpError" in err  # what join() raised in the script itself
    assert "bootstrapping phase" not in err, err  # multiprocessing's own screenful
    assert len(err.strip().splitlines()) <= 20, err


def test_a_script_without_the_main_guard_leaves_nothing_behind(
    unguarded: tuple[Any, Path],
) -> None:
    proc, tmp = unguarded
    assert _run_folders(tmp) == [], "the re-run ranks' temporary folders are left behind"
    assert "leaked semaphore" not in proc.stderr, proc.stderr
    assert proc.stdout.count("ddp: 2 ranks") <= 1, proc.stdout  # the re-runs print it too
