"""The warm spare's bookkeeping (runtime.processes.children.Spare), with stand-in
processes: when one is started, handed out, replaced; the real processes are exercised in
test_mp_supervision.py."""

from __future__ import annotations

import io

from runtime.processes.children import SPARE_AFTER, Spare


class Proc:
    """Stands in for a subprocess.Popen: alive until ``returncode`` is set."""

    def __init__(self) -> None:
        self.returncode = None
        self.stdin = io.BytesIO()  # closed when the spare is given up

    def poll(self):
        return self.returncode


def spare() -> tuple[Spare, list[Proc]]:
    made: list[Proc] = []
    return Spare(lambda: made.append(Proc()) or made[-1]), made


def test_a_spare_is_started_once_and_handed_out_once():
    s, made = spare()
    s.keep(0.0)
    s.keep(0.1)
    assert len(made) == 1
    assert s.take() is made[0]
    assert s.take() is None


def test_no_spare_is_started_while_an_instance_starts():
    s, made = spare()
    s.later(10.0)
    s.keep(10.0 + SPARE_AFTER / 2)
    assert made == []
    s.keep(10.0 + SPARE_AFTER)
    assert len(made) == 1


def test_a_spare_that_died_waiting_is_not_handed_out_and_is_replaced_later():
    s, made = spare()
    s.keep(0.0)
    made[0].returncode = -9
    s.keep(1.0)  # seen dead: none now (a spare that cannot start must not spin)
    assert len(made) == 1 and s.take() is None
    s.keep(1.0 + SPARE_AFTER)
    assert len(made) == 2 and s.take() is made[1]
    made[1].returncode = 1
    s.proc = made[1]
    assert s.take() is None


def test_stop_returns_the_waiting_spare_only():
    s, made = spare()
    assert s.stop() == []
    s.keep(0.0)
    assert s.stop() == [made[0]] and s.proc is None
