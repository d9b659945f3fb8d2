"""``fdl @cluster COMMAND`` and ``fdl probe @cluster``: run on every machine of fdl.cluster.yml.

The controller is :mod:`flodl_cli.cluster` (torch-free: this machine needs neither torch nor
flodl-ddp); the workers run flodl-ddp's node agent. COMMAND may name an fdl.yml command
(``fdl @cluster train``), resolved as ``fdl train`` would run it (:mod:`._cluster_command`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _console as con
from ._errors import CliError, UsageError

if TYPE_CHECKING:
    from .cluster import ClusterConfig

USAGE = "usage: fdl @cluster [--file FILE] [--dry-run] COMMAND [ARGS...]\n"
HELP = """\
usage: fdl @cluster [--file FILE] [--dry-run] COMMAND [ARGS...]
       fdl @cluster probe [--json] [--timeout S]   (same as: fdl probe @cluster)

Run COMMAND on every worker of fdl.cluster.yml, one torchrun per machine, with the rendezvous on
the controller address. COMMAND is a command of fdl.yml (fdl @cluster train -- --epochs 3 runs
what fdl train would) or a command line (python train.py --epochs 3). Each worker's output comes
back prefixed with its name; the first worker that fails stops the others and its exit code is
fdl's. A fresh token is made for every run: the ranks prove they hold it before training starts.

options:
  --file FILE   the cluster file (default: fdl.cluster.yml here or in a parent directory)
  --dry-run     print what would run on each worker, start nothing
"""


def load_config(file: str | None) -> ClusterConfig:
    """The validated cluster file named by ``--file`` or found from the current directory
    (a file found in a parent folder is named on stderr, so a stray one is noticed)."""
    from .cluster import ClusterConfig, find_cluster_file

    if file:
        return ClusterConfig.load(Path(file))
    path = find_cluster_file()
    if path is None:
        raise CliError(
            f"no fdl.cluster.yml in {Path.cwd()} or its parents",
            fix="write one (format: fdl @cluster --help and docs/cli.md) or pass --file FILE",
        )
    if path.parent != Path.cwd().resolve():
        con.info(f"fdl @cluster: using {path} (found in a parent folder of {Path.cwd()})")
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
    from ._cluster_command import resolve
    from .cluster import plan, run_cluster
    from .cluster._launch import new_run_id
    from .cluster._transport import transport_for

    job = resolve(words)
    what = shlex.join(job.argv) if job.command is None else f"{job.command}: {job.line}"
    if opts["dry_run"]:
        transport = transport_for(cfg)
        for n in plan(cfg, job.argv, new_run_id(), job.env):
            spawn = transport.spawn(n.worker, n.argv, n.env)
            env = "" if transport.name == "ssh" else " ".join(f"{k}={v}" for k, v in n.env.items())
            print(f"{n.worker.host}: {env + ' ' if env else ''}{shlex.join(spawn.argv)}")
        return 0
    hosts = ", ".join(w.host for w in cfg.workers)
    con.info(con.bold("fdl @cluster: ") + f"{what} on {hosts} ({cfg.source})")
    return run_cluster(cfg, job.argv, env=job.env)


PROBE_USAGE = "usage: fdl probe @cluster [--json] [--file FILE] [--timeout SECONDS]\n"


def probe(words: list[str], file: str | None = None, timeout_s: float | None = None) -> int:
    """``fdl probe @cluster [--json] [--timeout S]``: check every worker; exit 1 naming the
    failures."""
    as_json = False
    it = iter(words)
    for w in it:
        if w == "--json":
            as_json = True
        elif w == "--timeout" or w.startswith("--timeout="):
            value = w.split("=", 1)[1] if "=" in w else next(it, None)
            timeout_s = _seconds(value)
        elif w.startswith("--file="):
            file = w.split("=", 1)[1]
        elif w == "--file":
            file = next(it, None)
            if file is None:
                raise UsageError("--file needs a path", usage=USAGE)
        else:
            raise UsageError(f"unknown probe option {w!r}", usage=PROBE_USAGE)
    cfg = load_config(file)
    from ._dists import installed_versions
    from .cluster import probe_cluster

    report = probe_cluster(cfg, local_packages=installed_versions(), timeout_s=timeout_s or 30.0)
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


def _seconds(value: str | None) -> float:
    try:
        seconds = float(value) if value is not None else 0.0
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise UsageError(
            f"--timeout needs a positive number of seconds, got {value!r}", usage=PROBE_USAGE
        )
    return seconds
