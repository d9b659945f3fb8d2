"""Which torch version ``fdl setup`` installs, and from where.

The version is always pinned: a bare ``torch`` requirement lets pip take the newest release,
which on Linux is a multi-GB CUDA build (and may not be the version flodl was tested with).
It comes from, in order: a ``torch==X`` line in the project's ``constraints.txt`` (``fdl init``
writes one, the flodl clone has one), the installed torch, or the version this flodl release is
tested with.

The build (``+cpu``, ``+cu128``, ...) is part of the requirement, so no index can hand over a
different one. pip first looks on the package index it is configured with (a mirror or a
``PIP_FIND_LINKS`` folder may carry that build, and a machine may reach nothing else); only
when that has no such build does it go to PyTorch's own index for the variant.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import _console as con
from ._dispatch import call
from ._errors import CliError
from ._torch_builds import Variant, base_version

# The torch release this flodl release is tested with (the clone's constraints.txt pins the
# same; a test checks that they agree).
TORCH_VERSION = "2.13.0"
_PIN = re.compile(r"^\s*torch\s*==\s*([0-9][0-9A-Za-z.+]*)\s*(?:#.*)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Pin:
    """A torch version (without a build tag) and where it came from, for the plan line."""

    version: str
    source: str


def pinned_in(file: Path) -> str | None:
    """The ``torch==X`` version of a constraints/requirements file, or ``None``."""
    try:
        lines = file.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        m = _PIN.match(line)
        if m is not None:
            return base_version(m.group(1))
    return None


def torch_pin(folders: list[Path], installed: str | None) -> Pin:
    """The torch version to install: the first ``constraints.txt`` of ``folders`` that pins
    torch, else the installed version, else :data:`TORCH_VERSION`."""
    for folder in folders:
        version = pinned_in(folder / "constraints.txt")
        if version is not None:
            return Pin(version, f"pinned in {folder / 'constraints.txt'}")
    if installed is not None:
        return Pin(base_version(installed), "the installed torch's version")
    return Pin(TORCH_VERSION, "the version this flodl release is tested with")


@dataclass(frozen=True)
class TorchInstall:
    """The pip commands that install one exact torch build."""

    spec: str  # torch==2.13.0+cpu
    index_url: str | None  # PyTorch's index for the variant; None: the configured index has it
    force: bool = False

    def _pip(self, *extra: str) -> list[str]:
        tail = ["--force-reinstall", "--no-deps"] if self.force else []
        return [sys.executable, "-m", "pip", "install", self.spec, *extra, *tail]

    @property
    def from_configured(self) -> list[str]:
        """From the package index (and find-links) pip is configured with."""
        return self._pip()

    @property
    def from_pytorch(self) -> list[str] | None:
        """From PyTorch's index for the variant."""
        return None if self.index_url is None else self._pip("--index-url", self.index_url)

    @property
    def probe(self) -> list[str]:
        """Whether the configured index has the build: resolve it, install nothing."""
        return [
            *(sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"),
            *("--no-deps", "-q", self.spec),
        ]


def plan(variant: Variant, pin: Pin, force: bool = False) -> TorchInstall:
    """The install of torch ``pin.version`` in ``variant``'s build.

    On macOS the CPU build is PyPI's own wheel, with no ``+cpu`` tag.
    """
    if variant.kind == "cpu" and sys.platform == "darwin":
        return TorchInstall(f"torch=={pin.version}", None, force)
    return TorchInstall(f"torch=={pin.version}+{variant.name}", variant.index_url, force)


def dry_run_lines(p: TorchInstall) -> list[str]:
    import shlex

    lines = [f"would run: {shlex.join(p.from_configured)}"]
    if p.from_pytorch is not None:
        lines[0] += "   (if your package index has this build)"
        lines.append(f"     else: {shlex.join(p.from_pytorch)}")
    return lines


def _configured_has_it(p: TorchInstall) -> bool:
    try:
        proc = subprocess.run(p.probe, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def install(p: TorchInstall) -> None:
    """Install ``p.spec``: from the configured index when it has the build, else from
    PyTorch's index. Raises :class:`CliError` with what to do when neither provides it."""
    import shlex

    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    if p.from_pytorch is None or _configured_has_it(p):
        con.info("fdl setup: " + shlex.join(p.from_configured))
        if call(p.from_configured) != 0:
            raise CliError(
                f"pip could not install {p.spec} (see its output above)",
                fix=f"check that your package index serves {p.spec} for Python {py}, or pin "
                "another torch version in constraints.txt",
            )
        return
    con.info(f"fdl setup: {p.spec} is not on your package index; trying {p.index_url}")
    con.info("fdl setup: " + shlex.join(p.from_pytorch))
    if call(p.from_pytorch) != 0:
        raise CliError(
            f"{p.spec} is neither on your package index nor obtainable from {p.index_url} "
            "(see pip's output above)",
            fix=f"put the {p.spec} wheel for Python {py} in a folder DIR and run "
            "PIP_FIND_LINKS=DIR fdl setup (in a project: PIP_FIND_LINKS=DIR ./fdl), or pin a "
            "torch version your index has in constraints.txt",
        )
