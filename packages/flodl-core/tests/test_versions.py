import pytest

import flodl_core as fc
from flodl_core._versions import check_siblings


def test_matching_versions_pass() -> None:
    check_siblings("flodl-graph", fc.__version__)


def test_mismatch_raises_with_fix() -> None:
    with pytest.raises(fc.VersionMismatchError, match=r"pip install flodl-graph==9\.9\.9"):
        check_siblings("flodl-graph", "9.9.9")


def test_missing_sibling_metadata_is_accepted() -> None:
    check_siblings("flodl-x", "0.1.0", siblings=("no-such-flodl-dist",))
