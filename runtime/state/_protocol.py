"""The checkpoint protocol's messages: ``CHECKPOINT`` frames whose body is
``[op, epoch, checkpoint id]`` (docs/internals/checkpoints.md has the whole story)."""

from __future__ import annotations

from runtime import wire

ROLLBACK = 0  # checkpoint spout -> every task: restore checkpoint id, start epoch
MARKER = 1  # task -> its downstream tasks: what follows is of this epoch
PREPARE = 2  # checkpoint spout -> spout tasks: save your position, send the barrier
BARRIER = 3  # task -> its downstream tasks: everything before it is in checkpoint id
PREPARED = 4  # task -> checkpoint spout: my part of checkpoint id is saved
NEW = 5  # a restarted task -> checkpoint spout: I lost my state, roll everyone back; its
#         id slot is the plan epoch the task started on (a newer one: a rebalance is
#         switching, and the split's rollback is the one to wait for)
COMMITTED = 6  # checkpoint spout -> spout tasks: checkpoint id is committed
OPS = ("rollback", "marker", "prepare", "barrier", "prepared", "new", "committed")


def frame(op: int, epoch: int, cid: int | None, dest: int, src: int) -> tuple[bytes, bytes]:
    return (wire.data_header(wire.CHECKPOINT, 0, dest, src),
            wire.encode_batch([op, epoch, cid]))


def parse(body: bytes) -> tuple[int, int, int | None]:
    msg = wire.decode_batch(body)
    if (len(msg) != 3 or msg[0] not in range(len(OPS)) or type(msg[1]) is not int
            or not (msg[2] is None or type(msg[2]) is int)):
        raise wire.WireError(f"malformed checkpoint message {msg!r}")
    return msg[0], msg[1], msg[2]


def state_key(component: str, index: int) -> str:
    return f"state/{component}/{index}"


def source_key(component: str, index: int) -> str:
    return f"source/{component}/{index}"


def window_key(component: str, index: int) -> str:
    return f"window/{component}/{index}"
