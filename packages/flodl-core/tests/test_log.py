import logging
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
