"""The ``%%topology`` / ``%topology`` magics, through a real IPython shell."""

from __future__ import annotations

import time

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

import kernel_ext
from runtime import Topology, TopologyDead
from runtime.model.plan import PhysicalPlan
from runtime.processes import scheduler as _scheduler
from workbench import TopologyView

SETUP = """
from runtime import Spout
from runtime.testing import ListSpout, ListSink, Doubler
class Numbers(Spout):
    outputs = ["n"]
nums = ListSpout([[1], [2], [3]], fields=["n"])
"""
CELL = """
# a comment
src:    Numbers * 2
double: Doubler * 2   <- src fields(n)
sink:   ListSink      <- double global
"""


def ipython() -> InteractiveShell:
    """The process's one shell; its history stays in memory."""
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    return InteractiveShell.instance(config=config)


@pytest.fixture
def shell():
    ip = ipython()
    ip.run_line_magic("load_ext", "kernel_ext")
    ip.run_cell(SETUP)
    yield ip
    ip.run_line_magic("unload_ext", "kernel_ext")


def magics(ip) -> kernel_ext.TopologyMagics:
    return kernel_ext._loaded[id(ip)]


def test_loading_registers_the_line_and_cell_magic(shell):
    found = shell.magics_manager.lsmagic()
    assert "topology" in found["line"] and "topology" in found["cell"]


def test_a_cell_binds_the_topology_and_shows_its_graph(shell):
    with capture_output() as out:
        assert shell.run_cell_magic("topology", "demo containers=2 ackers=1", CELL) is None
    topo = shell.user_ns["demo"]
    assert isinstance(topo, Topology) and list(topo.components) == ["src", "double", "sink"]
    assert magics(shell).parsed["demo"].containers == 2
    (shown,) = out.outputs
    assert "double" in shown.data["image/svg+xml"] and "fields(n)" in shown.data["text/html"]
    assert out.stderr == ""


def test_the_view_renders_within_the_target_time(shell):
    start = time.perf_counter()
    with capture_output():
        shell.run_cell_magic("topology", "five", "a: nums\nb: Doubler <- a\nc: Doubler <- b\n"
                                                 "d: Doubler <- c, a all\ne: ListSink <- d")
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(("header", "body", "where", "problem"), [
    ("bad", "src: Numbrs", "line 2", "did you mean `Numbers`?"),
    ("bad", "src: Numbers\nsink: ListSink <- scr", "line 3", "did you mean `src`?"),
    ("bad", "src: Numbers\nsink: ListSink <- src fields(m)", "line 3", "has no field `m`"),
    ("bad", "src: Numbers\nsink: ListSink <- src shufle", "line 3", "shuffle"),
    ("bad", "src: Numbers * 0", "line 2", ""),
    ("bad", "src: Numbers <- src", "line 2", "only bolts take inputs"),
    ("bad", "src: Numbers\nsink: ListSink", "line 3", "has no inputs"),
    ("bad", "sink: ListSink <- sink", "line 1", "has no spout"),
    ("bad ackrs=1", "src: Numbers", "line 1", "did you mean `ackers`?"),
    ("bad ackers=-1", "src: Numbers", "line 1", "`ackers` must be"),
    ("bad containers=0", "src: Numbers", "line 1", "`containers` must be"),
    ("bad", "src: Numbers tick=1.2.3", "line 2", "not a Python literal"),
    ("bad", "src: Numbers tick=oops!", "line 2", "unexpected character"),
    ("bad", "src: Numbers\nsrc: Numbers", "line 3", "already declared on line 2"),
    ("bad", "src Numbers", "line 2", ""),
    ("", "src: Numbers", "line 1", ""),
])
def test_every_syntax_error_prints_the_caret_and_binds_nothing(shell, header, body, where,
                                                                problem):
    shell.user_ns.pop("bad", None)
    with capture_output() as out:
        assert shell.run_cell_magic("topology", header, body) is None
    assert out.stderr.startswith(where + ":") and problem in out.stderr
    assert "^" in out.stderr and "Traceback" not in out.stderr
    assert "bad" not in shell.user_ns and out.outputs == [] and out.stdout == ""


def test_through_run_cell_too_no_traceback(shell):
    shell.user_ns.pop("oops", None)
    with capture_output() as out:
        result = shell.run_cell("%%topology oops\nsrc: Numbrs\n")
    assert result.success and "did you mean `Numbers`?" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr and "oops" not in shell.user_ns


@pytest.mark.parametrize(("line", "message"), [
    ("", "give a subcommand"),
    ("sumbit demo", "did you mean `submit`?"),
    ("stauts demo", "did you mean `status`?"),
    ("submit nothing_here", "is not a topology"),
    ("status", "usage: %topology status NAME"),
    ("logs demo src", "usage: %topology logs NAME COMPONENT TASK"),
    ("list extra", "usage: %topology list"),
    ("kill demo", "no submitted topology `demo`"),
    ("submit demo containers", "usage: %topology submit"),
    ("submit 'demo", "No closing quotation"),
])
def test_usage_errors(shell, line, message):
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("?", r"\?")):
        shell.run_line_magic("topology", line)


# -- the line magics against a fake handle (fast); the real thing is the slow test below ------
# (the fake has no metrics: these submit with --no-dashboard; tests/kernel_ext/
# test_dashboard_magics.py drives the dashboard, tap and kill against a real topology)
class FakeRunning:
    """Records the calls the magics make; ``dead`` makes every question fail like a dead one."""

    def __init__(self, topology, containers, config):
        self.name, self.containers, self.config = topology.name, containers, config
        self.plan = PhysicalPlan.pack(topology, containers, {})
        self.run_dir, self.alive, self.calls, self.dead = "/tmp/fake", True, [], False

    def _call(self, what, *args, result=None):
        if self.dead:
            raise TopologyDead(f"topology {self.name!r} died")
        self.calls.append((what, *args))
        return result

    def status(self):
        return self._call("status", result={"state": "running", "paused": False})

    def exceptions(self):
        return self._call("exceptions", result=[{"component": "double", "count": 3,
                                                 "tasks": [1], "error": "ZeroDivisionError",
                                                 "traceback": "Traceback ..."}])

    def logs(self, component, task):
        return self._call("logs", component, task, result="a log line")

    def explain(self):
        from runtime.diagnosis import Finding

        return self._call("explain", result=[Finding(
            "double", 2, "slow_bolt", {"capacity": 0.97}, "Raise its parallelism.", 0.97)])

    def pause(self):
        return self._call("pause", result=True)

    def resume(self):
        return self._call("resume", result=False)

    def set_max_spout_pending(self, value, component=None):
        return self._call("tune", value, component, result=[0, 1])

    def set_trace(self, rate):
        return self._call("trace", rate, result=[0])

    def rebalance(self, parallelism, containers=None):
        return self._call("rebalance", parallelism, containers, result={
            "seconds": 1.5, "paused_seconds": 1.25, "parallelism": parallelism,
            "containers": containers or 1})

    def kill(self):
        self.calls.append(("kill",))
        self.alive = False


@pytest.fixture
def fake_submit(monkeypatch):
    handles = []

    def submit(topology, *, scheduler, containers, config):
        handles.append(FakeRunning(topology, containers, config))
        return handles[-1]

    monkeypatch.setattr(_scheduler, "submit", submit)
    return handles


def test_submit_uses_the_cells_containers_and_binds_the_handle(shell, fake_submit):
    with capture_output():
        shell.run_cell_magic("topology", "demo containers=2", CELL)
    running = shell.run_line_magic("topology", "submit demo max_spout_pending=10 --no-dashboard")
    assert running is shell.user_ns["demo_running"] is fake_submit[0]
    assert running.containers == 2
    assert running.config == {"detached": False, "max_spout_pending": 10}
    with pytest.raises(UsageError, match="already running"):
        shell.run_line_magic("topology", "submit demo")


def test_every_subcommand_is_one_call(shell, fake_submit):
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")
    with capture_output() as out:
        assert shell.run_line_magic("topology", "status demo")["state"] == "running"
        for line in ["list", "plan demo", "exceptions demo", "explain demo", "logs demo double 1",
                     "pause demo", "resume demo", "tune demo auto", "tune demo none src",
                     "tune demo 50"]:
            assert shell.run_line_magic("topology", line) is None
    assert fake_submit[0].calls == [
        ("status",), ("status",), ("exceptions",), ("explain",), ("logs", "double", 1),
        ("pause",), ("resume",), ("tune", "auto", None), ("tune", None, "src"),
        ("tune", 50, None)]
    for text in ["demo: running", "container 0", "double ×3",
                 "1. slow_bolt at double[2]: capacity 0.97. Raise its parallelism.",
                 "a log line", "paused demo",
                 "demo was not paused", "max_spout_pending=50 sent to src[1]"]:
        assert text in out.stdout
    with pytest.raises(UsageError, match="auto, none or an integer"):
        shell.run_line_magic("topology", "tune demo lots")


@pytest.mark.parametrize("text", ["auto", "Auto", "none", "NONE", "50", "' 50 '", "0", "-1",
                                  "lots", "1.5", "True", "''"])
def test_tune_and_the_dashboards_box_read_the_same_text_the_same_way(shell, fake_submit, text):
    from workbench._dashboard import parse_pending

    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")
    word = text.strip("'")  # what shlex makes of the magic's argument
    try:
        expected = parse_pending(word)
    except ValueError as err:
        with pytest.raises(UsageError) as refused:
            shell.run_line_magic("topology", f"tune demo {text}")
        assert str(refused.value) == f"%topology tune: {err}"
        assert fake_submit[0].calls == []
    else:
        with capture_output():
            shell.run_line_magic("topology", f"tune demo {text}")
        assert fake_submit[0].calls == [("tune", expected, None)]


def test_a_dead_topology_is_reported_never_raised(shell, fake_submit):
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")
    fake_submit[0].dead = True
    with capture_output() as out:
        for line in ["status demo", "exceptions demo", "pause demo", "tune demo 5"]:
            assert shell.run_line_magic("topology", line) is None
    assert out.stderr.count("TopologyDead") == 4


def test_unloading_kills_attached_topologies_not_detached_ones(fake_submit):
    ip = ipython()
    ip.run_line_magic("load_ext", "kernel_ext")
    ip.run_cell(SETUP)
    with capture_output():
        ip.run_cell_magic("topology", "demo", CELL)
        ip.run_cell_magic("topology", "kept", CELL)
    ip.run_line_magic("topology", "submit demo --no-dashboard")
    ip.run_line_magic("topology", "submit kept --detached --no-dashboard")
    assert fake_submit[1].config == {"detached": True}
    ip.run_line_magic("unload_ext", "kernel_ext")
    assert ("kill",) in fake_submit[0].calls and ("kill",) not in fake_submit[1].calls
    assert "topology" not in ip.magics_manager.lsmagic()["line"]


def submit_demo(shell) -> None:
    """Define ``demo`` from the cell and submit it without a dashboard."""
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")


def test_kill_forgets_the_topology(shell, fake_submit):
    submit_demo(shell)
    with capture_output() as out:
        shell.run_line_magic("topology", "kill demo")
        shell.run_line_magic("topology", "list")
    assert ("kill",) in fake_submit[0].calls
    assert "killed demo" in out.stdout and "no topologies submitted" in out.stdout


@pytest.mark.slow
def test_submit_status_list_kill_for_real(shell, tupleflow_processes):
    with capture_output():
        shell.run_cell_magic("topology", "real", "src: nums\ndouble: Doubler <- src\n"
                                                 "sink: ListSink <- double")
    running = shell.run_line_magic("topology", "submit real")
    assert running is shell.user_ns["real_running"]
    deadline = time.monotonic() + 20
    while shell.run_line_magic("topology", "status real")["state"] != "running":
        assert time.monotonic() < deadline, "the topology did not start in 20 s"
        time.sleep(0.05)
    with capture_output() as out:
        shell.run_line_magic("topology", "list")
        shell.run_line_magic("topology", "plan real")
        shell.run_line_magic("topology", "kill real")
    assert "real: running" in out.stdout and "container 0" in out.stdout
    assert not running.alive
    again = shell.run_line_magic("topology", "submit real")  # killed: may be submitted again
    shell.run_line_magic("unload_ext", "kernel_ext")
    assert not again.alive and tupleflow_processes() == []
    shell.run_line_magic("load_ext", "kernel_ext")  # for the fixture's own unload


@pytest.mark.slow
def test_attach_takes_a_detached_topology_into_this_kernel_for_real(shell,
                                                                    tupleflow_processes):
    from runtime.testing import Doubler, ListSink, ListSpout

    topo = Topology("roaming")
    topo.spout("src", ListSpout([[i] for i in range(10)], fields=["n"]))
    topo.bolt("double", Doubler).shuffle_grouping("src")
    topo.bolt("sink", ListSink).shuffle_grouping("double")
    submitted = topo.submit(detached=True)  # as another kernel would have
    submitted.wait_active(timeout=60)
    running = shell.run_line_magic("topology", "attach roaming --no-dashboard")
    assert running is shell.user_ns["roaming_running"]
    assert running.master_pid == submitted.master_pid
    with capture_output() as out:
        assert shell.run_line_magic("topology", "status roaming")["state"] == "running"
        shell.run_line_magic("topology", "list")
        shell.run_line_magic("topology", "kill roaming")
    assert "roaming: running (detached)" in out.stdout and "killed roaming" in out.stdout
    assert not running.alive and not submitted.alive
    submitted.kill()
    assert tupleflow_processes() == []
    with pytest.raises(UsageError, match="usage: %topology attach"):
        shell.run_line_magic("topology", "attach roaming --now")


def test_view_is_the_workbench_view(shell):
    with capture_output() as out:
        shell.run_cell_magic("topology", "demo", CELL)
    assert out.outputs[0].data["image/svg+xml"] == TopologyView(shell.user_ns["demo"])._repr_svg_()


def test_list_tells_a_killed_topology_from_a_crashed_one(shell, fake_submit):
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")
    fake_submit[0].alive, fake_submit[0].exit_code = False, 1
    with capture_output() as out:
        shell.run_line_magic("topology", "list")
    assert "demo: crashed (its master exited with code 1)" in out.stdout
    fake_submit[0].exit_code = 0  # a clean stop: killed from somewhere
    with capture_output() as out:
        shell.run_line_magic("topology", "list")
    assert "demo: killed" in out.stdout


def test_trace_sets_the_rate_through_the_one_parser(shell, fake_submit):
    with capture_output():
        shell.run_cell_magic("topology", "demo", CELL)
    shell.run_line_magic("topology", "submit demo --no-dashboard")
    with capture_output() as out:
        assert shell.run_line_magic("topology", "trace demo 0.01") is None
        assert shell.run_line_magic("topology", "trace demo 0") is None
    assert fake_submit[0].calls[-2:] == [("trace", 0.01), ("trace", 0.0)]
    assert "trace=0.01 sent to 1 task(s) of demo" in out.stdout
    assert "(tracing off)" in out.stdout
    for bad in ("1.5", "-0.1", "lots"):
        with pytest.raises(UsageError, match="trace must be a fraction 0.0..1.0"):
            shell.run_line_magic("topology", f"trace demo {bad}")


def test_rebalance_is_one_call_with_integer_parallelism(shell, fake_submit):
    submit_demo(shell)
    with capture_output() as out:
        shell.run_line_magic("topology", "rebalance demo double=4")
        shell.run_line_magic("topology", "rebalance demo double=1 containers=3")
    assert fake_submit[0].calls == [("rebalance", {"double": 4}, None),
                                    ("rebalance", {"double": 1}, 3)]
    assert "rebalanced demo in 1.50 s (spouts paused 1.25 s): {'double': 4}" in out.stdout
    for line in ["rebalance demo", "rebalance demo containers=2", "rebalance demo double"]:
        with pytest.raises(UsageError, match="usage: %topology rebalance"):
            shell.run_line_magic("topology", line)
