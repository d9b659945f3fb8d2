"""``fdl docs [--serve] [--port N]``: build the workspace's documentation site, optionally serve it.

The site is built by MkDocs from the workspace's ``mkdocs.yml`` with ``--strict`` (a broken
link, a missing reference or a docstring warning fails the build, as in CI) into ``site/``: one
folder of static files. ``--serve`` then serves that folder over HTTP on 127.0.0.1 only, until
Ctrl-C. MkDocs and its plugins are development tools, not dependencies of flodl-cli: when they
are missing the error says how to install them.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import importlib.util
import os
import sys
from pathlib import Path

from ._dispatch import call, child_env
from ._errors import CliError
from ._workspace import find_root

HOST = "127.0.0.1"  # never a public interface: the site is for the person at this machine
DEFAULT_PORT = 8000
# import name -> distribution, for the error that says what to install
_TOOLS = {
    "mkdocs": "mkdocs",
    "material": "mkdocs-material",
    "mkdocstrings": "mkdocstrings",
    "mkdocstrings_handlers.python": "mkdocstrings-python",
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("docs", help="build the documentation site into site/ (--serve to browse)")
    p.description = (
        "Build the documentation site with MkDocs (--strict) into the workspace's site/ folder; "
        f"with --serve, serve it on http://{HOST}:PORT until Ctrl-C."
    )
    p.add_argument("--serve", action="store_true", help=f"serve the built site on {HOST}")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"port for --serve (default {DEFAULT_PORT}; 0 picks a free one)",
    )


def _workspace() -> Path:
    root = find_root()
    if root is None or not (root / "mkdocs.yml").is_file():
        where = "no noxfile.py in this folder or above" if root is None else f"{root}"
        raise CliError(
            f"no flodl workspace with a mkdocs.yml here ({where})",
            fix="run from a clone of flodl, or set FDL_ROOT",
        )
    return root


def _missing_tools() -> list[str]:
    missing = []
    for module, dist in _TOOLS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(dist)
    return missing


def _check_port(port: int) -> int:
    if not 0 <= port <= 65535:
        raise CliError(f"--port {port}: expected a port number from 0 to 65535", code=2)
    return port


def build(root: Path) -> int:
    """``mkdocs build --strict`` in ``root``; returns its exit status."""
    missing = _missing_tools()
    if missing:
        raise CliError(
            f"fdl docs needs {', '.join(missing)} (not installed in {sys.prefix})",
            fix=f"{Path(sys.executable).name} -m pip install -c {root / 'constraints.txt'} "
            "mkdocs mkdocs-material 'mkdocstrings[python]'",
        )
    return call(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", "mkdocs.yml"],
        cwd=root,
        env=child_env(NO_MKDOCS_2_WARNING="1"),
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:
        return


def make_server(site: Path, port: int) -> http.server.ThreadingHTTPServer:
    """An HTTP server for the static folder ``site`` on 127.0.0.1:``port`` (0: a free port).

    Raises :class:`CliError` when the port cannot be bound (in use, or privileged).
    """
    handler = functools.partial(_QuietHandler, directory=os.fspath(site))
    try:
        return http.server.ThreadingHTTPServer((HOST, _check_port(port)), handler)
    except OSError as e:
        raise CliError(
            f"cannot serve on {HOST}:{port}: {e.strerror or e}",
            fix="pick another port with --port N (0 picks a free one)",
        ) from None


def run(args: argparse.Namespace) -> int:
    port = _check_port(args.port)
    root = _workspace()
    status = build(root)
    if status != 0:
        return status
    site = root / "site"
    print(f"fdl docs: built {site / 'index.html'}")
    if not args.serve:
        return 0
    server = make_server(site, port)
    host, bound = server.server_address[:2]
    print(f"fdl docs: serving on http://{host}:{bound}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("fdl docs: stopped")
    finally:
        server.server_close()
    return 0
