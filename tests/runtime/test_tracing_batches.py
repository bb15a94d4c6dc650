"""A traced call and the batches it shares with untraced tuples (issue 20, the traced
path's cost; docs/internals/tracing.md, "How the mark travels"): what waits in a
batch stays there, in place and in order, while a traced call runs, and only the
call's own tuples (the batch's tail) leave as a traced frame; a batch the call fills
is split at what waited, so nothing is lost, sent twice or left untraced."""

from __future__ import annotations

import random
from collections import Counter
from contextlib import contextmanager

import pytest

from runtime import Bolt, Topology, wire
from runtime.engine.outbound import StreamOut
from runtime.engine.riders import Riders, traced_key
from runtime.engine.tracing import Tracer
from runtime.engine.tracing_spout import Run
from runtime.testing import InMemoryCluster

from .test_checkpoints import INTERVAL, WORDS, chaos, drain, fill_log, word_count
from .test_tracing import Sentences, Split, check_tree


class Peeking(Split):
    """The split, noting at each call the sentence and the entries waiting in its own
    stream's batch (``waiting`` is set once the cluster runs)."""

    def prepare(self, config, context):
        self.seen: list[tuple[str, list]] = []

    def process(self, tup):
        self.seen.append((tup.values[0], self.waiting()))
        super().process(tup)


class Heard(Bolt):
    """Acks every word, and keeps them all."""

    outputs: list[str] = []

    def prepare(self, config, context):
        self.words: list[str] = []

    def process(self, tup):
        self.words.append(tup.values[0])
        self.ack(tup)


def words_waiting(cluster: InMemoryCluster, ackers: int):
    """What the split's stream holds unsent: its batch (acking off) or its one tracked
    batch's entries (a BasicBolt's children, triples, under acking)."""
    out = cluster.executors[cluster.plan.component_tasks()["split"][0]].streams["default"]
    if ackers:
        return lambda: out.outlets[0].tracked[0][0::3]
    return lambda: list(out.items)


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_traced_call_leaves_what_waits_in_the_batch_in_place(ackers):
    # the spout's frames go two sentences at a time, the split's batch never fills and
    # no timer fires: every word an untraced sentence emitted waits in the split's batch,
    # in order, and a traced call finds it there (it was emptied for the call, before)
    random.seed(3)
    topo = Topology("peek")
    topo.spout("sentences", Sentences(60), batch_size=2)
    topo.bolt("split", Peeking).shuffle_grouping("sentences")
    topo.bolt("count", Heard).fields_grouping("split", ["word"])
    with InMemoryCluster(topo, ackers=ackers, trace=0.3, eager_flush=False,
                         target_latency=None) as cluster:
        split = cluster.user_object(cluster.plan.component_tasks()["split"][0])
        split.waiting = words_waiting(cluster, ackers)
        for _ in range(15):
            cluster.step(4)
        seen, left = list(split.seen), split.waiting()
        for _ in range(3):  # the flush timer, at last, at each hop: what waits leaves
            cluster.advance(0.01)  # (traced tuples ride its frames), every tree is whole
        traces = cluster.traces(limit=100)
    traced = {t.values[0] for t in traces}
    # the last may wait: one in the spout's half-filled batch, a traced one for a frame
    # to ride (without the timer, only the next frame to its task takes it)
    assert 8 <= len(traced) <= 40 and len(seen) >= 57
    # a run's traced sentences share one window at the split (one entry's): what waits
    # may end with the words of the traced sentences just before, still to be caught
    expected, found_waiting, run = [], 0, []
    for sentence, waiting in seen:
        extra = waiting[len(expected):]
        assert waiting[:len(expected)] == expected, sentence
        assert extra == run[len(run) - len(extra):], sentence
        if sentence in traced:
            found_waiting += bool(waiting)
            run = [*run[len(run) - len(extra):], *sentence.split()]
        else:
            expected += sentence.split()
            run = []
    assert left == expected  # still waiting: the traced calls took only their own words
    assert found_waiting >= 5  # traced calls that found untraced words waiting
    for t in traces:
        check_tree(t, 4)


def small_batches(count_tasks: int) -> Topology:
    """Sentences of four words through batches of three tuples: every traced call at the
    split fills its batch, and often the spout's run or batch too."""
    topo = Topology("small", batch_size=3)
    topo.spout("sentences", Sentences(200))
    topo.bolt("split", Split).shuffle_grouping("sentences")
    topo.bolt("count", Heard, parallelism=count_tasks).fields_grouping("split", ["word"])
    return topo


def small_run(ackers: int, count_tasks: int, seed: int) -> tuple[list, list[str]]:
    """200 sentences through :func:`small_batches`, 30 % traced: the traces, and every
    word the counters heard."""
    random.seed(seed)
    with InMemoryCluster(small_batches(count_tasks), ackers=ackers, trace=0.3,
                         eager_flush=False, target_latency=None) as cluster:
        for _ in range(50):
            cluster.step(4)
            cluster.advance(0.01)
        cluster.run_until_idle()
        for _ in range(3):  # the last traced tuples ride the timer's frames, hop by hop
            cluster.advance(0.01)
        heard = [w for task in cluster.plan.component_tasks()["count"]
                 for w in cluster.user_object(task).words]
        return cluster.traces(limit=1000), heard


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_batch_a_traced_call_fills_is_split_where_the_call_began(ackers):
    # what waited leaves untraced, the call's tuples traced: every traced tree is whole
    # (before, the call's tuples that filled the batch left untraced) and every word
    # arrives once
    traces, heard = small_run(ackers, count_tasks=1, seed=11)
    assert 30 <= len(traces) <= 100
    for t in traces:
        check_tree(t, 4)
        assert t.status == "acked"
    everything = [w for i in range(200) for w in f"s{i} a b c".split()]
    assert sorted(heard) == sorted(everything)


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_filled_batch_split_among_tasks_loses_and_repeats_nothing(ackers):
    # to two counters by a fields grouping, a filled batch's parts cannot be cut where
    # the call began (acking off: sent untraced, a limit); no word is lost or sent twice
    traces, heard = small_run(ackers, count_tasks=2, seed=13)
    assert traces and all(t.status == "acked" for t in traces)
    everything = [w for i in range(200) for w in f"s{i} a b c".split()]
    assert sorted(heard) == sorted(everything)
    if ackers:  # a tracked batch is cut exactly: every tree is whole
        for t in traces:
            check_tree(t, 4)


@pytest.mark.parametrize("seed", range(4))
def test_a_rollback_drops_the_traced_tuples_waiting_with_the_rest(tmp_path, seed):
    # traced tuples wait to ride the next frame, as the untraced ones beside them wait
    # in the batches: a checkpoint's rollback drops both (sent after the marker, they
    # would count in the new epoch twice); tasks restarted at random, the committed
    # counts stay exact with a third of the words traced
    fill_log(tmp_path)
    rng = random.Random(seed)
    topo = word_count(tmp_path)
    with InMemoryCluster(topo, checkpoint_interval=INTERVAL, state_store="memory",
                         trace=0.3, eager_flush=False) as c:
        victims = {t.component for t in c.plan.tasks} - {"__acker"}
        kills = 0
        for _ in range(120):  # the records collected each round, as the heartbeat does
            kills += chaos(c, rng, victims, 1)  # (a task killed loses its own)
            c.traces(limit=1)
        drain(c)
        assert kills > 3 and len(c.traces(limit=10_000)) > 100
        assert c.state("count") == dict(Counter(WORDS))


def to_heard(sentences: int) -> Topology:
    """Sentences of four words, one split, one counter that keeps every word."""
    topo = Topology("heard")
    topo.spout("sentences", Sentences(sentences))
    topo.bolt("split", Split).shuffle_grouping("sentences")
    topo.bolt("count", Heard).fields_grouping("split", ["word"])
    return topo


def executes_of(trace: float, ackers: int) -> tuple[dict[tuple[str, str], int], list]:
    """``BoltSide.execute`` and ``execute_data`` calls per bolt, the riders handed to
    ``execute_riders`` and the frames given a wrapper ``process`` (a traced entry no
    frame rode), and the traces, for 400 sentences driven as the instances are: the
    spout's turns, then the flush timer."""
    random.seed(7)
    calls: Counter = Counter()
    counters = {"execute": lambda *args, **kwargs: 1,
                "execute_data": lambda *args, **kwargs: 1,
                "execute_riders": lambda parts, *args: len(parts),
                "on_frame": lambda *args, process=None, **kwargs: process is not None}
    with InMemoryCluster(to_heard(400), ackers=ackers, trace=trace, eager_flush=False,
                         target_latency=None) as cluster:
        for comp in ("split", "count"):
            bolt = cluster.executors[cluster.plan.component_tasks()[comp][0]].bolt
            for name, many in counters.items():
                execute = getattr(bolt, name)

                def counted(*args, comp=comp, name=name, execute=execute, many=many,
                            **kwargs):
                    calls[comp, name] += many(*args, **kwargs)
                    return execute(*args, **kwargs)

                setattr(bolt, name, counted)
        for _ in range(40):
            cluster.step(25)
            cluster.advance(0.01)
        traces = cluster.traces(limit=1000)
    return calls, traces


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_traced_frames_riders_and_the_frame_they_rode_run_in_the_data_loop(ackers):
    # a TRACED frame's traced entries each run in the data loop with its own wrapper
    # (execute_riders), and every tree is whole; the frame they rode (untracked with
    # acking off, RUN or ANCHORED with it on) runs in the data loop after them, as in an
    # untraced run, a BasicBolt's too (since 2026-11-28): execute_data calls of the
    # untraced run, and one more a rider or a traced entry no frame rode; the general
    # loop (execute) runs for neither
    untraced, _ = executes_of(0.0, ackers)
    traced, traces = executes_of(0.1, ackers)
    assert len(traces) >= 20 and all(t.status == "acked" for t in traces)
    for t in traces:
        check_tree(t, 4)
    for bolt in ("split", "count"):  # a BasicBolt, a plain bolt
        assert traced[bolt, "execute_riders"] > 0 and untraced[bolt, "execute_data"] > 0
        assert traced[bolt, "execute_data"] == (untraced[bolt, "execute_data"]
                                                + traced[bolt, "execute_riders"]
                                                + traced[bolt, "on_frame"])
        assert traced[bolt, "execute"] == untraced[bolt, "execute"] == 0


@contextmanager
def traced_frame_met_by_waiting_output(ackers: int, entries: list[list]):
    """The counter of :func:`to_heard`, its output waiting, given one TRACED frame of
    DATA ``entries`` (``[words, trace, hop]`` each; trace 0: the untraced frame they
    rode): its executor and its bolt, for the test to read what ran and what waits."""
    with InMemoryCluster(to_heard(1), ackers=ackers, trace=0.0, eager_flush=False,
                         target_latency=None) as cluster:
        tasks = cluster.plan.component_tasks()
        split, count = tasks["split"][0], tasks["count"][0]
        executor = cluster.executors[count]
        stream = cluster.plan.streams.index(("split", "default"))
        body = wire.encode_traced([[wire.DATA, wire.encode_batch(words), trace, hop, 0.0]
                                   for words, trace, hop in entries])
        executor.output_waiting = ["a frame waits"]
        executor.on_frame(wire.data_header(wire.TRACED, stream, count, split), body)
        yield executor, cluster.user_object(count)


def ran_traced(executor) -> list[tuple[int, int]]:
    """The hops records the executor's tracer holds: each one's first hop, and how many
    tuples it ran traced."""
    return [(r[2], len(r[3:]) // 3) for r in executor.tracer.drain() if r[0] == "hops"]


@pytest.mark.parametrize("ackers", [1, 0])
def test_a_traced_frame_met_by_waiting_output_sets_all_its_rest_aside(ackers):
    # output waits (backpressure): execute stops after one tuple and sets the rest
    # aside; the rest of a traced entry and the whole frame it rode are set aside as
    # one, in order, none lost (each entry's own execute set its rest aside in turn,
    # and the frame's overwrote the traced entry's, before)
    with traced_frame_met_by_waiting_output(ackers, [[["t1", "t2", "t3"], 5, 51],
                                                     [["u1", "u2"], 0, 0]]) as (executor, heard):
        assert heard.words == ["t1"]
        assert executor.leftover[0] == ["t2", "t3", "u1", "u2"]
        executor.output_waiting = ()
        executor.run_leftover()
        assert heard.words == ["t1", "t2", "t3", "u1", "u2"]
        assert ran_traced(executor) == [(51, 1)]


def test_riders_after_one_that_ended_as_output_began_to_wait_are_set_aside():
    # the first rider's only tuple fills the output: its hops are recorded, and the
    # next rider and the frame they rode are set aside whole, in order, none processed
    with traced_frame_met_by_waiting_output(0, [[["t1"], 5, 51], [["t2", "t3"], 6, 61],
                                                [["u1"], 0, 0]]) as (executor, heard):
        assert heard.words == ["t1"]
        assert executor.leftover[0] == ["t2", "t3", "u1"]
        assert ran_traced(executor) == [(51, 1)]
        executor.output_waiting = ()
        executor.run_leftover()
        assert heard.words == ["t1", "t2", "t3", "u1"]


def test_a_traced_frame_of_traced_entries_only_met_by_waiting_output_loses_nothing():
    # a TRACED frame no untraced frame rode (every entry traced: at trace=1.0, or what
    # found no frame by the sender's flush), met by waiting output: execute stops after
    # one tuple, and the rest of every entry is set aside as one, in order (each entry's
    # own execute set its rest aside over the one before's, and two words of each
    # three-word sentence were lost: the count never ran them and their trees timed out)
    with traced_frame_met_by_waiting_output(0, [[["a1", "a2", "a3"], 5, 51],
                                                [["b1", "b2", "b3"], 6, 61]]) as (executor, heard):
        assert heard.words == ["a1"]
        assert executor.leftover[0] == ["a2", "a3", "b1", "b2", "b3"]
        executor.output_waiting = ()
        executor.run_leftover()
        assert heard.words == ["a1", "a2", "a3", "b1", "b2", "b3"]
        assert ran_traced(executor) == [(51, 1)]


class RunsSeen(InMemoryCluster):
    """The twin, keeping the roots of every RUN frame sent, alone or in a TRACED one."""

    roots: list[int] = []

    def _send(self, header: bytes, body: bytes) -> None:
        h = wire.parse_header(header)
        frames = ([(e[0], e[1]) for e in wire.decode_traced(body)] if h.kind == wire.TRACED
                  else [(h.kind, body)])
        for kind, inner in frames:
            if kind == wire.RUN:
                first, entries = wire.decode_batch(inner)
                self.roots += range(first, first + len(entries))
        super()._send(header, body)


def test_a_frame_rides_in_the_traced_frame_of_its_own_task_and_stream():
    # the riders' key is read off the raw header (its kind byte replaced, not parsed):
    # the very header wire.data_header makes for a TRACED frame of that task and stream
    sent = []
    riders = Riders(lambda h, b: sent.append(("alone", h, b)))
    out = StreamOut("words", 1, lambda h, b: sent.append(("own", h, b)), print)
    for stream, dest, src in ((3, 7, 2), (65535, 2**32 - 1, 2**31)):
        header = wire.data_header(wire.ANCHORED, stream, dest, src)
        assert traced_key(header) == wire.data_header(wire.TRACED, stream, dest, src)
    to7, to8 = (wire.data_header(wire.DATA, 3, d, 2) for d in (7, 8))
    riders.keep(out, to7, [wire.DATA, b"traced", 11, 12, 1.5])
    out.send(to8, b"other task")  # goes as it is
    out.send(to7, b"untraced")  # takes the entry along, last
    riders.flush()  # nothing left to go alone
    (_, h8, b8), (_, h7, b7) = sent
    assert (h8, b8) == (to8, b"other task")
    assert h7 == wire.data_header(wire.TRACED, 3, 7, 2)
    assert wire.decode_traced(b7) == [(wire.DATA, b"traced", 11, 12, 1.5, None),
                                      (wire.DATA, b"untraced", 0, 0, 0.0, None)]


def test_a_traced_spout_tuple_is_a_run_of_one_between_the_waiting_runs_roots():
    # a traced emit's run (its own tail of the runs, sent alone) takes the root the
    # waiting run would have started at, and the waiting run goes on from the next: the
    # roots stay consecutive, none given twice, and every tree completes
    random.seed(11)
    RunsSeen.roots = []
    with RunsSeen(to_heard(300), ackers=1, trace=0.2, eager_flush=False,
                  target_latency=None) as cluster:
        for _ in range(30):
            cluster.step(10)
            cluster.advance(0.01)
        for _ in range(5):  # the last frames and acks leave with the timer
            cluster.advance(0.01)
        traces = cluster.traces(limit=1000)
        acked = next(s.acked for s in cluster.statistics() if s.component == "sentences")
    roots = sorted(RunsSeen.roots)
    assert roots == list(range(roots[0], roots[0] + 300))
    assert len(traces) >= 30 and all(t.status == "acked" for t in traces)
    assert acked == 300


def test_a_spouts_watched_roots_expire_oldest_first_and_the_look_stops_at_a_kept_one():
    # watched longer than HELD_FOR message timeouts: forgotten, read from the oldest
    # (roots are added in their start order) up to the first one kept, not every root
    tracer = Tracer("sentences", 1, {}, lambda h, b: None, acking=True, rate=0.0,
                    timeout=1.0, wall=lambda: 0.0, spout=True)
    keep = tracer.keep
    for root, started in ((1, 0.0), (2, 1.0), (3, 5.0), (4, 0.5)):
        tracer.roots[root] = (root * 10, started)
    tracer.by_msg["m"] = 1
    tracer._expire_roots(1.5 + keep)
    assert list(tracer.roots) == [3, 4]  # 4, stale but after 3 (a clock set back), waits
    assert tracer.by_msg == {"m": 1}  # forgotten with the last root only
    tracer._expire_roots(10.0 + keep)
    assert tracer.roots == {} and tracer.by_msg == {}


def test_a_tracked_runs_end_forgets_the_stale_roots_once_and_watches_each_of_its_own():
    # the old roots are looked at once a run, against its newest start (not once a
    # tuple): what is stale by then is forgotten, as the tuple by tuple look forgot it
    tracer = Tracer("sentences", 1, {}, lambda h, b: None, acking=True, rate=0.0,
                    timeout=1.0, wall=lambda: 0.0, spout=True)
    keep = tracer.keep
    tracer.roots.update({1: (10, 0.6), 2: (20, 2.0)})  # 1 stale by the last start only
    tracer.by_msg.update({"old1": 1, "old2": 2})
    body = wire.encode_batch([500, [["a"], ["b"], ["c"]]])  # a RUN: roots 500, 501, 502
    tracer.catch_units = lambda window, trace, units, only_anchored: [
        (wire.RUN, body, [(0, 1), (1, 1), (2, 1)])]
    tracer.run = Run(None, None, True, True)
    tracer.run.tuples += [("m0", 0.5 + keep, ["a"]), ("m1", 0.7 + keep, ["b"]),
                          ("m2", 1.5 + keep, ["c"])]
    tracer._end_run()
    (_, trace, tracked, msg_ids, starts), = tracer.records
    assert (tracked, msg_ids, starts) == (True, ["m0", "m1", "m2"],
                                          [0.5 + keep, 0.7 + keep, 1.5 + keep])
    assert tracer.roots == {2: (20, 2.0), 500: (trace, 0.5 + keep),
                            501: (trace + 1, 0.7 + keep), 502: (trace + 2, 1.5 + keep)}
    assert tracer.by_msg == {"old1": 1, "old2": 2, "m0": 500, "m1": 501, "m2": 502}  # (kept
    # until no root is watched: a stale entry names a root no longer in roots)
