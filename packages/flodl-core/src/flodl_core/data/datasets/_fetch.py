"""Download the canonical dataset files into a cache directory, checked by SHA-256.

Files already in the cache with the right digest are used as they are, without any network. A
cached file with another digest is rejected, never overwritten: it may be the user's own. Offline,
the error names every file to place in the cache and where to get it. Downloads go to a temporary
file in the cache directory, are hashed while written and renamed into place only when the digest
matches, so an interrupted download leaves nothing that looks complete.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..._atomic import atomic_open
from ..._errors import ConfigError, FetchError, format_choices

logger = logging.getLogger("flodl.data")

Opener = Callable[..., Any]
"""``opener(url, timeout=seconds)`` returning a readable binary stream (a context manager)."""


@dataclass(frozen=True)
class RemoteFile:
    """One canonical file: its name in the cache, its SHA-256 and the URLs to try, in order."""

    name: str
    sha256: str
    urls: tuple[str, ...]


_MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)


def _mnist(name: str, sha256: str) -> RemoteFile:
    return RemoteFile(name, sha256, tuple(base + name for base in _MNIST_MIRRORS))


REGISTRY: dict[str, tuple[RemoteFile, ...]] = {
    "mnist": (
        _mnist(
            "train-images-idx3-ubyte.gz",
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        ),
        _mnist(
            "train-labels-idx1-ubyte.gz",
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        ),
        _mnist(
            "t10k-images-idx3-ubyte.gz",
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        ),
        _mnist(
            "t10k-labels-idx1-ubyte.gz",
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        ),
    ),
    "cifar10": (
        RemoteFile(
            "cifar-10-binary.tar.gz",
            "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
            ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",),
        ),
    ),
    "shakespeare": (
        RemoteFile(
            "tinyshakespeare.txt",
            "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            (
                "https://raw.githubusercontent.com/karpathy/char-rnn/master/"
                "data/tinyshakespeare/input.txt",
            ),
        ),
    ),
}
"""Canonical files of each dataset :func:`fetch` knows."""

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _offline_default() -> bool:
    return os.environ.get("FLODL_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _place_these(cache_dir: Path, files: Sequence[RemoteFile]) -> str:
    lines = [f"  {f.name}  (sha256 {f.sha256}; from {f.urls[0]})" for f in files]
    return f"place these files in {cache_dir}:\n" + "\n".join(lines)


class _ChecksumMismatch(ValueError):
    """Raised inside the atomic write so that a bad download never replaces anything."""


def _download(f: RemoteFile, cache_dir: Path, opener: Opener, timeout: float) -> list[str]:
    """Try each URL in turn; returns the reasons of the failures (empty on success)."""
    failures: list[str] = []
    for url in f.urls:
        try:
            h = hashlib.sha256()
            # The file takes its final name only if the whole body arrived with the right hash.
            with atomic_open(cache_dir / f.name) as out, opener(url, timeout=timeout) as src:
                stream: IO[bytes] = src
                while chunk := stream.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                digest = h.hexdigest()
                if digest != f.sha256:
                    raise _ChecksumMismatch(f"sha256 {digest}, expected {f.sha256}")
            logger.info("data: downloaded %s from %s", f.name, url)
            return []
        except (OSError, ValueError, http.client.HTTPException) as e:  # URLError, timeouts: OSError
            failures.append(f"{url}: {e}")
    return failures


def _missing(files: Sequence[RemoteFile], cache: Path, verify: bool) -> list[RemoteFile]:
    """The files not in ``cache`` yet; with ``verify``, a cached file of wrong digest raises."""
    missing: list[RemoteFile] = []
    for f in files:
        path = cache / f.name
        if not path.is_file():
            missing.append(f)
            continue
        if not verify:
            continue
        digest = sha256_file(path)
        if digest != f.sha256:
            raise FetchError(
                f"cached file {path} has sha256 {digest}, expected {f.sha256}: it is not the "
                f"canonical {f.name} (an interrupted copy or another file?); delete it or "
                f"replace it with the file from {f.urls[0]}; if it is your own file on "
                "purpose, pass verify=False to skip the checksum"
            )
    return missing


def fetch(
    name: str,
    cache_dir: str | Path,
    *,
    download: bool | None = None,
    registry: Mapping[str, Sequence[RemoteFile]] | None = None,
    opener: Opener | None = None,
    timeout: float = 60.0,
    verify: bool = True,
) -> dict[str, Path]:
    """The canonical files of dataset ``name`` in ``cache_dir``: ``{file name: path}``.

    ``name``: ``"mnist"``, ``"cifar10"`` or ``"shakespeare"``. Missing files are downloaded
    unless ``download=False`` (default: download unless ``FLODL_OFFLINE=1``). Raises
    :class:`FetchError` when a cached file has the wrong digest or a file cannot be obtained (the
    message lists the files to place in ``cache_dir`` by hand). ``registry`` and ``opener``
    replace the built-in file table and ``urllib.request.urlopen``.

    ``verify=False`` accepts files already in ``cache_dir`` without checking their SHA-256: for
    your own files (a re-packed or subset copy) placed under the canonical names. Downloads are
    always checked.
    """
    table = REGISTRY if registry is None else registry
    key = name.lower() if isinstance(name, str) else name
    if key not in table:
        raise ConfigError(f"unknown dataset {name!r}; expected one of {format_choices(table)}")
    files = tuple(table[key])
    cache = Path(cache_dir).expanduser().absolute()
    if download is None:
        download = not _offline_default()

    missing = _missing(files, cache, verify)
    if missing and not download:
        raise FetchError(
            f"{key}: {len(missing)} file(s) missing and downloads are off; "
            + _place_these(cache, missing)
        )
    if missing:
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FetchError(f"cannot create cache directory {cache}: {e}") from e
        use = opener if opener is not None else urllib.request.urlopen
        failed: list[RemoteFile] = []
        reasons: list[str] = []
        for f in missing:
            why = _download(f, cache, use, timeout)
            if why:
                failed.append(f)
                reasons.extend(why)
        if failed:
            raise FetchError(
                f"{key}: could not download {len(failed)} file(s) (offline?); "
                + _place_these(cache, failed)
                + "\nattempts:\n"
                + "\n".join(f"  {r}" for r in reasons)
            )
    return {f.name: cache / f.name for f in files}
