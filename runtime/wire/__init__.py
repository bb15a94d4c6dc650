"""Every frame that crosses a socket, defined in one place. Only this package imports msgpack.

Data plane (instance <-> stream manager <-> stream manager) uses two-part messages,
``[header, body]``. The 12-byte header is enough to route a frame, so a stream manager
forwards it without decoding the tuples in the body:

>>> h = data_header(DATA, stream=3, dest=7, src=2)
>>> parse_header(h)
Header(kind=1, stream=3, dest=7, src=2)
>>> decode_batch(encode_batch([["a", 1], ["b", 2]]))
[['a', 1], ['b', 2]]

One-field streams: in the bodies of tuple frames (DATA, TRACKED, RUN, ANCHORED), a tuple is the
list of its values, except on a stream declared with one field, where it is that value,
bare (a batch of words is ``["a", "b"]``, not ``[["a"], ["b"]]``). The receiver knows
the stream's fields from the plan, by the header's stream id, and wraps each value back
into its list as it makes the Tuple (``runtime.model.api.OneFieldTuple``). A one-element list
per tuple would cost the sender ~100-200 ns a tuple: it is kept alive until its batch
is sent, then packed as a container of its own (docs/internals/performance.md,
"One-field streams").

Control plane (everyone <-> topology master, and the client) uses sealed messages:
``[body, mac]`` where body is a msgpack map with a ``"t"`` kind and mac is an
HMAC-SHA256 of the body under the topology's secret. A message whose mac does not
verify is never decoded, and only a verified message may carry pickled user code.

Each control message is a frozen record of its own (:class:`Hello`, :class:`Stats`,
:class:`Kill`, ...), registered by its kind in :data:`MESSAGES`:

>>> secret = b"k" * 32
>>> frames = seal(secret, Restart(task=3, reason="hung", incarnation=0))
>>> unseal(secret, frames)
Restart(task=3, reason='hung', incarnation=0)

A room per part: :mod:`runtime.wire.frames` (the data plane), :mod:`runtime.wire.messages`
(the control records, :data:`MESSAGES`, :func:`seal`/:func:`unseal`),
:mod:`runtime.wire.questions` (the client's questions) and :mod:`runtime.wire.records`
(records on disk). Import them from here: ``from runtime import wire``.
"""

from __future__ import annotations

from runtime.wire.frames import (
    ACK_ACK,
    ACK_FAIL,
    ACK_INIT,
    ACK_RESET,
    ACKED,
    ACKED_FAILED,
    ACKED_OK,
    ACKED_RENEWED,
    ACKED_TIMEOUT,
    ACKS,
    ANCHORED,
    BACKPRESSURE,
    CHECKPOINT,
    COMPLETED,
    DATA,
    HEADER_SIZE,
    HELLO,
    KINDS,
    MAX_FRAME,
    ROUTED,
    RUN,
    TRACED,
    TRACKED,
    Header,
    WireError,
    batch_values,
    bp_header,
    bp_transition,
    data_header,
    decode_batch,
    decode_traced,
    dest_of,
    encodable,
    encode_batch,
    encode_traced,
    parse_header,
)
from runtime.wire.messages import (
    _FIELDS as _FIELDS,  # the tests build a sample of every record from it
)
from runtime.wire.messages import (
    MESSAGES,
    Activate,
    Adopt,
    BackpressureChange,
    Bye,
    Control,
    Deactivate,
    ExceptionReport,
    Hello,
    Kill,
    Logs,
    LogsReply,
    Ready,
    Recording,
    Replan,
    Reply,
    Restart,
    Restarted,
    Running,
    Samples,
    Setting,
    SmStats,
    Stats,
    Switch,
    Switched,
    Tap,
    TraceReport,
    Welcome,
    control,
    seal,
    unseal,
)
from runtime.wire.questions import (
    AskAckerState,
    AskEvents,
    AskExceptions,
    AskKill,
    AskLogs,
    AskMetrics,
    AskPause,
    AskRebalance,
    AskRecord,
    AskResume,
    AskSample,
    AskSetMaxSpoutPending,
    AskSetTrace,
    AskStatistics,
    AskStatus,
    AskTraces,
    Question,
)
from runtime.wire.records import iter_records, pack, unpack, unpack_raw

__all__ = [
    "ACKED", "ACKED_FAILED", "ACKED_OK", "ACKED_RENEWED", "ACKED_TIMEOUT", "ACKS", "ACK_ACK",
    "ACK_FAIL", "ACK_INIT", "ACK_RESET", "ANCHORED", "Activate", "Adopt", "AskAckerState",
    "AskEvents", "AskExceptions", "AskKill", "AskLogs", "AskMetrics", "AskPause", "AskRebalance",
    "AskRecord", "AskResume", "AskSample", "AskSetMaxSpoutPending", "AskSetTrace", "AskStatistics",
    "AskStatus", "AskTraces", "BACKPRESSURE", "BackpressureChange", "Bye", "CHECKPOINT",
    "COMPLETED", "Control", "DATA", "Deactivate", "ExceptionReport", "HEADER_SIZE", "HELLO",
    "Header", "Hello", "KINDS", "Kill", "Logs", "LogsReply", "MAX_FRAME", "MESSAGES", "Question",
    "ROUTED", "RUN", "Ready", "Recording", "Replan", "Reply", "Restart", "Restarted", "Running",
    "Samples", "Setting", "SmStats", "Stats", "Switch", "Switched", "TRACED", "TRACKED", "Tap",
    "TraceReport", "Welcome", "WireError", "batch_values", "bp_header",
    "bp_transition", "control", "data_header", "decode_batch", "decode_traced", "dest_of",
    "encodable", "encode_batch", "encode_traced", "iter_records", "pack", "parse_header", "seal",
    "unpack", "unpack_raw", "unseal",
]
