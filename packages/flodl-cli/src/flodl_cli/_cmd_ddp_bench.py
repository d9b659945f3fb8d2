"""``fdl ddp-bench ARGS...``: ``python -m ddp_bench ARGS...`` with this venv (and ``--gpus``)."""

from __future__ import annotations

import sys

from . import _context
from ._dispatch import call, child_env, resolve_gpus
from ._errors import CliError
from ._parser import _found
from ._workspace import find_root


def passthrough(rest: list[str]) -> int:
    if not _found("ddp_bench"):
        root = find_root()
        where = f"{root}/ddp-bench" if root is not None else "<flodl clone>/ddp-bench"
        raise CliError(
            "ddp-bench is not installed (it ships with the flodl sources, not on the index)",
            fix=f"pip install -e {where}",
        )
    gpus = resolve_gpus(_context.gpus) if _context.gpus else None
    return call([sys.executable, "-m", "ddp_bench", *rest], env=child_env(gpus))
