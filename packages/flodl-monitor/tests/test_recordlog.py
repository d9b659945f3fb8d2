"""The JSONL record log: layout on disk, caps, whole lines, reloading."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from flodl_core import ConfigError, DataError
from flodl_monitor import Alert, RecordLog, RecordTree, load_record_log


def _logged_tree(tmp_path: Path, cap: int = 0) -> tuple[RecordTree, RecordLog]:
    tree = RecordTree()
    log = RecordLog(tmp_path / "runs", cap)
    tree.add_listener(log)
    return tree, log


def test_a_record_path_is_its_file_path(tmp_path: Path) -> None:
    tree, log = _logged_tree(tmp_path)
    tree.publish("root/host-a/rank1", {"loss": 0.5, "throughput": 10.0}, step=0, t=1.0)
    tree.publish("root/host-b/rank0", {"loss": float("nan")}, step=0, t=2.0)
    tree.alert(Alert("nan_loss", "root/host-b/rank0", "loss is NaN at epoch 1", 0, 2.0))
    log.close()
    files = sorted(
        p.relative_to(tmp_path / "runs").as_posix() for p in (tmp_path / "runs").rglob("*.jsonl")
    )
    assert files == ["root/host-a/rank1.jsonl", "root/host-b/rank0.jsonl"]
    lines = [
        json.loads(x) for x in (tmp_path / "runs/root/host-b/rank0.jsonl").read_text().splitlines()
    ]
    assert lines[0] == {
        "type": "record",
        "path": "root/host-b/rank0",
        "step": 0,
        "t": 2.0,
        "metrics": {"loss": None},
    }
    assert lines[1]["type"] == "alert" and lines[1]["kind"] == "nan_loss"


def test_cap_rotates_so_a_node_never_exceeds_it(tmp_path: Path) -> None:
    tree, log = _logged_tree(tmp_path, cap=4096)
    for s in range(400):
        tree.publish("root/r0", {"loss": 1.0 / (s + 1)}, step=s)
    log.close()
    cur = tmp_path / "runs/root/r0.jsonl"
    old = tmp_path / "runs/root/r0.jsonl.1"
    assert old.exists() and cur.stat().st_size + old.stat().st_size <= 4096
    steps = [json.loads(x)["step"] for f in (old, cur) for x in f.read_text().splitlines()]
    assert steps == list(range(steps[0], 400))  # contiguous, newest kept


def test_concurrent_appends_give_whole_lines(tmp_path: Path) -> None:
    tree, log = _logged_tree(tmp_path)

    def rank(r: int) -> None:
        for s in range(200):
            tree.publish(f"root/w{r}", {"loss": float(s), "rank": float(r)}, step=s)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    for r in range(4):
        lines = (tmp_path / f"runs/root/w{r}.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == list(range(200))


def test_reload_rebuilds_the_tree(tmp_path: Path) -> None:
    tree, log = _logged_tree(tmp_path, cap=4096)
    for s in range(100):
        for r in range(3):
            tree.publish(f"root/h/r{r}", {"loss": float(r + s)}, step=s)
    log.close()
    again = load_record_log(tmp_path / "runs")
    assert again.paths() == tree.paths()
    kept = again.history("root/h/r2")
    assert kept[-1]["metrics"] == {"loss": 101.0}
    assert again.node("root/h")["latest"]["metrics"]["loss"] == pytest.approx(100.0)


def test_bad_settings_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cap_bytes"):
        RecordLog(tmp_path / "x", cap_bytes=100)
    with pytest.raises(DataError, match="not a directory"):
        load_record_log(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"no \.jsonl"):
        load_record_log(tmp_path / "empty")
    bad = tmp_path / "bad" / "root"
    bad.mkdir(parents=True)
    (bad / "r0.jsonl").write_text('{"type": "record", "step": 0, "t": 1, "metrics": {}}\n{oops\n')
    with pytest.raises(DataError, match=r"r0.jsonl:2: malformed"):
        load_record_log(tmp_path / "bad")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.jsonl").write_text("{}\n")
    with pytest.raises(DataError, match="not a record log file"):
        load_record_log(foreign)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\xff", "utf-8"),  # a binary file named .jsonl
        (b'{"type":"record","step":0,"t":1.0,"metrics":[1,2]}\n', "metrics is"),
        (b'{"type":"alert","kind":1,"message":null,"step":0,"t":1.0}\n', "kind and message"),
    ],
    ids=["binary", "metrics-not-an-object", "alert-fields"],
)
def test_a_foreign_file_is_a_data_error_naming_file_and_line(
    tmp_path: Path, content: bytes, why: str
) -> None:
    (tmp_path / "root.jsonl").write_bytes(content)
    with pytest.raises(DataError, match=rf"root\.jsonl:1: malformed record line \(.*{why}"):
        load_record_log(tmp_path)


def _torn(tmp_path: Path) -> Path:
    """A log of two records whose third line was torn mid-write (a power loss)."""
    tree, log = _logged_tree(tmp_path)
    for step in range(2):
        tree.publish("root", {"loss": 1.0 / (step + 1)}, step=step, t=float(step))
    log.close()
    f = tmp_path / "runs/root.jsonl"
    with open(f, "ab") as fh:
        fh.write(b'{"type":"record","path":"root","step":2,"t":2.0,"metrics":{"lo')
    return f


def test_a_torn_last_line_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = _torn(tmp_path)
    tree = load_record_log(tmp_path / "runs")
    assert [r["step"] for r in tree.history("root")] == [0, 1]
    assert "skipped a torn last line" in caplog.text and str(f) in caplog.text
    f.write_bytes(f.read_bytes().replace(b'"step":1', b'"step":1,'))  # torn in the middle: no
    with pytest.raises(DataError, match=r"root\.jsonl:2: malformed"):
        load_record_log(tmp_path / "runs")


def test_appending_after_a_torn_line_drops_it_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = _torn(tmp_path)
    tree, log = _logged_tree(tmp_path)  # a resumed run logs into the same folder
    tree.publish("root", {"loss": 0.25}, step=2, t=2.0)
    log.close()
    assert "dropped a torn last line" in caplog.text
    assert [json.loads(x)["step"] for x in f.read_text().splitlines()] == [0, 1, 2]


def test_a_short_write_is_taken_back_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, log = _logged_tree(tmp_path)
    tree.publish("root", {"loss": 1.0}, step=0, t=0.0)
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, data[:10]))  # the disk fills
    tree.publish("root", {"loss": 0.5}, step=1, t=1.0)  # dropped, said once
    monkeypatch.setattr(os, "write", real)  # space again
    tree.publish("root", {"loss": 0.25}, step=2, t=2.0)
    log.close()
    assert [r["step"] for r in load_record_log(tmp_path / "runs").history("root")] == [0, 2]
