"""Explaining commands whose package is not installed."""

from __future__ import annotations

from ._errors import CliError
from ._parser import _found


def hf_available() -> None:
    """Raise the install hint unless flodl-hf and its fdl commands are importable."""
    if not _found("flodl_hf"):
        raise CliError(
            "flodl-hf commands are unavailable: the flodl-hf package is not installed",
            fix="fdl add flodl-hf --install",
        )
    if not _found("flodl_cli._cmd_hf"):
        raise CliError(
            "flodl-hf commands are unavailable in this flodl-cli build",
            fix="pip install --upgrade flodl-cli",
        )
