"""The generated-source folder: checked before use, written without following symlinks."""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_graph import FlowBuilder, _sourcedir
from flodl_graph._sourcedir import UnsafeFolder, check_private_dir, source_dir, write_source

posix_only = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners and modes")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A temp dir standing for the system's, and no folder chosen yet in this process."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(_sourcedir, "_cached", _sourcedir._UNSET)
    return tmp_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@posix_only
def test_a_missing_folder_is_made_private(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    assert check_private_dir(str(folder)) == str(folder)
    assert folder.is_dir() and _mode(folder) & 0o077 == 0
    assert check_private_dir(str(folder)) == str(folder)  # and accepted as it is


@posix_only
@pytest.mark.parametrize(
    ("mode", "match"),
    [(0o777, r"can be written by everyone \(mode 777\)"), (0o770, r"by its group \(mode 770\)")],
)
def test_a_writable_folder_is_refused(tmp_path: Path, mode: int, match: str) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(UnsafeFolder, match=match):
        check_private_dir(str(folder))
    folder.chmod(0o755)  # readable by others is fine: only writes can plant anything
    assert check_private_dir(str(folder)) == str(folder)


@posix_only
def test_a_folder_of_another_user_a_symlink_or_a_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir(mode=0o700)
    other = os.getuid() + 1
    with pytest.raises(
        UnsafeFolder, match=rf"owned by uid {os.getuid()}, not by you \(uid {other}\)"
    ):
        check_private_dir(str(folder), uid=other)
    if os.getuid() == 0:  # root can hand it to another user for real
        os.chown(folder, 65534, -1)
        with pytest.raises(UnsafeFolder, match="owned by uid 65534, not by you"):
            check_private_dir(str(folder))
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(UnsafeFolder, match="is a symlink"):
        check_private_dir(str(link))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafeFolder, match="exists but is not a folder"):
        check_private_dir(str(tmp_path / "file"))


def test_write_replaces_a_planted_symlink_instead_of_following_it(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (folder / "forward_g_1.py").symlink_to(victim)
    path = write_source(str(folder), "forward_g_1.py", "x = 1\n")
    assert path == str(folder / "forward_g_1.py")
    assert victim.read_text() == "precious"
    assert not os.path.islink(path) and Path(path).read_text() == "x = 1\n"
    assert [p.name for p in folder.iterdir()] == ["forward_g_1.py"]  # no temp file left


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_planted_fifo_neither_blocks_nor_is_written(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "forward_g_2.py")
    path = write_source(str(tmp_path), "forward_g_2.py", "y = 2\n")
    assert path is not None and stat.S_ISREG(os.lstat(path).st_mode)


def test_an_identical_file_is_kept(tmp_path: Path) -> None:
    first = write_source(str(tmp_path), "f.py", "z = 3\n")
    assert first is not None
    inode = os.stat(first).st_ino
    assert write_source(str(tmp_path), "f.py", "z = 3\n") == first
    assert os.stat(first).st_ino == inode
    assert write_source(str(tmp_path / "missing"), "f.py", "z = 3\n") is None


@posix_only
def test_an_unsafe_shared_folder_gives_a_private_one_and_says_why(
    fresh: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = fresh / f"flodl-graph-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="flodl.graph"):
        folder = source_dir()
    assert folder is not None and Path(folder) != shared and Path(folder).parent == fresh
    assert _mode(Path(folder)) & 0o077 == 0
    text = caplog.text
    assert f"not using {shared}" in text and "can be written by everyone" in text
    assert "chmod 700" in text
    assert source_dir() == folder  # checked once per process
    # a graph built now writes its forward there, and nothing into the refused folder
    torch.manual_seed(0)
    g = FlowBuilder(nn.Linear(2, 3)).through(nn.ReLU()).build()
    assert Path(g._forward_fn.__code__.co_filename).parent == Path(folder)
    assert list(shared.iterdir()) == []


@posix_only
def test_the_shared_folder_is_used_when_it_is_private(fresh: Path) -> None:
    folder = source_dir()
    assert folder == str(fresh / f"flodl-graph-{os.getuid()}")
    assert _mode(Path(folder)) == 0o700
