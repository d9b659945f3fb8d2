"""Elastic training without starting ranks: options, the optional dependency, the exposure rules,
the watchdog and the no-pickle heal transport."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import math
import os
import pickle
import secrets
import socket
import sys
import tempfile
import threading
import time
import types
import urllib.error
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint import read_state_file
from flodl_ddp import Trainer
from flodl_ddp._elastic import (
    ElasticOptions,
    check_elastic,
    interface_names,
    is_loopback,
    require_torchft,
    resolve_exposure,
)
from flodl_ddp._elastic_launch import ElasticPolicy
from flodl_ddp._elastic_transport import (
    NONCE_HEADER,
    SIGNATURE_HEADER,
    StateTransport,
    encode_state,
    request_signature,
    size_bound,
)
from flodl_ddp._errors import DdpError, PeerError
from flodl_ddp._ft import Outlived, TorchftQuorum, WindowVoid
from flodl_ddp._messages import Failed
from flodl_ddp._supervisor import Watch
from flodl_ddp._watchdog import STARTING, Watchdog
from flodl_ddp._worker import is_echo

try:
    import torchft  # noqa: F401

    HAVE_TORCHFT = True
except ImportError:
    HAVE_TORCHFT = False

needs_torchft = pytest.mark.skipif(not HAVE_TORCHFT, reason="needs pip install flodl-ddp[ft]")


def _model() -> nn.Module:
    return nn.Linear(2, 1)


def _sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1)


def _step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return model(batch[0]).pow(2).mean()


def _builder() -> object:
    data = (torch.randn(64, 2), torch.randn(64, 1))
    return (
        Trainer.builder(_model, _sgd, _step)
        .dataset(data)
        .batch_size(4)
        .num_epochs(1)
        .devices(["cpu", "cpu"])
        .mode("cpu-cadence")
    )


# ---- the optional dependency ---------------------------------------------------------------------


def test_elastic_without_torchft_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchft", None)  # import torchft -> ImportError
    with pytest.raises(ConfigError, match=r"pip install flodl-ddp\[ft\]"):
        _builder().elastic()  # type: ignore[attr-defined]


def test_elastic_refuses_another_torchft_version(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("torchft")
    fake.__version__ = "0.9.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchft", fake)
    with pytest.raises(ConfigError, match=r"torchft==0\.2\.0, found 0\.9\.0"):
        require_torchft()


# ---- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"min_ranks": 0}, "min_ranks must be an int >= 1"),
        ({"min_ranks": 3}, "min_ranks=3 is more than the 2 ranks"),
        ({"heartbeat_timeout": 0.0}, "heartbeat_timeout must be a number of seconds"),
        ({"hang_timeout": math.nan}, "hang_timeout must be a number of seconds"),
        ({"max_restarts": -1}, "max_restarts must be an int >= 0"),
        ({"trusted_interface": ""}, "elastic trusted_interface must name an interface, got ''"),
    ],
)
def test_check_elastic_names_the_bad_option(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        check_elastic(ElasticOptions(**kw), world_size=2)


@needs_torchft
def test_elastic_needs_cpu_cadence() -> None:
    b = _builder().mode("cpu-async").elastic()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"use \.mode\('cpu-cadence'\)"):
        b.run()


@needs_torchft
@pytest.mark.parametrize(
    ("setter", "name"),
    [
        (lambda b: b.timeline(True), "timeline"),
        (lambda b: b.easgd_alpha(0.5), "easgd_alpha"),
        (lambda b: b.checkpoint_every(1, "ck"), "checkpoint_every"),
        (lambda b: b.bf16_wire(True), "bf16_wire"),
    ],
)
def test_elastic_refuses_options_it_does_not_implement(setter, name: str) -> None:
    b = setter(_builder().elastic())  # type: ignore[attr-defined]
    if name == "easgd_alpha":
        b = b.mode("cpu-cadence")
    with pytest.raises(ConfigError, match=name):
        b.run()


@needs_torchft
def test_elastic_refuses_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
    }.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ConfigError, match="cannot run under torchrun"):
        _builder().elastic().run()  # type: ignore[attr-defined]


@needs_torchft
def test_min_ranks_above_the_world_is_refused_at_run() -> None:
    with pytest.raises(ConfigError, match="min_ranks=3 is more than the 2 ranks"):
        _builder().elastic(min_ranks=3).run()  # type: ignore[attr-defined]


# ---- exposure ------------------------------------------------------------------------------------


def test_loopback_by_default() -> None:
    exp = resolve_exposure(ElasticOptions(), env={})
    assert (exp.host, exp.gloo_ifname, exp.trusted) == ("127.0.0.1", "lo", False)


@pytest.mark.parametrize(
    ("opts", "env", "reason"),
    [
        (ElasticOptions(host="10.0.0.5"), {}, "host='10.0.0.5'"),
        (ElasticOptions(host="0.0.0.0"), {}, "host='0.0.0.0'"),
        (ElasticOptions(), {"GLOO_SOCKET_IFNAME": "eth0"}, "GLOO_SOCKET_IFNAME='eth0'"),
        (ElasticOptions(), {"MASTER_ADDR": "192.168.1.7"}, "MASTER_ADDR='192.168.1.7'"),
    ],
)
def test_non_loopback_setup_is_refused_without_a_trusted_interface(opts, env, reason) -> None:
    with pytest.raises(ConfigError, match="refuses a non-loopback setup") as e:
        resolve_exposure(opts, env=env)
    assert reason in str(e.value)
    assert "trusted_interface='eth1'" in str(e.value)


@needs_torchft
def test_builder_refuses_an_exposed_host_before_starting_anything() -> None:
    b = _builder().elastic(host="10.0.0.5")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="refuses a non-loopback setup"):
        b.run()


def test_loopback_env_is_fine() -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    assert resolve_exposure(ElasticOptions(), env=env).host == "127.0.0.1"


def test_unknown_trusted_interface_lists_the_real_ones() -> None:
    with pytest.raises(ConfigError, match="does not exist on this machine") as e:
        resolve_exposure(ElasticOptions(trusted_interface="nosuch0"), env={})
    for name in interface_names():
        assert name in str(e.value)


@pytest.mark.skipif("lo" not in interface_names(), reason="no loopback interface named lo")
def test_trusted_interface_binds_its_address() -> None:
    exp = resolve_exposure(ElasticOptions(trusted_interface="lo"), env={"MASTER_ADDR": "10.1.1.1"})
    assert (exp.host, exp.gloo_ifname, exp.trusted) == ("127.0.0.1", "lo", False)
    with pytest.raises(ConfigError, match="is not the address of trusted_interface"):
        resolve_exposure(ElasticOptions(trusted_interface="lo", host="10.9.9.9"), env={})


def test_is_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.8.0.1") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("vm")


# ---- the watchdog --------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_watchdog_kills_a_rank_stalled_while_computing_only() -> None:
    clock = _Clock()
    progress, phase = [0, 0, 0], [1, 2, 1]  # ranks 0 and 2 computing, rank 1 waiting
    killed: list[tuple[int, float]] = []
    dog = Watchdog(progress, phase, 2.0, 2.0, 60.0, lambda r, w, s: killed.append((r, s)),
                   clock=clock)  # fmt: skip
    alive = {0, 1, 2}
    running = lambda r: False  # noqa: E731 - nobody is stopped
    dog.check(lambda r: r in alive, running)
    for _ in range(5):  # rank 0 keeps finishing batches; ranks 1 and 2 do not
        clock.t += 0.5
        progress[0] += 1
        dog.check(lambda r: r in alive, running)
    assert killed == [(2, 2.5)] or killed == [(2, 2.0)]
    assert [v[0] for v in dog.verdicts] == [2]
    clock.t += 10.0  # rank 1 waits for its peers for a while: not a hang
    progress[0] += 1
    alive.discard(2)
    assert dog.check(lambda r: r in alive, running) == []
    assert [r for r, _ in killed] == [2]


def test_watchdog_judges_each_stall_once_and_forgets_restarted_ranks() -> None:
    clock = _Clock()
    progress, phase = [0], [1]
    killed: list[int] = []
    dog = Watchdog(progress, phase, 1.0, 1.0, 60.0, lambda r, w, s: killed.append(r), clock=clock)
    running = lambda r: False  # noqa: E731
    dog.check(lambda r: True, running)
    clock.t = 1.0
    assert dog.check(lambda r: True, running) == [0]
    clock.t = 1.5
    assert dog.check(lambda r: True, running) == []  # the kill is under way
    dog.reset(0)  # before the new process runs: the dead one's "computing" must not count
    assert phase[0] == STARTING
    clock.t = 2.0
    assert dog.check(lambda r: True, running) == []
    clock.t = 30.0  # the new process is still importing torch: starting, within wait_s
    assert dog.check(lambda r: True, running) == []
    assert killed == [0]


def test_watchdog_finds_a_stopped_rank_in_any_phase_and_a_wait_that_never_ends() -> None:
    """A rank stopped while it waits for its peers (not computing) is dead after stop_s; a
    rank whose phase and progress stay unchanged past wait_s in any phase is dead too."""
    clock = _Clock()
    progress, phase = [5, 5], [2, 2]  # both waiting for their peers
    verdicts: list[tuple[int, str]] = []
    dog = Watchdog(progress, phase, 3.0, 3.0, 20.0, lambda r, w, s: verdicts.append((r, w)),
                   clock=clock)  # fmt: skip
    stopped = {1}
    dog.check(lambda r: True, lambda r: r in stopped)
    clock.t = 2.9
    assert dog.check(lambda r: True, lambda r: r in stopped) == []
    clock.t = 3.0
    assert dog.check(lambda r: True, lambda r: r in stopped) == [1]
    assert "stopped (SIGSTOP)" in verdicts[0][1]
    stopped.clear()
    clock.t = 19.9
    assert dog.check(lambda r: r == 0, lambda r: False) == []
    clock.t = 20.0  # rank 0 has waited, unchanged, for wait_s
    assert dog.check(lambda r: r == 0, lambda r: False) == [0]
    assert "no progress for 20.0 s" in verdicts[1][1]


class _FakeManager:
    def __init__(self, step: int, commits: bool = True) -> None:
        self.step, self.quorums, self.commits, self.aborts = step, 0, commits, 0
        self._pg = types.SimpleNamespace(abort=lambda: setattr(self, "aborts", self.aborts + 1))
        self.error: Exception | None = None  # what the last quorum (its heal) failed with

    def errored(self) -> Exception | None:
        return self.error

    def should_commit(self) -> bool:
        return self.commits

    def start_quorum(self) -> None:
        self.quorums += 1

    def current_step(self) -> int:
        return self.step


class _FakeComm:
    rank = 2

    def __init__(self, members: list[int], manager: _FakeManager | None = None) -> None:
        self.members, self.manager = members, manager

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        if self.manager is not None and self.manager.error is not None:  # as FtComm does
            raise WindowVoid("a collective of this window failed", rank=self.rank)
        return [payload if r in self.members else b"" for r in range(3)]


def test_a_restarted_rank_alone_with_nobody_to_heal_from_leaves() -> None:
    """The others finished (or died) while it started: alone at step 0, it would train the
    initial weights from epoch 0, a second run whose result could overwrite the first's."""
    with pytest.raises(Outlived, match="nothing to heal from"):
        TorchftQuorum(_FakeManager(0), _FakeComm([2]), restarted=True).begin()
    healed = TorchftQuorum(_FakeManager(40), _FakeComm([2]), restarted=True)  # step 40: healed
    assert healed.begin() == (2,)
    joined = TorchftQuorum(_FakeManager(0), _FakeComm([0, 2]), restarted=True)  # all restarted
    assert joined.begin() == (0, 2)
    joined.comm.members = [2]  # later windows alone are a normal shrink, not a late start
    assert joined.begin() == (2,) and joined.manager.quorums == 2
    assert TorchftQuorum(_FakeManager(0), _FakeComm([2])).begin() == (2,)  # first generation


def test_a_restarted_rank_whose_heals_keep_failing_leaves() -> None:
    """One failed heal voids a window (the next quorum heals it again); three in a row mean it
    cannot join, and the others must not stop for it."""
    manager = _FakeManager(0)
    quorum = TorchftQuorum(manager, _FakeComm([0, 1, 2], manager), restarted=True)
    manager.error = RuntimeError("heal state refused\ntraceback ...")
    for _ in range(2):
        with pytest.raises(WindowVoid):
            quorum.begin()
    with pytest.raises(Outlived, match=r"heals keep failing: heal state refused$"):
        quorum.begin()
    manager.error, quorum.tries = None, 3  # a heal that works after two failures: it stays
    for err in (RuntimeError("lost link"), RuntimeError("lost link"), None):
        manager.error = err
        with contextlib.suppress(WindowVoid):
            quorum.begin()
    assert quorum.tries == 0 and quorum.begin() == (0, 1, 2)


def test_a_rank_that_votes_no_drops_its_process_group() -> None:
    """A peer may still wait in the window's collectives (this rank skipped them after an
    error): dropping the group makes them fail now instead of at the run's timeout."""
    manager = _FakeManager(5, commits=False)
    assert TorchftQuorum(manager, _FakeComm([0, 2])).commit() is False
    assert manager.aborts == 1
    manager.commits = True
    assert TorchftQuorum(manager, _FakeComm([0, 2])).commit() is True
    assert manager.aborts == 1


def _refuse(what: str) -> Any:
    def call() -> None:
        raise TimeoutError(f"{what} timed out after 300 s")

    return call


def test_torchfts_own_failures_are_a_peers_fault_not_this_ranks() -> None:
    """A quorum or commit vote that times out (the lighthouse or the peers did not answer) is
    the echo of a fault elsewhere: the rank dies of it, the run does not fail for it."""
    manager = _FakeManager(5)
    manager.start_quorum = _refuse("quorum")
    with pytest.raises(PeerError, match="torchft's quorum failed: TimeoutError: quorum timed"):
        TorchftQuorum(manager, _FakeComm([0, 2])).begin()
    manager.should_commit = _refuse("should_commit")
    with pytest.raises(PeerError, match="torchft's commit vote failed") as info:
        TorchftQuorum(manager, _FakeComm([0, 2])).commit()
    assert is_echo(info.value) and info.value.rank == 2


def _policy_outcome(*failed: Failed, exits: tuple[int | None, ...] = (None, None)) -> Any:
    """What the elastic policy decides, with these failures heard and the ranks' exit codes
    (``None``: alive), under ``min_ranks=1``."""
    deaths = {r: code for r, code in enumerate(exits) if code}
    sup = types.SimpleNamespace(watch=Watch(errors=list(failed), deaths=deaths), world=len(exits))
    sup.procs = [types.SimpleNamespace(exitcode=code) for code in exits]
    return ElasticPolicy(ElasticOptions(min_ranks=1), None, [1] * len(exits)).outcome(sup)


def test_an_echo_is_a_death_to_survive_and_a_ranks_own_error_fails_the_run() -> None:
    echo = Failed(1, 0, "h", "PeerError: torchft's quorum failed", "tb", echo=True)
    assert _policy_outcome(echo) is None  # the rank's death (exit code 1) is handled as one
    bug = Failed(0, 0, "h", "ValueError: bad shape", "tb")
    err = _policy_outcome(echo, bug)
    assert isinstance(err, DdpError) and err.rank == 0 and "bad shape" in str(err)
    # every rank died of echoes: the run fails, naming the first one's cause, not only a count
    msg = str(_policy_outcome(echo, exits=(1, 1)))
    assert "(ranks [0, 1] died; first: rank 1 failed: PeerError: torchft's quorum" in msg


def test_process_stopped_reads_the_kernel(tmp_path: Path) -> None:
    import signal
    import subprocess

    from flodl_ddp._watchdog import process_stopped

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not process_stopped(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not process_stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_stopped(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)
    assert not process_stopped(None)


# ---- the heal transport --------------------------------------------------------------------------


def _state() -> dict:
    return {
        "user": {
            "default": {
                "model": {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor([3])},
                "optimizer": {
                    "state": {0: {"step": torch.tensor(4.0), "exp_avg": torch.ones(2)}},
                    "param_groups": [{"lr": 0.01, "betas": (0.9, 0.999), "params": [0]}],
                },
                "scal": [["id1", 3.0, 2.0]],
                "best": math.inf,
            }
        },
        "torchft": {"step": 7, "batches_committed": 21},
    }


def decode_state(blob: bytes) -> Any:
    """What a receiver makes of ``blob`` (the transport streams it to a file, then reads it)."""
    with tempfile.TemporaryDirectory(prefix="flodl-heal-") as d:
        (path := Path(d) / "state").write_bytes(blob)
        return read_state_file(path)[1]


def test_state_blob_round_trips_without_pickle() -> None:
    back = decode_state(encode_state(_state()))
    d = back["user"]["default"]
    assert torch.equal(d["model"]["w"], torch.arange(6.0).reshape(2, 3))
    assert d["model"]["n"].dtype == torch.int64
    assert 0 in d["optimizer"]["state"]  # integer keys stay integers
    assert d["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert d["best"] == math.inf and back["torchft"] == {"step": 7, "batches_committed": 21}


def test_a_pickle_is_refused_not_run() -> None:
    class Boom:
        def __reduce__(self):  # would run on unpickling
            return (print, ("executed",))

    with pytest.raises(CheckpointError):
        decode_state(pickle.dumps({"x": Boom()}))


def test_heal_transport_serves_the_snapshot_to_token_holders_only() -> None:
    t = timedelta(seconds=5)
    sender = StateTransport("127.0.0.1", "secret-token", t)
    receiver = StateTransport("127.0.0.1", "secret-token", t)
    intruder = StateTransport("127.0.0.1", "wrong-token", timedelta(seconds=1))
    try:
        assert sender._server.server_address[0] == "127.0.0.1"
        state = _state()
        sender.send_checkpoint([1], step=7, state_dict=state, timeout=t)
        state["user"]["default"]["model"]["w"].zero_()  # training goes on after the snapshot
        sender.disallow_checkpoint()
        got = receiver.recv_checkpoint(0, sender.metadata(), step=7, timeout=t)
        assert torch.equal(got["user"]["default"]["model"]["w"], torch.arange(6.0).reshape(2, 3))
        with pytest.raises(urllib.error.HTTPError, match="403"):
            intruder.recv_checkpoint(0, sender.metadata(), step=7, timeout=t)
        short = StateTransport("127.0.0.1", "secret-token", timedelta(seconds=0.2))
        try:
            with pytest.raises(urllib.error.HTTPError, match="404"):
                short.recv_checkpoint(0, short.metadata(), step=8, timeout=t)
        finally:
            short.shutdown()
    finally:
        for tr in (sender, receiver, intruder):
            tr.shutdown()


class _Fake:
    """An HTTP server on loopback that records each request's headers and answers with
    ``reply(handler)``."""

    def __init__(self, reply: Any) -> None:
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.headers.append(dict(self.headers.items()))
                reply(self)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_heal_requests_carry_a_signature_not_the_token() -> None:
    token, t = "secret-token-" + "x" * 20, timedelta(seconds=5)
    fake = _Fake(lambda h: h.send_error(404))
    receiver = StateTransport("127.0.0.1", token, t)
    try:
        for _ in range(2):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                receiver.recv_checkpoint(0, fake.url, step=7, timeout=t)
    finally:
        receiver.shutdown()
        fake.close()
    nonces = []
    for headers in fake.headers:
        assert not any(token in v for v in headers.values()), headers
        nonce = headers[NONCE_HEADER]
        want = hmac.new(token.encode(), f"state/7/{nonce}".encode(), hashlib.sha256).hexdigest()
        assert headers[SIGNATURE_HEADER] == want
        nonces.append(nonce)
    assert len(nonces) == 2 and nonces[0] != nonces[1] and len(nonces[0]) >= 32


def _get(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_a_signature_is_good_for_its_step_and_once() -> None:
    t = timedelta(seconds=5)
    sender = StateTransport("127.0.0.1", "secret-token", timedelta(seconds=0.2))
    try:
        sender.send_checkpoint([1], step=7, state_dict=_state(), timeout=t)
        base = sender.metadata()
        nonce = secrets.token_hex(16)
        signed = {
            NONCE_HEADER: nonce,
            SIGNATURE_HEADER: request_signature("secret-token", 7, nonce),
        }
        assert _get(f"{base}/state/8", signed) == 403  # step 7's signature, for step 8
        assert _get(f"{base}/state/7", signed) == 200
        assert _get(f"{base}/state/7", signed) == 403  # the same request again: a replay
        assert _get(f"{base}/state/7", {"X-Flodl-Run-Token": "secret-token"}) == 403
        assert _get(f"{base}/state/7", {}) == 403
        other = secrets.token_hex(16)
        forged = {NONCE_HEADER: other, SIGNATURE_HEADER: request_signature("guess", 7, other)}
        assert _get(f"{base}/state/7", forged) == 403
        fresh = secrets.token_hex(16)
        again = {NONCE_HEADER: fresh, SIGNATURE_HEADER: request_signature("secret-token", 7, fresh)}
        assert _get(f"{base}/state/7", again) == 200
    finally:
        sender.shutdown()


def _declares_a_huge_body(h: BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.send_header("Content-Length", str(1 << 40))
    h.end_headers()
    h.wfile.write(b"FDLS" * 1024)  # and never the rest


def _streams_without_end(h: BaseHTTPRequestHandler) -> None:
    h.send_response(200)
    h.end_headers()  # no length: the body ends when the connection does
    try:
        for _ in range(1 << 20):  # 64 GiB if it were all read
            h.wfile.write(b"\0" * (1 << 16))
    except OSError:
        pass  # the receiver hung up


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (_declares_a_huge_body, "refused before reading it"),
        (_streams_without_end, "without a declared length"),
    ],
)
def test_a_state_past_the_receivers_bound_is_refused(reply: Any, why: str) -> None:
    t = timedelta(seconds=10)
    fake = _Fake(reply)
    receiver = StateTransport("127.0.0.1", "tok", t, max_bytes=1 << 20)
    start = time.monotonic()
    try:
        with pytest.raises(CheckpointError, match="limit of 1048576 bytes") as info:
            receiver.recv_checkpoint(0, fake.url, step=3, timeout=t)
    finally:
        receiver.shutdown()
        fake.close()
    assert why in str(info.value) and fake.url in str(info.value)
    assert time.monotonic() - start < 5.0


def test_a_bound_can_come_from_the_receivers_own_state() -> None:
    t = timedelta(seconds=5)
    state = _state()
    sender = StateTransport("127.0.0.1", "tok", t)
    tight = StateTransport("127.0.0.1", "tok", t, max_bytes=lambda: 100)
    fits = StateTransport("127.0.0.1", "tok", t, max_bytes=lambda: size_bound(state))
    try:
        sender.send_checkpoint([1], step=1, state_dict=state, timeout=t)
        with pytest.raises(CheckpointError, match="limit of 100 bytes"):
            tight.recv_checkpoint(0, sender.metadata(), step=1, timeout=t)
        got = fits.recv_checkpoint(0, sender.metadata(), step=1, timeout=t)
        assert got["torchft"] == {"step": 7, "batches_committed": 21}
    finally:
        for tr in (sender, tight, fits):
            tr.shutdown()
    # 8 x the tensors' bytes (w 6 x 4, n 1 x 8, step 1 x 4, exp_avg 2 x 4 = 44) plus the slack
    assert size_bound(state) == 8 * 44 + (64 << 20)
    assert size_bound(state, factor=2, slack=0) == 88


def test_heal_transport_is_not_reachable_on_other_addresses() -> None:
    tr = StateTransport("127.0.0.1", "tok", timedelta(seconds=1))
    try:
        others = {
            info[4][0]
            for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
            if not is_loopback(info[4][0])
        }
        for addr in others:
            with pytest.raises(OSError), socket.create_connection((addr, tr.port), timeout=1):
                pass
    finally:
        tr.shutdown()
