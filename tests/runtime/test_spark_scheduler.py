"""Tier 1: the Spark scheduler's options and bookkeeping, without Spark.

The real thing (a loopback Spark cluster) is tests/runtime/test_remote_spark.py.
"""

from __future__ import annotations

import os

import pytest

from runtime import Topology
from runtime.processes.curve import TopologyKeys
from runtime.processes.spark_scheduler import (
    CONTAINER_ENV,
    ContainerSupervisor,
    remote_options,
    task_boot,
)
from runtime.testing import ListSink, ListSpout


def topology() -> Topology:
    topo = Topology("spark-options")
    topo.spout("numbers", ListSpout([[1]]))
    topo.bolt("sink", ListSink).shuffle_grouping("numbers")
    return topo


@pytest.mark.parametrize(("options", "error", "says"), [
    ({}, ValueError, "needs master="),
    ({"master": "spark://h:7077", "detached": True}, ValueError,
     "detached=True is not supported: this process is the Spark driver"),
    ({"master": 42}, TypeError, "not int"),
    ({"master": "spark://h:7077", "bind_host": "0.0.0.0"}, ValueError, "advertise_host"),
])
def test_bad_options_are_refused_before_anything_starts(topology_guard, options, error, says):
    with pytest.raises(error, match=says):
        topology().submit(scheduler="spark", **options)
    assert os.listdir(topology_guard) == []  # no run directory, so no master


def test_the_spark_options_do_not_reach_the_plan():
    config = {"master": "spark://h:7077", "bind_host": "0.0.0.0",
              "advertise_host": "10.0.0.5", "ackers": 1}
    assert remote_options(config) == {"master": "spark://h:7077", "bind_host": "0.0.0.0",
                                      "advertise_host": "10.0.0.5"}
    assert config == {"ackers": 1}


def test_a_container_task_carries_keys_and_an_address_but_no_user_code(topology_guard):
    keys = TopologyKeys.generate()
    boot = task_boot("t", b"s" * 32, keys, "tcp://127.0.0.1:5000")
    assert set(boot) == {"name", "secret", "tm", "keys", "sys_path", "pythonpath",
                         "run_root"}
    assert boot["run_root"] == topology_guard  # so the process guard sees the containers
    # an executor imports runtime from there, wherever Spark starts its Python
    assert os.path.isfile(os.path.join(boot["pythonpath"], "runtime", "__init__.py"))

    supervisor = ContainerSupervisor({**boot, "round": 2}, container=1, attempt=1,
                                     host="127.0.0.1")
    supervisor.restarts = 3
    sm = supervisor.sm_boot()
    assert sm["generation"] == 2_001_003  # (round, Spark attempt, restarts): always higher
    assert sm["inbound_port"] == supervisor.port and sm["bind_host"] == "127.0.0.1"
    assert "bundle" not in sm and "plan" not in sm
    env = supervisor.env()
    assert env[CONTAINER_ENV] == "1" and env["TUPLEFLOW_RUN_ROOT"] == topology_guard
    assert supervisor.run_dir.startswith(topology_guard)


def test_reading_a_spark_topologys_recordings_needs_a_record_dir():
    from types import SimpleNamespace

    from runtime.processes.spark_scheduler import SparkTopology

    without = SimpleNamespace(name="t", plan=SimpleNamespace(config={}))
    with pytest.raises(ValueError, match="written on the executors' hosts.*record_dir="):
        SparkTopology.record_base.fget(without)
    shared = SimpleNamespace(name="t", plan=SimpleNamespace(config={"record_dir": "/srv/r/x"}))
    assert SparkTopology.record_base.fget(shared) == "/srv/r/x"
