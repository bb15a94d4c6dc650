"""The flush timer cuts a batch only once its tuples may have waited a flush interval
(``Executor.flush_due``): a stream that sent a full batch since then keeps filling, so
at full rate its frames go full, and no tuple waits longer than the interval. Before,
every turn of the timer sent whatever was batched: at 1.47 M tuples/s and a batch of
2,000, every other frame of the word count went short (docs/internals/performance-log.md,
"Word count on a faster machine")."""

from __future__ import annotations

import pytest

from runtime import Bolt, Spout, Topology, wire
from runtime.engine.outbound import StreamOut
from runtime.testing import InMemoryCluster

FLUSH = 0.002
SIZE = 10


class Burst(Spout):
    """Emits ``config["burst"]`` numbers a call (with a msg_id when ``config["tracked"]``)."""

    outputs = ["n"]

    def open(self, config, context):
        self.burst, self.tracked, self.n = config["burst"], config["tracked"], 0

    def next_tuple(self):
        for _ in range(self.burst):
            self.n += 1
            if self.tracked:
                self.emit([self.n], msg_id=self.n)
            else:
                self.emit([self.n])


class Sink(Bolt):
    outputs = []

    def process(self, tup):
        self.ack(tup)


def burst(tracked: bool, n: int) -> InMemoryCluster:
    topo = Topology("full-frames")
    topo.spout("burst", Burst)
    topo.bolt("sink", Sink).shuffle_grouping("burst")
    return InMemoryCluster(topo, eager_flush=False, batch_size=SIZE, flush_interval=FLUSH,
                           ackers=1 if tracked else 0, burst=n, tracked=tracked)


def spout_frames(cluster: InMemoryCluster) -> list[int]:
    """The tuples of each frame the spout sent so far (taken off the twin's queue)."""
    sizes = []
    while cluster.frames:
        header, body = cluster.frames.popleft()
        batch = wire.decode_batch(body)
        kind = wire.parse_header(header).kind
        sizes.append(len(batch[1]) if kind == wire.RUN else len(batch))
    return sizes


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "runs"])
def test_a_batch_started_after_a_full_one_waits_for_its_own_interval(tracked):
    with burst(tracked, SIZE + 3) as cluster:
        (task,) = cluster.plan.component_tasks()["burst"]
        spout, start = cluster.executors[task], cluster.clock()
        cluster.clock.advance(0.6 * FLUSH)
        spout.step(1)  # 13 tuples: a full frame now, 3 left
        assert spout_frames(cluster) == [SIZE]
        cluster.clock.advance(0.4 * FLUSH)  # the timer's turn: the 3 are 0.4 intervals old
        due = spout.on_timer(cluster.clock())
        assert spout_frames(cluster) == []  # (the old timer sent them: a frame of 3)
        assert due == pytest.approx(start + 1.6 * FLUSH)  # when they are an interval old
        cluster.clock.advance(due - cluster.clock())
        spout.on_timer(cluster.clock())
        assert spout_frames(cluster) == [3]


@pytest.mark.parametrize("tracked", [False, True], ids=["untracked", "runs"])
def test_a_batch_with_no_full_one_before_goes_at_the_timers_turn(tracked):
    with burst(tracked, 3) as cluster:
        (task,) = cluster.plan.component_tasks()["burst"]
        spout = cluster.executors[task]
        cluster.clock.advance(0.6 * FLUSH)
        spout.step(1)
        assert spout_frames(cluster) == []
        cluster.clock.advance(0.4 * FLUSH)
        due = spout.on_timer(cluster.clock())
        assert spout_frames(cluster) == [3]
        assert due == pytest.approx(cluster.clock() + FLUSH)


def test_at_full_rate_every_frame_is_full_and_no_tuple_waits_longer_than_the_interval():
    """A spout emitting 7 tuples every 0.2 intervals (35 an interval, 3.5 batches): the
    old timer cut a frame at each of its turns; now each tuple goes in a full frame,
    within an interval of its emit."""
    with burst(False, 7) as cluster:
        (task,) = cluster.plan.component_tasks()["burst"]
        spout, sent, emitted_at = cluster.executors[task], [], []
        for _ in range(50):
            cluster.clock.advance(0.2 * FLUSH)
            now = cluster.clock()
            spout.step(1)
            emitted_at += [now] * 7
            spout.on_timer(now)
            sent += [(now, n) for n in spout_frames(cluster)]
        assert {n for _, n in sent} == {SIZE}
        at = [t for t, n in sent for _ in range(n)]
        assert max(b - a for a, b in zip(emitted_at, at)) <= FLUSH * 1.0001


def test_a_traced_calls_tails_sent_alone_leave_the_heads_time():
    # a traced call's tuples go in frames of their own (send_tails: the lists are cut,
    # flushed, and the heads put back): the heads are as old as before, so the stream
    # keeps the time its lists were last all emptied, or the timer would hold them on
    now, sent = [1.0], []
    out = StreamOut("default", 1, lambda header, body: sent.append(wire.decode_batch(body)),
                    lambda *bad: None)
    out.clock = lambda: now[0]
    out.direct[7] = (wire.data_header(wire.DATA, 0, 7, 1), [])
    out.direct_tracked[7] = (wire.data_header(wire.TRACKED, 0, 7, 1), [])
    out.flush()
    assert out.emptied_at == 1.0
    now[0] = 2.0
    out.items.append("a")  # heads: emitted before the traced call
    out.direct[7][1].append("b")
    lists = out.pending()
    heads = list(map(len, lists))
    out.items.append("t1")  # the traced call's tuples
    out.direct[7][1].append("t2")
    out.send_tails(lists, heads)
    assert sent == [["t2"]] and out.items == ["a"] and out.direct[7][1] == ["b"]
    assert out.emptied_at == 1.0
    out.flush()
    assert out.emptied_at == 2.0
