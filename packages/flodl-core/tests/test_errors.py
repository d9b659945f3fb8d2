import pytest

import flodl_core as fc


def test_build_error_lists_every_problem() -> None:
    err = fc.BuildError(["duplicate tag 'h' at node 2", "open streams at build"])
    assert err.errors == ["duplicate tag 'h' at node 2", "open streams at build"]
    text = str(err)
    assert "2 errors" in text
    assert "duplicate tag 'h'" in text and "open streams" in text


def test_path_error_lists_valid_names_and_is_a_key_error() -> None:
    err = fc.PathError("no child 'encodr' under root", valid=["encoder", "head"])
    assert isinstance(err, KeyError)
    assert str(err) == "no child 'encodr' under root; valid names here: encoder, head"


def test_errors_derive_from_builtin_kinds() -> None:
    assert issubclass(fc.ConfigError, ValueError)
    assert issubclass(fc.CheckpointError, fc.FlodlError)
    assert issubclass(fc.VersionMismatchError, ImportError)
    with pytest.raises(ValueError):
        raise fc.DataError("bad magic 1234 in images file: expected 2051")
