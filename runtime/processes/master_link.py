"""The submitter's end of the control channel to a topology master: one DEALER socket,
every message sealed with the topology's secret, one question at a time.

A master that dies (not a clean stop) is replaced: a watcher thread, or the question
that finds it dead, starts an adopting master (``relaunch``), which binds the same
address (docs/reliability.md, "A master that may die")."""

from __future__ import annotations

import contextlib
import logging
import secrets
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from runtime import _procs, wire

log = logging.getLogger("tupleflow.client")

REVIVALS = 3  # new masters at most per REVIVAL_WINDOW: a master that keeps dying stays dead
REVIVAL_WINDOW = 60.0  # seconds
# questions a new master is not asked again when the master dies answering them: a
# rebalance left half done is settled by the new master on one plan (adoption.decide)
NOT_ASKED_AGAIN = (wire.AskRebalance,)


class MasterReplaced(RuntimeError):
    """The master died while it answered a question that is not asked twice (a
    rebalance); a new master runs the topology, on the plan its containers report."""


class TopologyDead(RuntimeError):
    """The topology master is gone (killed, or crashed): the topology is not running."""


class MasterLink:
    """Owns the socket to the master, the master's process handle and whether this end
    was closed. ``secure`` turns a fresh DEALER into the kind of client the master
    accepts (size-limited on loopback, a CURVE client on Spark)."""

    def __init__(self, name: str, endpoint: str, secret: bytes, process: subprocess.Popen,
                 secure: Callable[[Any], Any],
                 relaunch: Callable[[int], subprocess.Popen] | None = None) -> None:
        import zmq  # here, not at the top: importing runtime to define a topology needs none

        self.name, self.secret, self.process = name, secret, process
        self.zmq, self.zctx = zmq, zmq.Context()
        self.lock = threading.Lock()
        self.ids = 0
        self.closed = False
        self.sock = secure(self.zctx.socket(zmq.DEALER))
        self.sock.setsockopt(zmq.IDENTITY, b"c" + secrets.token_hex(8).encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        # replacing a dead master: relaunch(n) starts the n-th new one; each master leads
        # its own process group, and what a dead one started stays in its group
        self.relaunch, self.restarts = relaunch, 0
        self.given_up: str | None = None  # why a dead master was not replaced
        self.groups = [process.pid]
        self.revived: deque[float] = deque(maxlen=REVIVALS)
        if relaunch is not None:
            threading.Thread(target=self._watch, name=f"master-watch-{name}",
                             daemon=True).start()

    @property
    def alive(self) -> bool:
        """Whether the topology runs: its master process does, or a dead one will be
        replaced (it did not stop cleanly, and this end has not given up)."""
        code = self._code()
        return code is None or self._revivable(code)

    def _code(self) -> int | None:
        """The master's exit code, None while it runs. ``Popen.poll`` answers None while
        another thread waits on the process (the watcher, ``_watch``, holds its waitpid
        lock), and so also in the moment after the process ended before that thread has
        read its code (a whole scheduling slice on a loaded machine: CI saw ``alive``
        true after every process had exited). A master found ended, exited or a zombie,
        is waited for, which lasts that moment. Only ``alive`` asks this (a read of
        /proc): a question finds a dead master by its own wait for the answer."""
        code = self.process.poll()
        if code is None and _ended(self.process.pid):
            code = self.process.wait()
        return code

    def _revivable(self, code: int | None) -> bool:
        return (self.relaunch is not None and not self.closed and not self.given_up
                and code is not None and code != 0)

    def ask(self, question: type[wire.Question], timeout: float, **fields: Any) -> Any:
        """Ask the master one question (a record of :mod:`runtime.wire`, made here with
        the next id) and return the value of its reply; RuntimeError if it refused. A
        master found dead is replaced first (not for a kill) and asked again."""
        with self.lock:
            while True:
                if question is not wire.AskKill and self._revivable(self.process.poll()):
                    self._revive()
                deadline = time.monotonic() + timeout  # a new master may have taken a while
                if self.closed or self.process.poll() is not None:
                    raise TopologyDead(self.given_up or f"topology {self.name!r} is not running")
                self.ids += 1
                msg = question(id=self.ids, **fields)
                self.sock.send_multipart(wire.seal(self.secret, msg))
                with contextlib.suppress(_Died):
                    return self._await_reply(msg, deadline)
                if question is wire.AskKill or not self._revivable(self.process.poll()):
                    raise TopologyDead(f"topology {self.name!r} died")
                if question in NOT_ASKED_AGAIN:
                    self._revive()
                    raise MasterReplaced(
                        f"topology {self.name!r}: the master died while answering "
                        f"{question.KIND!r}; a new one (pid {self.process.pid}) runs the "
                        "topology on the plan the containers report (the one from before, "
                        "unless the rebalance had switched: see the 'rebalance_cut_short' "
                        "event); not asked again")

    def _watch(self) -> None:
        """Replace the master as soon as it dies, asked or not (the data flow needs no
        master, but restarts, heartbeats and statistics do)."""
        while True:
            proc = self.process
            proc.wait()
            with self.lock:
                if self.closed or (proc is self.process and not self._revivable(proc.returncode)):
                    return
                if proc is self.process:
                    with contextlib.suppress(TopologyDead):
                        self._revive()

    def _revive(self) -> None:
        """Start a master that adopts the running processes (the lock is held)."""
        now = time.monotonic()
        if len(self.revived) == REVIVALS and now - self.revived[0] < REVIVAL_WINDOW:
            self.given_up = (f"topology {self.name!r}: its master died {REVIVALS + 1} times "
                             f"in {REVIVAL_WINDOW:.0f} s; not replaced again")
            raise TopologyDead(self.given_up)
        self.revived.append(now)
        log.warning("topology %r: the master (pid %d) died with code %s; starting a new one",
                    self.name, self.process.pid, self.process.returncode)
        try:
            proc = self.relaunch(self.restarts + 1)
        except Exception as exc:
            self.given_up = (f"topology {self.name!r}: its master died and a new one did "
                             f"not start: {exc}")
            raise TopologyDead(self.given_up) from exc
        _procs.close_pipe(self.process)
        self.process, self.restarts = proc, self.restarts + 1
        self.groups.append(proc.pid)

    def _await_reply(self, question: wire.Question, deadline: float) -> Any:
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(int(min(left, 0.1) * 1000) + 1):
                if self.process.poll() is not None:
                    raise _Died()
                continue
            try:
                msg = wire.unseal(self.secret, self.sock.recv_multipart())
            except wire.WireError as exc:  # not from our master, or malformed: not an answer
                log.warning("dropped a control message: %s", exc)
                continue
            if isinstance(msg, wire.Reply) and msg.id == question.id:
                if not msg.ok:
                    raise RuntimeError(msg.value)
                return msg.value
        raise TimeoutError(f"topology {self.name!r}: no answer to {question.KIND!r}")

    def drop(self) -> None:
        """Close this end's socket only, the master left running (a side link's end:
        :meth:`RunningTopology.rebalance` asks its long question on one of its own)."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.sock.close(linger=0)
                self.zctx.term()

    def close(self, timeout: float) -> bool:
        """Wait for the master to end, sweep its process group, close the socket; False
        if this end was closed already. Safe while another thread asks: the socket is
        closed under the lock, and that thread's next question raises TopologyDead."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout)
            self._sweep()
            _procs.close_pipe(self.process)
            self.sock.close(linger=0)
            self.zctx.term()
            return True

    def _sweep(self) -> None:
        """Whatever the masters (this one, and the dead ones it replaced) left behind in
        their process groups goes too."""
        for group in self.groups:
            _procs.kill_group(group, timeout=1.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(1.0)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie, not yet waited for, has)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class _Died(Exception):
    """The master died while a question waited for its answer."""
