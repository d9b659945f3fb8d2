from __future__ import annotations

import gzip
import hashlib
import io
import re
import struct
import tarfile
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from flodl_core import ConfigError, FetchError
from flodl_core.data.datasets import (
    REGISTRY,
    Cifar10,
    Mnist,
    RemoteFile,
    Shakespeare,
    fetch,
    sha256_file,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


FILES = {"a.bin": b"alpha" * 100, "b.txt": b"bravo\n"}
TABLE = {
    "tiny": tuple(
        RemoteFile(name, sha(data), (f"https://mirror-1/{name}", f"https://mirror-2/{name}"))
        for name, data in FILES.items()
    )
}


class Opener:
    """Serves URLs from a dict; records every request; raises URLError for unknown ones."""

    def __init__(self, served: dict[str, bytes] | None = None) -> None:
        self.served = served or {}
        self.requests: list[str] = []

    def __call__(self, url: str, timeout: float) -> Any:
        self.requests.append(url)
        if url not in self.served:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        return io.BytesIO(self.served[url])


def refuse(url: str, timeout: float) -> Any:
    raise AssertionError(f"no network expected, asked for {url}")


def test_cached_files_are_used_without_network(tmp_path: Path) -> None:
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    paths = fetch("tiny", tmp_path, registry=TABLE, opener=refuse)
    assert paths == {name: tmp_path / name for name in FILES}


def test_cached_file_with_wrong_digest_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"something else")
    (tmp_path / "b.txt").write_bytes(FILES["b.txt"])
    message = f"cached file {tmp_path / 'a.bin'} has sha256 {sha(b'something else')}, expected"
    with pytest.raises(FetchError, match=re.escape(message)):
        fetch("tiny", tmp_path, registry=TABLE, opener=refuse)
    assert (tmp_path / "a.bin").read_bytes() == b"something else"  # never overwritten


def test_offline_names_the_files_to_place(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(FILES["b.txt"])
    opener = Opener()
    with pytest.raises(FetchError) as info:
        fetch("tiny", tmp_path, registry=TABLE, opener=opener)
    text = str(info.value)
    assert "could not download 1 file(s) (offline?)" in text
    assert f"place these files in {tmp_path}:" in text
    assert f"a.bin  (sha256 {sha(FILES['a.bin'])}; from https://mirror-1/a.bin)" in text
    assert "b.txt" not in text.split("attempts:")[0]  # the cached one is not asked for
    assert "Temporary failure in name resolution" in text
    assert opener.requests == ["https://mirror-1/a.bin", "https://mirror-2/a.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]  # no partial file left


def test_downloads_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(FetchError, match="2 file\\(s\\) missing and downloads are off"):
        fetch("tiny", cache, registry=TABLE, opener=refuse, download=False)
    monkeypatch.setenv("FLODL_OFFLINE", "1")
    with pytest.raises(FetchError, match=re.escape(f"place these files in {cache}:")):
        fetch("tiny", cache, registry=TABLE, opener=refuse)
    assert not cache.exists()


def test_download_checks_digest_and_tries_the_next_mirror(tmp_path: Path) -> None:
    served = {
        "https://mirror-1/a.bin": b"corrupted",  # wrong content on the first mirror
        "https://mirror-2/a.bin": FILES["a.bin"],
        "https://mirror-1/b.txt": FILES["b.txt"],
    }
    cache = tmp_path / "new" / "cache"
    paths = fetch("TINY", cache, registry=TABLE, opener=Opener(served))
    assert {n: p.read_bytes() for n, p in paths.items()} == FILES
    assert sorted(p.name for p in cache.iterdir()) == ["a.bin", "b.txt"]


def test_download_with_wrong_digest_everywhere_fails_cleanly(tmp_path: Path) -> None:
    served = {f"https://mirror-{i}/{n}": b"nope" for i in (1, 2) for n in FILES}
    with pytest.raises(FetchError, match=f"mirror-2/a.bin: sha256 {sha(b'nope')}, expected"):
        fetch("tiny", tmp_path, registry=TABLE, opener=Opener(served))
    assert list(tmp_path.iterdir()) == []


def test_unknown_dataset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown dataset 'imagenet'; expected one of cifar10"):
        fetch("imagenet", tmp_path)


def test_builtin_table_names_the_parsers_files() -> None:
    names = {k: {f.name for f in files} for k, files in REGISTRY.items()}
    assert names["mnist"] == {*Mnist.FILES[True], *Mnist.FILES[False]}
    assert names["cifar10"] == {Cifar10.ARCHIVE}
    assert names["shakespeare"] == {Shakespeare.FILE}
    for files in REGISTRY.values():
        for f in files:
            assert re.fullmatch("[0-9a-f]{64}", f.sha256) and f.urls
            assert all(
                u.startswith(("https://", "http://")) and u.endswith(f.name[-3:]) for u in f.urls
            )


def test_sha256_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = bytes(range(256)) * 5000  # more than one read chunk
    path.write_bytes(data)
    assert sha256_file(path) == sha(data)


def _table_for(key: str, files: dict[str, bytes]) -> dict[str, tuple[RemoteFile, ...]]:
    return {key: tuple(RemoteFile(n, sha(d), (f"https://x/{n}",)) for n, d in files.items())}


def test_from_cache_loaders(tmp_path: Path) -> None:
    images = struct.pack(">4I", 2051, 2, 28, 28) + bytes(2 * 784)
    labels = struct.pack(">2I", 2049, 2) + bytes([3, 4])
    mnist = {n: gzip.compress(images if "images" in n else labels) for n in Mnist.FILES[False]}
    for name, data in mnist.items():
        (tmp_path / name).write_bytes(data)
    ds = Mnist.from_cache(tmp_path, train=False, registry=_table_for("mnist", mnist))
    assert ds.labels.tolist() == [3, 4]

    text = b"To be, or not to be, that is the question."
    (tmp_path / Shakespeare.FILE).write_bytes(text)
    table = _table_for("shakespeare", {Shakespeare.FILE: text})
    assert len(Shakespeare.from_cache(tmp_path, 8, registry=table)) == (len(text) - 1) // 8

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = bytes([7]) + bytes(3072)
        info = tarfile.TarInfo("cifar-10-batches-bin/test_batch.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / Cifar10.ARCHIVE).write_bytes(buf.getvalue())
    table = _table_for("cifar10", {Cifar10.ARCHIVE: buf.getvalue()})
    assert Cifar10.from_cache(tmp_path, train=False, registry=table).labels.tolist() == [7]


def test_unusable_cache_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    with pytest.raises(FetchError, match="cannot create cache directory"):
        fetch("tiny", blocker / "cache", registry=TABLE, opener=refuse)
