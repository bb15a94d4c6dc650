"""A bolt with nothing to send asks its loop for no flush (``Executor.on_timer``), and
one that holds output, or acks, asks for its flush as before. The instance loop flushes
a bolt once it has read all its input (``Instance.drain_data``), so an idle bolt's only
wake-ups are its input: issue 17's half-rate tail, where every process was put on a CPU
about a thousand times a second, half of them a bolt's timer finding nothing to flush."""

from __future__ import annotations

from runtime import Bolt, Topology
from runtime.engine.executor import IDLE_FLUSHES
from runtime.testing import InMemoryCluster, ListSink, ListSpout

FLUSH = 0.002


class Relay(Bolt):
    """Passes each tuple on, anchored to it, and acks it."""

    outputs = ["value"]

    def process(self, tup):
        self.emit(list(tup.values), anchors=[tup])
        self.ack(tup)


class Keep(Bolt):
    """Keeps its inputs unacked (``ack_all`` acks them), and emits nothing."""

    outputs = []

    def prepare(self, config, context):
        self.kept = []

    def process(self, tup):
        self.kept.append(tup)

    def ack_all(self):
        for tup in self.kept:
            self.ack(tup)
        self.kept.clear()


def chain(last) -> Topology:
    topo = Topology("idle-bolt")
    topo.spout("feed", ListSpout([[n] for n in range(50)]))
    topo.bolt("relay", Relay).shuffle_grouping("feed")
    topo.bolt("last", last).shuffle_grouping("relay")
    return topo


def executor_of(cluster: InMemoryCluster, component: str):
    (task,) = cluster.plan.component_tasks()[component]
    return cluster.executors[task]


def test_an_idle_bolt_asks_for_no_flush_until_idle_flushes_have_passed():
    with InMemoryCluster(chain(ListSink), ackers=1, flush_interval=FLUSH) as cluster:
        cluster.run_until_idle()
        relay, now = executor_of(cluster, "relay"), cluster.clock()
        assert not relay.holding()
        assert relay.on_timer(now) - now >= IDLE_FLUSHES * FLUSH * 0.999
        assert executor_of(cluster, "feed").on_timer(now) - now <= FLUSH  # spouts: as before


def test_a_bolt_holding_output_asks_for_its_flush():
    with InMemoryCluster(chain(ListSink), ackers=1, flush_interval=FLUSH) as cluster:
        cluster.run_until_idle()
        relay, now = executor_of(cluster, "relay"), cluster.clock()
        relay.on_timer(now)
        relay.user.emit([99])  # waits in its batch for the next flush
        assert relay.holding()
        assert relay.on_timer(now) - now <= FLUSH
        relay.flush()
        assert not relay.holding()


def test_a_bolt_holding_acks_asks_for_their_flush():
    with InMemoryCluster(chain(Keep), ackers=1, flush_interval=FLUSH,
                         max_spout_pending=100) as cluster:  # (all 50 held at once)
        cluster.run_until_idle()
        last, now = executor_of(cluster, "last"), cluster.clock()
        assert len(last.user.kept) == 50 and not last.holding()
        last.user.ack_all()  # acks made outside process wait for the flush
        assert last.acks.waiting() and last.holding()
        assert last.on_timer(now) - now <= FLUSH
        cluster.advance(FLUSH)
        assert not last.holding()
        feed = cluster.user_object(cluster.plan.component_tasks()["feed"][0])
        assert len(feed.acked) == 50


class Ticked(Bolt):
    """Emits a tuple at each tick, and nothing for its input."""

    outputs = ["value"]

    def process(self, tup):
        self.ack(tup)

    def process_tick(self, tup):
        self.emit([tup.values[0]])


def test_what_a_tick_emits_waits_only_for_the_flush():
    topo = Topology("ticked")
    topo.spout("feed", ListSpout([[n] for n in range(5)]))
    topo.bolt("ticked", Ticked).shuffle_grouping("feed")
    topo.bolt("sink", ListSink).shuffle_grouping("ticked")
    with InMemoryCluster(topo, flush_interval=FLUSH, tick_freq_secs=1.0) as cluster:
        cluster.run_until_idle()
        ticked = executor_of(cluster, "ticked")
        assert not ticked.holding()
        tick_at = ticked._next_tick
        due = ticked.on_timer(tick_at)  # the tick emits into a batch
        assert ticked.holding()
        assert due - tick_at <= FLUSH * 1.001  # (float sums)
