"""Atomic writes: whole file or nothing, umask modes, no temp file left behind."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import flodl_core as fc
from flodl_core import _atomic


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
@pytest.mark.parametrize("how", ["write", "open", "path"])
def test_new_files_get_the_umask_mode(
    tmp_path: Path, umask: None, mask: int, expected: int, how: str
) -> None:
    os.umask(mask)
    target = tmp_path / "out.bin"
    if how == "write":
        fc.atomic_write(target, b"x")
    elif how == "open":
        with fc.atomic_open(target) as f:
            f.write(b"x")
    else:
        with fc.atomic_path(target) as tmp:
            tmp.write_bytes(b"x")
    assert target.read_bytes() == b"x"
    assert _mode(target) == expected  # not mkstemp's 0600


def test_replacing_keeps_the_old_permissions(tmp_path: Path, umask: None) -> None:
    target = tmp_path / "private.json"
    fc.atomic_write(target, "{}")
    os.chmod(target, 0o600)
    fc.atomic_write(target, "[]")
    assert target.read_text() == "[]" and _mode(target) == 0o600


def test_text_is_utf8_without_newline_translation(tmp_path: Path) -> None:
    out = fc.atomic_write(tmp_path / "t.txt", "é\r\nz\n")
    assert isinstance(out, Path)
    assert out.read_bytes() == "é\r\nz\n".encode()


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace"])
def test_failure_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: str
) -> None:
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")

    def boom(*args: object) -> None:
        raise OSError(f"injected {fail_at} failure")

    if fail_at != "write":
        monkeypatch.setattr(_atomic.os, fail_at, boom)
    with pytest.raises(OSError, match="injected"), fc.atomic_open(target) as f:
        f.write(b"half")
        if fail_at == "write":
            boom()
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.bin"]


def test_failure_inside_atomic_path_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "w.safetensors"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="writer died"), fc.atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("writer died")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["w.safetensors"]


def test_atomic_path_accepts_writers_that_truncate_by_name(tmp_path: Path) -> None:
    with fc.atomic_path(tmp_path / "a.txt") as tmp:
        assert tmp.parent == tmp_path and tmp.exists() and tmp.name != "a.txt"
        with open(tmp, "w", encoding="utf-8") as f:  # opens by name, truncating
            f.write("done")
        assert not (tmp_path / "a.txt").exists()  # nothing visible before the block ends
    assert (tmp_path / "a.txt").read_text() == "done"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_wrong_data_type_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    target = tmp_path / "x"
    target.write_text("keep")
    with pytest.raises(TypeError, match="data must be bytes or str, got int"):
        fc.atomic_write(target, 3)  # type: ignore[arg-type]
    assert target.read_text() == "keep" and os.listdir(tmp_path) == ["x"]


def test_missing_folder_is_named_unless_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c.txt"
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        fc.atomic_write(target, "x")
    assert info.value.filename == str(target)
    assert fc.atomic_write(target, "x", parents=True).read_text() == "x"


def test_data_is_fsynced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(a: str, b: str) -> None:
        events.append("replace")
        real_replace(a, b)

    monkeypatch.setattr(_atomic.os, "fsync", fsync)
    monkeypatch.setattr(_atomic.os, "replace", replace)
    fc.atomic_write(tmp_path / "a", b"1")
    with fc.atomic_path(tmp_path / "b") as tmp:
        tmp.write_bytes(b"2")
    # file fsync, rename, then the folder's fsync, for both entry points
    assert events == ["fsync", "replace", "fsync"] * 2


def test_atomic_path_restores_the_mode_when_the_writer_replaces_the_file(
    tmp_path: Path, umask: None
) -> None:
    def private_writer(name: Path) -> None:
        """Writes its own 0600 temp file and renames it over ``name`` (as safetensors does)."""
        own = name.with_name(name.name + ".own")
        fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(b"weights")
        os.replace(own, name)

    with fc.atomic_path(tmp_path / "w.bin") as tmp:
        private_writer(tmp)
    assert (tmp_path / "w.bin").read_bytes() == b"weights"
    assert _mode(tmp_path / "w.bin") == 0o644


@pytest.mark.parametrize("how", ["write", "open", "path"])
def test_a_folder_or_empty_target_is_refused_before_writing(tmp_path: Path, how: str) -> None:
    entered = []

    def write(target: str | Path) -> None:
        if how == "write":
            fc.atomic_write(target, b"x")
            entered.append(True)
        elif how == "open":
            with fc.atomic_open(target):
                entered.append(True)
        else:
            with fc.atomic_path(target):
                entered.append(True)

    with pytest.raises(IsADirectoryError, match="it is a directory") as info:
        write(tmp_path)
    assert info.value.filename == str(tmp_path)
    with pytest.raises(FileNotFoundError, match="empty path"):
        write("")
    assert not entered and os.listdir(tmp_path) == []


@pytest.mark.parametrize("how", ["open", "path"])
def test_a_full_disk_names_the_file_it_failed_to_write(tmp_path: Path, how: str) -> None:
    target = tmp_path / "big.fdl"
    target.write_bytes(b"old")
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write raises it: no file name
    with pytest.raises(OSError, match=r"No space left on device: '.*big\.fdl'") as info:
        if how == "open":
            with fc.atomic_open(target) as f:
                f.write(b"half")
                raise full
        else:
            with fc.atomic_path(target):
                raise full
    assert info.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["big.fdl"]
