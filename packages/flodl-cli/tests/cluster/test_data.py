"""The shared-data audit of ``fdl probe @cluster``: real probes of this machine's Python through
the local transport, each "worker" with its own copy of the data in a temporary folder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from flodl_cli.cluster import ClusterBuilder, probe_cluster
from flodl_cli.cluster._data import LISTING_CAP, describe, diff_listings, size_text

FILES = {"train/a.bin": 1200, "train/b.bin": 800, "labels.txt": 10}


def _data(folder: Path, files: dict[str, int]) -> Path:
    for rel, size in files.items():
        p = folder / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * size)
    return folder


def _cluster(tmp_path: Path, paths: dict[str, Path | str], shared: str | None = None) -> Any:
    b = ClusterBuilder().controller("127.0.0.1").transport("local")
    if shared is not None:
        b.data_path(shared)
    for host, path in paths.items():
        b.worker(host, python=sys.executable, data_path=str(path), socket_ifname="lo")
    return b


def test_same_data_everywhere_is_green(tmp_path: Path) -> None:
    paths = {h: _data(tmp_path / h, FILES) for h in ("a", "b")}
    report = probe_cluster(_cluster(tmp_path, paths))
    for h in report.hosts:
        assert h.checks["data"] == (True, "3 files, 2.0 KiB"), report.table()
    assert not [f for f in report.failures if f[1] == "data"]
    facts = json.loads(report.to_json())["hosts"][0]["facts"]["data"]
    assert facts["files"] == 3 and facts["bytes"] == 2010 and "listing" not in facts


def test_differences_are_named_against_the_majority(tmp_path: Path) -> None:
    other = dict(FILES)
    del other["train/b.bin"]  # a shard never copied
    other["train/a.bin"] = 600  # a half-copied file
    other["extra.tmp"] = 1
    paths = {
        "a": _data(tmp_path / "a", FILES),
        "b": _data(tmp_path / "b", FILES),
        "c": _data(tmp_path / "c", other),
        "d": tmp_path / "nowhere",
    }
    report = probe_cluster(_cluster(tmp_path, paths))
    fails = {(h, c): d for h, c, d in report.failures}
    assert fails[("c", "data")] == (
        "differs from a: 1 missing (train/b.bin); 1 extra (extra.tmp); "
        "1 of another size (train/a.bin: 600 B, 1.2 KiB on a)"
    )
    assert fails[("d", "data")] == f"{tmp_path / 'nowhere'} missing"
    assert ("a", "data") not in fails and ("b", "data") not in fails
    assert f"FAIL c: data: {fails[('c', 'data')]}" in report.table().splitlines()
    diff = json.loads(report.to_json())["hosts"][2]["facts"]["data_diff"]
    assert diff["reference"] == "a" and diff["missing"] == ["train/b.bin"]
    assert diff["size"] == [["train/a.bin", 600, 1200]] and diff["extra"] == ["extra.tmp"]


def test_a_dangling_link_is_unreadable(tmp_path: Path) -> None:
    a = _data(tmp_path / "a", FILES)
    (a / "train" / "c.bin").symlink_to(tmp_path / "gone.bin")  # the mount behind it is absent
    report = probe_cluster(_cluster(tmp_path, {"a": a}))
    assert report.hosts[0].checks["data"] == (False, f"{a}: 1 unreadable (e.g. train/c.bin)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its mode")
def test_unreadable_files_are_reported(tmp_path: Path) -> None:
    a = _data(tmp_path / "a", FILES)
    (a / "train" / "b.bin").chmod(0)
    try:
        report = probe_cluster(_cluster(tmp_path, {"a": a}))
    finally:
        (a / "train" / "b.bin").chmod(0o644)
    assert report.hosts[0].checks["data"] == (False, f"{a}: 1 unreadable (e.g. train/b.bin)")


def test_shared_path_with_home_and_a_single_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    _data(home / "data", {"set.bin": 3})
    monkeypatch.setenv("HOME", str(home))  # the worker's home: ~ expands there
    b = ClusterBuilder().controller("127.0.0.1").transport("local").data_path("~/data")
    b.worker("a", python=sys.executable, socket_ifname="lo")
    b.worker("b", python=sys.executable, data_path="~/data", socket_ifname="lo")
    b.worker(
        "c", python=sys.executable, data_path=str(home / "data" / "set.bin"), socket_ifname="lo"
    )
    report = probe_cluster(b)
    assert [h.checks["data"] for h in report.hosts[:2]] == [(True, "1 files, 3 B")] * 2
    assert report.hosts[0].facts["data"]["path"] == str(home / "data")
    assert report.hosts[2].checks["data"] == (True, "1 files, 3 B")  # a file: its name and size


def test_no_data_path_no_data_check(tmp_path: Path) -> None:
    b = ClusterBuilder().controller("127.0.0.1").transport("local")
    report = probe_cluster(b.worker("a", python=sys.executable))
    assert report.hosts[0].checks["data"] == (True, "-")
    assert "data" not in report.hosts[0].facts


def test_diff_and_wording() -> None:
    d = diff_listings([["x", 1], ["y", 2]], [["x", 1], ["y", 3], ["z", 4]])
    assert d == {"missing": ["z"], "extra": [], "size": [["y", 2, 3]]}
    many = {"missing": [f"f{i}" for i in range(5)], "extra": [], "size": []}
    assert describe(many, "a") == "differs from a: 5 missing (f0, f1, f2, ...)"
    assert [size_text(n) for n in (0, 1023, 1536, 3 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "3.0 GiB",
    ]
    assert LISTING_CAP >= 10_000
