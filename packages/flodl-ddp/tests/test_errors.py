"""DdpError: fields, message, pickling across processes."""

from __future__ import annotations

import pickle

from flodl_core import FlodlError
from flodl_ddp import DdpError


def test_fields_and_message() -> None:
    e = DdpError("step 7 raised", rank=1, host="node-a", remote_traceback="Traceback ...\nBoom")
    assert isinstance(e, FlodlError) and isinstance(e, RuntimeError)
    assert (e.rank, e.host) == (1, "node-a")
    text = str(e)
    assert text.startswith("[rank 1, host node-a] step 7 raised")
    assert text.endswith("Traceback ...\nBoom")


def test_plain_message_without_location() -> None:
    e = DdpError("no process group")
    assert str(e) == "no process group"
    assert e.rank is None and e.host is None and e.remote_traceback is None


def test_pickle_round_trip_keeps_fields() -> None:
    e = pickle.loads(pickle.dumps(DdpError("x", rank=2, host="h", remote_traceback="tb")))
    assert isinstance(e, DdpError)
    assert (e.message, e.rank, e.host, e.remote_traceback) == ("x", 2, "h", "tb")
