import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

import flodl_core as fc


def test_set_verbosity_by_name_and_enum() -> None:
    before = fc.verbosity()
    try:
        fc.set_verbosity("debug")
        assert fc.verbosity() is fc.Verbosity.DEBUG
        fc.set_verbosity(fc.Verbosity.QUIET)
        assert fc.verbosity() is fc.Verbosity.QUIET
    finally:
        fc.set_verbosity(before)


def test_unknown_verbosity_lists_choices() -> None:
    with pytest.raises(fc.ConfigError, match="quiet, normal, verbose, debug"):
        fc.set_verbosity("loud")


@pytest.mark.parametrize("bad", [99, 0, -1, None, 2.5, True])
def test_a_level_that_is_no_logging_level_is_refused_and_changes_nothing(bad: object) -> None:
    before = logging.getLogger("flodl").level
    with pytest.raises(fc.ConfigError, match=r"set_verbosity: level must be an int in 10\.\.50"):
        fc.set_verbosity(bad)  # type: ignore[arg-type]
    assert logging.getLogger("flodl").level == before


def test_a_logging_level_is_taken_as_it_is() -> None:
    before = fc.verbosity()
    try:
        fc.set_verbosity(logging.ERROR)
        assert logging.getLogger("flodl").getEffectiveLevel() == logging.ERROR
    finally:
        fc.set_verbosity(before)


@pytest.fixture
def unconfigured(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """An application that never configured logging, flodl at its normal verbosity. Call it in
    the test body: pytest puts its capture handlers on the root just before the body runs."""
    before = fc.verbosity()
    fc.set_verbosity("normal")
    yield lambda: monkeypatch.setattr(logging.getLogger(), "handlers", [])
    fc.set_verbosity(before)


def test_info_shows_at_normal_verbosity_without_any_logging_setup(
    unconfigured: Callable[[], None], capsys: pytest.CaptureFixture[str]
) -> None:
    unconfigured()
    logging.getLogger("flodl.data").info("streaming instead of resident")
    logging.getLogger("flodl.ddp").debug("not at normal")
    fc.set_verbosity("debug")
    logging.getLogger("flodl.ddp").debug("at debug")
    fc.set_verbosity("quiet")
    logging.getLogger("flodl").info("not when quiet")
    logging.getLogger("flodl").warning("warnings always")
    assert capsys.readouterr().err.splitlines() == [
        "streaming instead of resident",
        "at debug",
        "warnings always",
    ]


def test_a_configured_handler_takes_the_records_alone(
    unconfigured: Callable[[], None], capsys: pytest.CaptureFixture[str]
) -> None:
    unconfigured()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    root = logging.getLogger()
    root.handlers = [Keep()]
    logging.getLogger("flodl.graph").info("loaded 4 tensors")
    assert seen == ["loaded 4 tensors"]
    assert capsys.readouterr().err == ""  # not printed a second time
    root.handlers = []
    logging.getLogger("flodl.ddp").addHandler(own := Keep())
    try:
        logging.getLogger("flodl.ddp").info("benched")
    finally:
        logging.getLogger("flodl.ddp").removeHandler(own)
    assert seen[-1] == "benched" and capsys.readouterr().err == ""


def test_an_unknown_flodl_verbosity_warns_instead_of_failing_the_import() -> None:
    env = {**os.environ, "FLODL_VERBOSITY": "loud"}
    code = "import flodl_core as fc; print(fc.verbosity().name)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "NORMAL"
    assert "FLODL_VERBOSITY='loud' is ignored: unknown verbosity 'loud'" in out.stderr
