"""The recording's converter process: raw segments in, Parquet segments out.

One converter per recorded stream of a task (``python -m runtime.recording._convert``,
started by ``open_recorder`` with ``runtime._procs.spawn``), so the decoding, the Arrow
arrays and the Parquet writing (~250 ns of CPU a row in the emitting process, when it
did them itself) are off the emitting process's thread and GIL: that process only
appends bytes it had already encoded (``runtime/recording/_raw.py``).

The pipe protocol is lines. Instance -> converter (stdin, after the boot blob): the path
of each sealed raw segment. Converter -> instance (stdout): ``ready`` once pyarrow is
warm, ``done <rows> <path>`` after each segment (which frees a place in the backlog),
``error <message>`` for what the instance must report (rows that did not fit, a bad
segment). End of file on stdin (the recording closed, or the instance died): the
converter converts what is left of its own segments, including one a dead instance was
still writing, and exits. It does not ask to die with its parent, so that a SIGKILLed
instance's last segment is still converted; it dies with the topology as every process
of the master's process group does (the kill sweeps the group), and what a killed
converter had not reached is converted by the next reader (``convert_leftovers``).
"""

from __future__ import annotations

import collections
import gc
import logging
import os
import sys
import threading
import time

from runtime import _procs

from ._raw import BadSegment, convert_file, leftovers
from ._sink import SegmentSink, warm_up

log = logging.getLogger("tupleflow.recording")

BACKLOG = 8  # sealed segments that may wait for the converter before the tuple path waits
READY_SECONDS = 60.0  # how long open_recorder waits for a converter to warm up
DEAD_WRITER_SECONDS = 5.0  # how long, after end of input, a dead writer's lock may linger


class Converter:
    """The instance's handle on its converter process: submit sealed segments, read what
    it says on a thread of its own (blocked in ``readline``: it costs the tuple path
    nothing), and wait for it to finish on close."""

    def __init__(self, folder: str, task: int, fields: list[str], types: dict[str, str],
                 prefix: str, log_path: str, backlog: int | None = None) -> None:
        import subprocess  # here: every instance imports this module, few record

        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        boot = {"folder": folder, "task": task, "fields": fields, "types": types,
                "prefix": "." + prefix, "log": log_path}
        self.proc = _procs.spawn("runtime.recording._convert", boot, log_path=log_path,
                                 stdout=subprocess.PIPE)
        self.errors: collections.deque[str] = collections.deque(maxlen=100)
        self.written = self.files = 0  # rows and segments converted
        self.free = threading.Semaphore(backlog or BACKLOG)
        self.ready, self.ended = threading.Event(), threading.Event()
        self.gone = False  # said once that it is gone
        self.reader = threading.Thread(target=self._read, name=f"converter-{task}", daemon=True)
        self.reader.start()
        if not self.ready.wait(READY_SECONDS) or self.ended.is_set():
            self.errors.append(f"the recording converter of task {task} did not start "
                               f"(see {log_path}); raw segments are kept for readers")

    def _read(self) -> None:
        for line in self.proc.stdout:
            word, _, rest = line.decode("utf-8", "replace").rstrip("\n").partition(" ")
            if word == "ready":
                self.ready.set()
            elif word == "done":  # 0 rows: a reader had converted it, or it was empty
                rows = int(rest.partition(" ")[0])
                self.written, self.files = self.written + rows, self.files + (rows > 0)
                self.free.release()
            elif word == "error":
                self.errors.append(rest)
        self.ended.set()
        self.ready.set()

    def submit(self, path: str) -> None:
        """Hand a sealed segment over; waits while the backlog is full (the converter
        behind), unless the converter is gone (the raw file then waits for a reader)."""
        while not self.free.acquire(timeout=0.5):
            if self.ended.is_set():
                break
        try:
            if self.ended.is_set():
                raise BrokenPipeError
            self.proc.stdin.write(path.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            if not self.gone:
                self.gone = True
                self.errors.append(f"the recording converter (pid {self.proc.pid}) is gone: "
                                   f"{path} and the segments after it wait for a reader "
                                   "(runtime.recording converts them)")

    def close(self) -> None:
        """End of input: wait for the converter to convert what is left and exit."""
        _procs.close_pipe(self.proc)
        self.proc.wait()
        self.reader.join()


# -- the process -------------------------------------------------------------------------
def main() -> int:
    boot = _procs.read_boot()
    _procs.setup_logging(boot["log"])
    gc.disable()  # it makes lists of values, never cycles: no collector passes over them
    folder, fields = boot["folder"], list(boot["fields"])
    sink = SegmentSink(folder, boot["task"], fields, dict(boot["types"]))
    warm_up(boot["task"])
    say("ready")
    warm = time.process_time()
    for line in sys.stdin.buffer:
        convert(sink, line.decode().strip(), wait=True)
    for path in leftovers(folder, boot["prefix"]):  # a dead instance's open segment
        convert(sink, path, wait=DEAD_WRITER_SECONDS)
    log.info("converter done: rows=%d cpu_seconds=%.6f (after warm-up)",
             sink.written + sink.rejected, time.process_time() - warm)
    return 0


def convert(sink, path: str, *, wait: bool | float) -> None:
    """Convert one segment and say so (a failure is said, and the raw file kept)."""
    started, before = time.monotonic(), sink.written + sink.rejected
    try:
        convert_file(path, sink, wait=wait)
    except BadSegment as exc:
        sink.errors.append(f"raw recording segment {path} kept as it is: {exc}")
    except Exception as exc:  # the disk, say: keep the raw file, say it, go on
        log.exception("could not convert %s", path)
        sink.errors.append(f"could not convert {path}: {exc}")
    while sink.errors:
        say("error " + sink.errors.popleft().replace("\n", " "))
    rows = sink.written + sink.rejected - before
    log.info("converted %s: %d rows in %.3f s", path, rows, time.monotonic() - started)
    say(f"done {rows} {path}")


def say(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # the instance is gone: go on converting for the readers
        pass


if __name__ == "__main__":
    sys.exit(main())
