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
