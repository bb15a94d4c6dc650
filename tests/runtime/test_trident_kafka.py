"""The transactional Kafka batch spout against librdkafka's mock cluster: alone (a batch is a
recorded range, read again identically by a restarted spout however the topic has grown;
offset gaps; a range the broker cannot give), in the in-memory twin, and in real processes
where an aggregator (before or after its write) or the spout (while reading a batch, or with
a batch half acked) SIGKILLs itself mid-run and the counts still come out exact.

The mock cluster gives a topic 4 partitions when a producer first writes to it."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter

import cloudpickle
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from runtime import Count, KafkaBatchSpout, MemoryMap, SQLiteMap, Topology, TopologyError
from runtime.model.api import Context
from runtime.testing import InMemoryCluster, wait_for
from runtime.trident import read_statistics
from runtime.trident._spout import BatchLedger

cloudpickle.register_pickle_by_value(sys.modules[__name__])

PARTITIONS = 4
SENTENCES = [f"w{i % 31} w{(i * 7) % 53} w{(i * 13) % 97}" for i in range(3000)]
TRUTH = Counter(w for s in SENTENCES for w in s.split())


def produce(producer: Producer, topic: str, records: list, first: int = 0) -> None:
    """``{"word": sentence, "i": n}`` records, record n to partition n % 4."""
    for n, sentence in enumerate(records, first):
        producer.produce(topic, json.dumps({"word": sentence, "i": n}).encode(),
                         partition=n % PARTITIONS)
    assert producer.flush(10) == 0


def split(values):
    """Trident's ``each``: a sentence record to its words (the record's number rides along)."""
    return [[w, values[1]] for w in values[0].split()]


def opened(spout, run_dir, tasks=(7, 8)):
    """Open a routed spout as the only task, recording its emit_direct calls."""
    emitted = []
    spout.emit_direct = lambda task, values, msg_id=None: emitted.append((task, values,
                                                                         msg_id))
    spout.open({}, Context("t", "words", 1, 0, 1, {"count": tasks}, 0, str(run_dir)))
    return emitted


def one_batch(spout, emitted) -> tuple[int, Counter, list]:
    """next_tuple until a batch is out: its txid, its words, its markers' msg_ids."""
    wait_for(lambda: spout.next_tuple() or any(m for *_, m in emitted), 20, "a batch")
    markers = [m for *_, m in emitted if m is not None]
    words = Counter(v[0] for _, v, m in emitted if m is None)
    return markers[0][0], words, markers


def test_a_batch_is_a_recorded_range_read_again_identically_after_a_crash(kafka_cluster,
                                                                          tmp_path):
    producer, brokers = kafka_cluster
    produce(producer, "s", SENTENCES[:6])  # 2, 2, 1 and 1 records in the 4 partitions

    def spout():
        return KafkaBatchSpout("s", brokers, fields=["word", "i"], batch_size=12, each=split,
                               ledger=tmp_path / "ledger.sqlite").with_route("count", ["word"])

    first = spout()
    emitted = opened(first, tmp_path)
    txid, words, _ = one_batch(first, emitted)
    assert txid == 1 and first.ledger.meta(1) == [[0, 0, 2], [1, 0, 2], [2, 0, 1], [3, 0, 1]]
    assert words == Counter(w for s in SENTENCES[:6] for w in s.split())
    first.close()  # a crash: batch 1 was emitted and never acked
    produce(producer, "s", SENTENCES[6:80], first=6)  # a new plan would now take 3 each

    again = spout()
    emitted = opened(again, tmp_path)
    txid, replayed, markers = one_batch(again, emitted)
    assert txid == 1 and replayed == words
    for msg_id in markers:
        again.ack(msg_id)
    emitted.clear()
    txid, _, _ = one_batch(again, emitted)
    assert txid == 2 and again.ledger.meta(2) == [[0, 2, 5], [1, 2, 5], [2, 1, 4], [3, 1, 4]]
    group = [TopicPartition("s", p) for p in range(PARTITIONS)]  # tupleflow.t.words
    wait_for(lambda: [tp.offset for tp in again._consumer.committed(group, timeout=10)]
             == [2, 2, 1, 1], 30, "batch 1's ends committed to the group")
    again.close()


def test_an_offset_gap_at_a_ranges_end_does_not_hold_the_read(kafka_cluster):
    """An aborted transaction leaves offsets a read_committed consumer never gets: a range
    that ends there is finished by the partition's end, not by its last offset."""
    producer, brokers = kafka_cluster
    producer.produce("gaps", b'"a"', partition=0)
    assert producer.flush(10) == 0
    tx = Producer({"bootstrap.servers": brokers, "transactional.id": "gaps"})
    tx.init_transactions(10)
    for words, commit in ((["b", "c"], True), (["lost"], False)):
        tx.begin_transaction()
        for w in words:
            tx.produce("gaps", json.dumps(w).encode(), partition=0)
        (tx.commit_transaction if commit else tx.abort_transaction)(10)
    spout = KafkaBatchSpout("gaps", brokers, read_timeout=30)
    _, end = Consumer({"bootstrap.servers": brokers, "group.id": "w"}).get_watermark_offsets(
        TopicPartition("gaps", 0), timeout=10, cached=False)
    assert end > 3  # the aborted record's offset is in the range, and never delivered
    try:
        assert spout.read_piece([[0, 0, end]]) == [["a"], ["b"], ["c"]]
    finally:
        spout.close_reader()


def test_a_range_the_broker_cannot_give_is_an_error_naming_it(kafka_cluster):
    producer, brokers = kafka_cluster
    produce(producer, "short", SENTENCES[:8])
    spout = KafkaBatchSpout("short", brokers, fields=["word", "i"], read_timeout=0.5)
    try:
        with pytest.raises(RuntimeError, match=r"partition 1 \[0, 50\), recorded for a batch"):
            spout.read_piece([[0, 0, 2], [1, 0, 50]])
        assert spout.read_piece([[0, 0, 2], [1, 2, 2]]) == [[SENTENCES[0], 0],
                                                            [SENTENCES[4], 4]]
    finally:
        spout.close_reader()


def test_bad_records_are_skipped_the_same_way_every_time(kafka_cluster):
    producer, brokers = kafka_cluster
    for payload in (b'{"word": "a", "i": 1}', b"{not json", b'{"word": "b"}'):
        producer.produce("bad", payload, partition=0)
    assert producer.flush(10) == 0
    spout = KafkaBatchSpout("bad", brokers, fields=["word", "i"])
    try:
        assert spout.read_piece([[0, 0, 3]]) == [["a", 1]] == spout.read_piece([[0, 0, 3]])
        assert spout.skipped == 4
    finally:
        spout.close_reader()


def test_bad_arguments_and_a_missing_topic_are_clear_errors(kafka_cluster, tmp_path):
    with pytest.raises(ValueError, match=r"KafkaBatchSpout\('t'\): brokers"):
        KafkaBatchSpout("t", "")
    with pytest.raises(ValueError, match="read_timeout must be a number of seconds"):
        KafkaBatchSpout("t", "h:1", read_timeout=0)
    with pytest.raises(ValueError, match=r"KafkaBatchSpout\('t'\): decode"):
        KafkaBatchSpout("t", "h:1", decode="xml")
    topo = Topology("two")
    topo.spout("k", KafkaBatchSpout("t", "h:1"), parallelism=2)
    with pytest.raises(TopologyError, match="must run as one task"):
        topo.persistent_aggregate("c", "k", ["value"], Count(), MemoryMap())
    _, brokers = kafka_cluster
    spout = KafkaBatchSpout("nope", brokers, ledger=tmp_path / "l.sqlite",
                            config={"allow.auto.create.topics": False})
    with pytest.raises(ValueError, match=r"KafkaBatchSpout\('nope'\): no such topic"):
        opened(spout.with_route("count", ["value"]), tmp_path)
    spout.close_reader()


def test_the_in_memory_twin_counts_a_kafka_topic_exactly(kafka_cluster, tmp_path):
    producer, brokers = kafka_cluster
    produce(producer, "twin", SENTENCES[:500])
    counts = MemoryMap("twin")
    topo = Topology("twin", ackers=1)
    topo.spout("s", KafkaBatchSpout("twin", brokers, fields=["word", "i"], batch_size=64,
                                    each=split, ledger=tmp_path / "l.sqlite"))
    topo.persistent_aggregate("count", "s", ["word"], Count(), counts, parallelism=2)
    with InMemoryCluster(topo) as cluster:
        cluster.run_until_idle()
    assert Counter(counts.snapshot()) == Counter(w for s in SENTENCES[:500] for w in s.split())


# -- real processes, an instance SIGKILLed mid-run ---------------------------------------------

KILL_TXID = 3  # the batch in whose multi_put an aggregator kills itself
KILL_RECORD = 1000  # the record whose reading kills the spout (partition 0, offset 250: batch 4)


def kill_once(folder: str) -> None:
    """SIGKILL this process, the first time any process of the test gets here."""
    try:
        fd = os.open(os.path.join(folder, "killed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


class KillingMap(SQLiteMap):
    """A SQLite map whose first multi_put of batch KILL_TXID kills its process, ``where``
    = "before" or "after" the write."""

    def __init__(self, folder, where: str, *args) -> None:
        super().__init__(*args)
        self.folder, self.where = str(folder), where

    def multi_put(self, keys, values):
        at = values[0].txid == KILL_TXID
        if at and self.where == "before":
            kill_once(self.folder)
        super().multi_put(keys, values)
        if at and self.where == "after":
            kill_once(self.folder)


class KillingSplit:
    """``split``, which kills the spout the first time it reads record KILL_RECORD."""

    def __init__(self, folder) -> None:
        self.folder = str(folder)

    def __call__(self, values):
        if values[1] == KILL_RECORD:
            kill_once(self.folder)
        return split(values)


class KillingSpout(KafkaBatchSpout):
    """A Kafka batch spout that kills itself at the first ack of a marker of batch
    KILL_TXID: that task has committed the batch, the others may not have."""

    def __init__(self, folder, *args, **options) -> None:
        super().__init__(*args, **options)
        self.folder = str(folder)

    def ack(self, msg_id) -> None:
        if msg_id[0] == KILL_TXID:
            kill_once(self.folder)
        super().ack(msg_id)


def consumed_all(ledger: BatchLedger, ends: dict[int, int]) -> bool:
    last = ledger.last()
    return (last is not None and ledger.completed() == last[0]
            and {p: end for p, _s, end in last[1]} == ends)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("victim, where", [("count", "before"), ("count", "after"),
                                           ("sentences", "reading"), ("sentences", "acked")])
def test_a_kafka_word_count_is_exact_when_an_instance_is_killed(victim, where, kafka_cluster,
                                                                tmp_path):
    producer, brokers = kafka_cluster
    produce(producer, "sentences", SENTENCES)
    ends = dict.fromkeys(range(PARTITIONS), len(SENTENCES) // PARTITIONS)
    state = KillingMap(tmp_path, where if victim == "count" else "never",
                       tmp_path / "counts.db", "words")
    ledger_path = tmp_path / "ledger.sqlite"
    options = dict(fields=["word", "i"], batch_size=300, ledger=ledger_path)
    if where == "acked":
        spout = KillingSpout(tmp_path, "sentences", brokers, each=split, **options)
    else:
        each = KillingSplit(tmp_path) if where == "reading" else split
        spout = KafkaBatchSpout("sentences", brokers, each=each, **options)
    topo = Topology(f"tri-kafka-{victim}-{where}", ackers=1, message_timeout=3.0)
    topo.spout("sentences", spout)
    topo.persistent_aggregate("count", "sentences", ["word"], Count(), state, parallelism=2)
    ledger = BatchLedger(ledger_path)
    with topo.submit() as running:
        wait_for(lambda: consumed_all(ledger, ends), 180, "every record counted")
        restarts = sum(s.restarts for s in running.statistics() if s.component == victim)
        stats = read_statistics(running.run_dir, "count")
    batches = ledger.last()[0]
    ledger.close()
    assert (tmp_path / "killed").exists() and restarts >= 1
    assert Counter(state.snapshot()) == TRUTH
    assert all(set(s["map"]["puts_by_txid"].values()) <= {1} for s in stats), stats
    skipped = sum(s["batches"]["skipped_batches"] for s in stats)
    if where in ("after", "acked"):  # the replay found the batch applied there already
        assert skipped >= 1
    print(f"\n[trident kafka] killed {victim} ({where}); {batches} batches, {restarts} "
          f"restart(s), batch ends skipped as already applied: {skipped}")
