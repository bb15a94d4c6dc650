"""The stream manager's CPU per forwarded frame, with no spout or bolt code around it.

A real :class:`runtime.processes.stmgr.StreamManager` (its own process, its real loop; only the
master's handshake and the starting of instance processes are left out) sits between
two sockets of this process that play a spout task and a bolt task: the "spout" sends
frames of ``--batch`` encoded words to the stream manager's spout socket, the "bolt"
receives them from its task socket. The CPU time (user + system, all threads, psutil)
the stream manager's process spends is divided by the frames it forwarded.

Modes
    lockstep   one frame in flight: the spout sends, the bolt receives it, then the next.
               Every frame is a wake-up of its own, as in a real run, where frames come
               every millisecond or so (``batch_size`` at ~1 M tuples/s).
    flood      up to ``--window`` frames in flight: the most frames one wake-up can take.

Prints one line per mode (the workload is the mode), in ``_common.Measurement``'s shape::

    RESULT name=stmgr-hop workload=lockstep acking=off spouts=1 bolts=1 tuples=20000000
           seconds=1.234 tps=16207455 frames=20000 batch=1000 us_per_frame=23.1
           ns_per_tuple=23.1 main_us=15.2 io_us=7.9

``us_per_frame`` is the stream manager's CPU per frame, ``main_us`` its main thread's
part and ``io_us`` the rest (zmq's I/O thread); ``seconds`` and ``tps`` are wall-clock,
for reference only (this process's own sockets set the pace).

    PYTHONPATH=. python benchmarks/stmgr_hop.py --frames 20000
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time

import psutil
import zmq
from _common import WORD_SEED, Measurement, vocabulary, word_chooser

from runtime import Bolt, Spout, Topology, wire
from runtime.processes.routing import endpoint
from runtime.processes.stmgr import StreamManager

SECRET = b"b" * 32


class _Spout(Spout):
    outputs = ["word"]


class _Bolt(Bolt):
    outputs = []


class BenchStreamManager(StreamManager):
    """The real stream manager, wired from a plan given here instead of by a master,
    and with no instance processes of its own (this benchmark plays them)."""

    def __init__(self, boot: dict, plan_data: dict) -> None:
        super().__init__(boot)
        self.plan_data = plan_data

    def handshake(self) -> None:
        self._wire(wire.Welcome(plan=self.plan_data,
                                inbound={"0": self.router.inbound_endpoint()}))

    def start(self, child) -> None:
        """Nothing to start: the benchmark's sockets say hello as the instances would."""


def plan_data() -> dict:
    topology = Topology("stmgr-hop")
    topology.spout("words", _Spout)
    topology.bolt("count", _Bolt).shuffle_grouping("words")
    return topology.physical_plan(containers=1).to_data()


def serve(boot: dict, plan: dict, ready) -> None:
    """The stream manager's process: report its sockets, then run until SIGTERM."""
    import signal

    sm = BenchStreamManager(boot, plan)
    signal.signal(signal.SIGTERM, lambda *_: setattr(sm, "stopping", True))
    sm.handshake()
    ready.send({"spouts": endpoint(sm.router.spouts),
                "tasks": {t: endpoint(s) for t, s in sm.router.task_socks.items()}})
    sm.handshake = lambda: None  # already wired
    sm.run()


def dealer(zctx: zmq.Context, endpoint: str, task: int) -> zmq.Socket:
    sock = zctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"t%d" % task)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart([wire.data_header(wire.HELLO, 0, 0, task), b""])
    return sock


def body_of(batch: int) -> bytes:
    words, choose = vocabulary(), word_chooser(WORD_SEED)
    return wire.encode_batch([choose(words) for _ in range(batch)])  # one field: bare


def cpu_of(proc: psutil.Process) -> tuple[float, float]:
    """(main thread, all threads) CPU seconds of ``proc``."""
    threads = {t.id: t.user_time + t.system_time for t in proc.threads()}
    return threads.get(proc.pid, 0.0), sum(threads.values())


def forward(spout: zmq.Socket, bolt: zmq.Socket, header: bytes, body: bytes, frames: int,
            window: int) -> None:
    """Send ``frames`` frames with at most ``window`` in flight; check each one arrives."""
    sent = received = 0
    while received < frames:
        while sent < frames and sent - received < window:
            spout.send_multipart([header, body])
            sent += 1
        got = bolt.recv_multipart()
        if got[1] != body:
            raise RuntimeError("stmgr-hop: a frame arrived changed")
        received += 1


def measure(args, mode: str) -> str:
    window = 1 if mode == "lockstep" else args.window
    with tempfile.TemporaryDirectory(prefix="stmgr-hop-") as run_dir:
        zctx = zmq.Context()
        master = zctx.socket(zmq.ROUTER)  # takes the stream manager's sm_stats reports
        master.bind(f"ipc://{run_dir}/tm.sock")
        boot = {"secret": SECRET, "container": 0, "run_dir": run_dir,
                "tm": f"ipc://{run_dir}/tm.sock"}
        mp = multiprocessing.get_context("spawn")
        here, there = mp.Pipe()
        proc = mp.Process(target=serve, args=(boot, plan_data(), there), daemon=True)
        proc.start()
        try:
            return run_against(args, mode, window, zctx, here.recv(), psutil.Process(proc.pid))
        finally:
            proc.terminate()
            proc.join(10)
            master.close(linger=0)
            zctx.destroy(linger=0)


def run_against(args, mode, window, zctx, endpoints, proc) -> str:
    spout_task, bolt_task = 1, 2
    spout = dealer(zctx, endpoints["spouts"], spout_task)
    bolt = dealer(zctx, endpoints["tasks"][bolt_task], bolt_task)
    header = wire.data_header(wire.DATA, 0, bolt_task, spout_task)
    body = body_of(args.batch)
    forward(spout, bolt, header, body, 200, window)  # warm up, and wait for both hellos
    main0, all0 = cpu_of(proc)
    started = time.perf_counter()
    forward(spout, bolt, header, body, args.frames, window)
    seconds = time.perf_counter() - started
    main1, all1 = cpu_of(proc)
    per = 1e6 / args.frames  # seconds -> microseconds per frame
    extra = (("frames", args.frames), ("batch", args.batch),
             ("us_per_frame", f"{(all1 - all0) * per:.1f}"),
             ("ns_per_tuple", f"{(all1 - all0) * per * 1000 / args.batch:.1f}"),
             ("main_us", f"{(main1 - main0) * per:.1f}"),
             ("io_us", f"{(all1 - all0 - main1 + main0) * per:.1f}"))
    return Measurement("stmgr-hop", mode, False, 1, 1, args.frames * args.batch, seconds,
                       extra).line()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000, help="words per frame")
    parser.add_argument("--window", type=int, default=8, help="frames in flight (flood)")
    parser.add_argument("--mode", action="append", choices=("lockstep", "flood"))
    args = parser.parse_args()
    for mode in args.mode or ("lockstep", "flood"):
        print(measure(args, mode), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
