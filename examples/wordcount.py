"""The classic word count: sentences -> split into words -> count per word.

Run it with ``make demo``, or ``python -m runtime run examples/wordcount.py:topology``.
The fields grouping on "word" sends every occurrence of a word to the same counting
task, so each task's counts are exact for the words it owns.
"""

import random

from runtime import BasicBolt, Spout, Topology

SENTENCES = [
    "a stream is an unbounded sequence of tuples",
    "spouts are sources of streams and bolts process them",
    "a grouping decides which task receives each tuple",
    "the fields grouping sends equal keys to the same task",
    "every instance runs in a process of its own",
    "the stream manager forwards batches without reading them",
]


class RandomSentence(Spout):
    outputs = ["sentence"]

    def open(self, config, context):
        self.choose = random.Random(context.task_index).choice

    def next_tuple(self):
        self.emit([self.choose(SENTENCES)])


class SplitSentence(BasicBolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup["sentence"].split():
            self.emit([word])


class WordCount(BasicBolt):
    outputs = ["word", "count"]

    def prepare(self, config, context):
        self.counts = {}

    def process(self, tup):
        word = tup["word"]
        self.counts[word] = count = self.counts.get(word, 0) + 1
        self.emit([word, count])


topology = Topology("wordcount")
topology.spout("sentences", RandomSentence, parallelism=1)
topology.bolt("split", SplitSentence, parallelism=2).shuffle_grouping("sentences")
topology.bolt("count", WordCount, parallelism=2).fields_grouping("split", ["word"])
