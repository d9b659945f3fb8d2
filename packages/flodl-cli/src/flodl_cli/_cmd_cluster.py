"""``fdl @cluster COMMAND`` and ``fdl probe @cluster``: run on every machine of fdl.cluster.yml.

The cluster machinery lives in flodl-ddp (the workers need it anyway: it is what runs there);
this module imports it only when ``@cluster`` is used, so the rest of ``fdl`` starts without
torch and works where flodl-ddp is not installed.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from typing import Any

from . import _console as con
from ._errors import CliError, UsageError

USAGE = "usage: fdl @cluster [--file FILE] [--dry-run] COMMAND [ARGS...]\n"
HELP = """\
usage: fdl @cluster [--file FILE] [--dry-run] COMMAND [ARGS...]
       fdl @cluster probe [--json]      (same as: fdl probe @cluster)

Run COMMAND (e.g. python train.py --epochs 3) on every worker of fdl.cluster.yml, one torchrun
per machine, with a c10d rendezvous on the controller address. Each worker's output comes back
prefixed with its name; the first worker that fails stops the others and its exit code is fdl's.
A fresh token is made for every run: the ranks prove they hold it before training starts.

options:
  --file FILE   the cluster file (default: fdl.cluster.yml here or in a parent directory)
  --dry-run     print what would run on each worker, start nothing
"""


def _ddp() -> None:
    if importlib.util.find_spec("flodl_ddp") is None:
        raise CliError(
            "@cluster needs flodl-ddp (it runs the workers' torchrun agents)",
            fix="pip install flodl-ddp (on this machine and on every worker)",
        )


def load_config(file: str | None) -> Any:
    """The validated cluster file named by ``--file`` or found from the current directory."""
    _ddp()
    from flodl_ddp._cluster_config import ClusterConfig, find_cluster_file

    path = Path(file) if file else find_cluster_file()
    if path is None:
        raise CliError(
            f"no fdl.cluster.yml in {Path.cwd()} or its parents",
            fix="write one (format: fdl @cluster --help and docs/cli.md) or pass --file FILE",
        )
    return ClusterConfig.load(path)


def _options(words: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Leading ``--file F`` / ``--dry-run`` / ``--help``; the command starts at the first other
    word (or after ``--``)."""
    opts: dict[str, Any] = {"file": None, "dry_run": False, "help": False}
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            i += 1
            break
        if w in ("-h", "--help"):
            opts["help"] = True
        elif w == "--dry-run":
            opts["dry_run"] = True
        elif w == "--file" or w.startswith("--file="):
            if "=" in w:
                opts["file"] = w.split("=", 1)[1]
            elif i + 1 < len(words):
                i += 1
                opts["file"] = words[i]
            else:
                raise UsageError("--file needs a path", usage=USAGE)
        elif w.startswith("-"):
            raise UsageError(
                f"unknown @cluster option {w!r}",
                usage=USAGE,
                hint="put the command's own flags after it: fdl @cluster python train.py --lr 1",
            )
        else:
            break
        i += 1
    return opts, words[i:]


def dispatch(command: str, rest: list[str]) -> int:
    """``fdl @cluster COMMAND REST...`` (``command`` is the first word after ``@cluster``)."""
    opts, words = _options([command, *rest])
    if opts["help"] and not words:
        print(HELP)
        return 0
    if not words:
        raise UsageError("@cluster needs a command to run on the workers", usage=USAGE)
    if words[0] == "probe":
        return probe(words[1:], opts["file"])
    cfg = load_config(opts["file"])
    from flodl_ddp._cluster_launch import new_run_id, plan
    from flodl_ddp._cluster_transport import transport_for

    if opts["dry_run"]:
        transport = transport_for(cfg)
        for n in plan(cfg, words, new_run_id()):
            spawn = transport.spawn(n.worker, n.argv, n.env)
            env = "" if transport.name == "ssh" else " ".join(f"{k}={v}" for k, v in n.env.items())
            print(f"{n.worker.host}: {env + ' ' if env else ''}{shlex.join(spawn.argv)}")
        return 0
    from flodl_ddp._cluster_launch import run_cluster

    hosts = ", ".join(w.host for w in cfg.workers)
    con.info(con.bold("fdl @cluster: ") + f"{shlex.join(words)} on {hosts} ({cfg.source})")
    return run_cluster(cfg, words)


def probe(words: list[str], file: str | None = None) -> int:
    """``fdl probe @cluster [--json]``: check every worker; exit 1 naming the failures."""
    as_json = False
    it = iter(words)
    for w in it:
        if w == "--json":
            as_json = True
        elif w.startswith("--file="):
            file = w.split("=", 1)[1]
        elif w == "--file":
            file = next(it, None)
            if file is None:
                raise UsageError("--file needs a path", usage=USAGE)
        else:
            raise UsageError(
                f"unknown probe option {w!r}",
                usage="usage: fdl probe @cluster [--json] [--file FILE]\n",
            )
    cfg = load_config(file)
    from flodl_ddp._cluster_probe import probe_cluster

    from ._dists import installed_versions

    report = probe_cluster(cfg, local_packages=installed_versions())
    if as_json:
        print(report.to_json())
    else:
        text = report.table()
        for line in text.splitlines():
            print(con.red(line) if line.startswith("FAIL ") else line)
    if not report.ok:
        host, check, _ = report.failures[0]
        more = len(report.failures) - 1
        tail = f" (and {more} more)" if more else ""
        print(f"fdl probe @cluster: {host} failed the {check} check{tail}", file=sys.stderr)
    return 0 if report.ok else 1
