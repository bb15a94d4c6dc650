"""The wire format (issue 2, item 4): every frame round-trips, and everything malformed,
forged or unknown is refused with ``WireError``. Nothing on the wire is ever unpickled."""

from __future__ import annotations

import hmac
import io
import os
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import wire
from runtime.wire import WireError

SECRET = b"s" * 32


# -- data headers ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(wire.KINDS))
def test_header_round_trip(kind):
    raw = wire.data_header(kind, stream=65535, dest=2**32 - 1, src=7)
    assert len(raw) == wire.HEADER_SIZE
    assert wire.parse_header(raw) == (kind, 65535, 2**32 - 1, 7)
    assert wire.dest_of(raw) == 2**32 - 1


@pytest.mark.parametrize("size", [0, wire.HEADER_SIZE - 1, wire.HEADER_SIZE + 1])
def test_header_of_the_wrong_size(size):
    raw = (wire.data_header(wire.DATA, 1, 2, 3) * 2)[:size]
    with pytest.raises(WireError, match=f"header of {size} bytes"):
        wire.parse_header(raw)
    with pytest.raises(WireError, match=f"header of {size} bytes"):
        wire.dest_of(raw)


def test_header_of_an_unknown_kind():
    with pytest.raises(WireError, match="unknown frame kind 200"):
        wire.parse_header(wire.data_header(200, 1, 2, 3))


# -- batches --------------------------------------------------------------------------------

def test_batch_round_trip():
    batch = [["a", 1], [None, True, 2.5], [b"\x00raw", {"k": [1, {"n": None}]}],
             [2**64 - 1, -(2**63), 10**18], [[]], ["é" * 100]]
    assert wire.decode_batch(wire.encode_batch(batch)) == batch


def test_tuples_arrive_as_lists():
    assert wire.decode_batch(wire.encode_batch([("a", (1, 2))])) == [["a", [1, 2]]]


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=4),
    max_leaves=15)


@given(st.lists(st.lists(values, max_size=4), max_size=10))
def test_any_batch_round_trips(batch):
    assert wire.decode_batch(wire.encode_batch(batch)) == batch


@pytest.mark.parametrize("bad", [object(), 2**64, -(2**63) - 1, {1, 2}])
def test_unencodable_values(bad):
    assert not wire.encodable(bad)
    with pytest.raises((TypeError, ValueError, OverflowError)):
        wire.encode_batch([["ok", bad]])


def test_a_failed_encode_leaves_no_residue():
    with pytest.raises(TypeError):
        wire.encode_batch([["a", object()]])
    assert wire.decode_batch(wire.encode_batch([["b"]])) == [["b"]]


@pytest.mark.parametrize("body, problem", [
    (b"\xc1", "undecodable batch"),  # a byte msgpack never uses
    (b"", "undecodable batch"),
    (wire.encode_batch([["a", 1], ["b", 2]])[:-1], "undecodable batch"),  # truncated
    (wire.encode_batch([["a"]]) + b"\x01", "undecodable batch"),  # trailing bytes
    (wire.pack({"not": "a batch"}), "a batch must be an array, got dict"),
    (wire.pack(7), "a batch must be an array, got int"),
])
def test_bad_batches(body, problem):
    with pytest.raises(WireError, match=problem):
        wire.decode_batch(body)


def test_oversized_frames(monkeypatch):
    # the limit is read where each decoder lives: the data plane's and the control plane's room
    monkeypatch.setattr("runtime.wire.frames.MAX_FRAME", 10)
    monkeypatch.setattr("runtime.wire.messages.MAX_FRAME", 10)
    with pytest.raises(WireError, match="exceeds the 10-byte limit"):
        wire.decode_batch(wire.encode_batch([["x" * 20]]))
    with pytest.raises(WireError, match="exceeds the limit"):
        wire.unseal(SECRET, wire.seal(SECRET, wire.Bye(role="x" * 20, id=0)))


# -- control messages -----------------------------------------------------------------------

SAMPLE = {int: 7, str: "<x>", float: 1.5, bool: True, dict: {"a": [1, b"2"]}, list: [1, "x"],
          bytes: b"\x00\xff"}


def example(kind: str) -> wire.Control:
    """A record of ``kind`` with a value of the right type in every field."""
    types = wire._FIELDS[wire.MESSAGES[kind]]
    return wire.control(kind, **{f: "<x>" if t is None else SAMPLE[t[0]]
                                 for f, t in types.items()})


@pytest.mark.parametrize("kind", sorted(wire.MESSAGES))
def test_every_control_message_round_trips(kind):
    msg = example(kind)
    assert type(msg) is wire.MESSAGES[kind]
    assert wire.unseal(SECRET, wire.seal(SECRET, msg)) == msg


@pytest.mark.parametrize("kind", sorted(wire.MESSAGES))
def test_every_control_message_is_a_frozen_record(kind):
    msg = example(kind)
    assert not hasattr(msg, "__dict__")  # slots
    for name in msg.fields():
        with pytest.raises(AttributeError):
            setattr(msg, name, None)


def test_optional_fields_may_be_left_out():
    assert wire.control("exception", task=1, incarnation=0, error="e", traceback="",
                        time=1.0).fatal is True
    assert wire.control("ask_metrics", id=1) == wire.AskMetrics(id=1, window="1m")


def test_control_refuses_missing_fields():
    with pytest.raises(WireError, match=r"control message 'ready' lacks \['incarnation'\]"):
        wire.control("ready", task=1)


def test_control_refuses_unknown_types():
    with pytest.raises(WireError, match="unknown control message 'reboot'"):
        wire.control("reboot")


def test_unseal_with_the_wrong_secret():
    with pytest.raises(WireError, match="bad signature"):
        wire.unseal(b"x" * 32, wire.seal(SECRET, example("kill")))


def test_unseal_of_a_tampered_body():
    body, mac = wire.seal(SECRET, wire.Bye(role="<what>", id=1))
    forged = body.replace(b"<what>", b"<kill>")
    assert forged != body
    with pytest.raises(WireError, match="bad signature"):
        wire.unseal(SECRET, [forged, mac])


@pytest.mark.parametrize("parts", [0, 1, 3])
def test_unseal_of_the_wrong_part_count(parts):
    frames = (wire.seal(SECRET, example("kill")) * 2)[:parts]
    with pytest.raises(WireError, match=f"control message of {parts} parts, expected 2"):
        wire.unseal(SECRET, frames)


def _mac(body: bytes) -> bytes:
    return hmac.digest(SECRET, body, "sha256")


def signed(obj) -> list[bytes]:
    """A correctly signed message whose body is any msgpack value (bypassing control())."""
    body = wire.pack(obj)
    return [body, _mac(body)]


@pytest.mark.parametrize("obj, problem", [
    ({"t": "reboot"}, "unknown control message 'reboot'"),
    ({"t": ["kill"]}, "unknown control message"),
    ({"x": 1}, "unknown control message None"),
    ([1, 2], "unknown control message 'list'"),
    ({"t": "hello", "role": "sm"}, r"control message 'hello' lacks \['id', 'incarnation', 'pid'\]"),
    ({"t": "kill", "note": 1}, r"control message 'kill' has unknown fields \['note'\]"),
    ({"t": "ready", "task": "1", "incarnation": 0}, "'ready': field 'task' may not be str"),
    ({"t": "ready", "task": True, "incarnation": 0}, "'ready': field 'task' may not be bool"),
    ({"t": "stats", "task": 1, "incarnation": 0, "record": "not a record"},
     "'stats': field 'record' may not be str"),
    ({"t": "ask_logs", "id": 1, "component": None, "task": 1},
     "'ask_logs': field 'component' may not be NoneType"),
])
def test_unseal_refuses_unknown_or_incomplete_messages(obj, problem):
    with pytest.raises(WireError, match=problem):
        wire.unseal(SECRET, signed(obj))


def test_unseal_of_an_undecodable_signed_body():
    body = b"\xc1"
    with pytest.raises(WireError, match="undecodable control message"):
        wire.unseal(SECRET, [body, _mac(body)])


# -- no pickle on any port ------------------------------------------------------------------

class Trap:
    """Unpickling this creates a file: the proof that something unpickled it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_is_never_unpickled(tmp_path):
    path = str(tmp_path / "pwned")
    payload = pickle.dumps(Trap(path))
    pickle.loads(payload).close()  # the trap works...
    os.remove(path)
    with pytest.raises(WireError):
        wire.decode_batch(payload)
    for frames in ([payload, _mac(payload)], [payload, b"x" * 32]):
        with pytest.raises(WireError):
            wire.unseal(SECRET, frames)
    assert not os.path.exists(path)  # ...and nothing here sprang it


# -- records on disk ------------------------------------------------------------------------

def test_records_round_trip():
    records = [{"a": 1}, [b"x", None], "s"]
    assert list(wire.iter_records(io.BytesIO(b"".join(map(wire.pack, records))))) == records


def test_records_ignore_a_truncated_tail():
    raw = wire.pack(["one"]) + wire.pack(["two", "x" * 50])[:-5]
    assert list(wire.iter_records(io.BytesIO(raw))) == [["one"]]


def test_unpack_is_the_inverse_of_pack():
    assert wire.unpack(wire.pack({1: [b"a", 2.5]})) == {1: [b"a", 2.5]}


def test_every_control_message_has_a_receiver_that_dispatches_it(offline_master, tmp_path):
    """The kinds the master, the stream manager and the instance take through their
    tables, with the welcome (taken by the handshakes) and the reply (by the client),
    are every kind there is: no record is declared that nothing dispatches."""
    from runtime import Topology
    from runtime.processes.instance import Instance
    from runtime.processes.stmgr import StreamManager
    from runtime.testing import ListSink, ListSpout

    topo = Topology("receivers")
    topo.spout("numbers", ListSpout([[1]]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    master = offline_master(topo)
    boot = {"secret": SECRET, "container": 0, "task": 0, "incarnation": 0,
            "run_dir": str(tmp_path), "tm": f"ipc://{tmp_path}/tm.sock"}
    sm, instance = StreamManager(boot), Instance(boot)
    try:
        taken = {*master.handlers, *sm.handlers, *instance.handlers, wire.Welcome, wire.Reply}
        assert {k.KIND for k in taken} == set(wire.MESSAGES)
    finally:
        sm.router.close()
        sm.ctl.close(linger=0)
        sm.zctx.term()
        instance.close()
