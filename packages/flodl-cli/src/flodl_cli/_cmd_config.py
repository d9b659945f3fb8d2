"""``fdl config show [ENV]``: the resolved manifest, each line annotated with its origin."""

from __future__ import annotations

import argparse

from . import _context
from . import _manifest as mf
from . import _yamlmarks as ym
from ._errors import CliError


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("config", help="show the resolved fdl.yml")
    p.description = "Inspect this project's fdl.yml (with an fdl.<env>.yml overlay merged over it)."
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    show = verbs.add_parser("show", help="print the resolved YAML with where each value came from")
    show.add_argument("env", nargs="?", help="overlay to merge (default: --env / @env / FDL_ENV)")


def run(args: argparse.Namespace) -> int:
    file = mf.find()
    if file is None:
        raise CliError(
            "no fdl.yml in this folder or above", fix="fdl setup writes one, or fdl init NAME"
        )
    mf.announce(file)
    env = args.env or _context.env
    manifest = mf.load(file, env)
    print(ym.dump_annotated(manifest.doc), end="")
    return 0
