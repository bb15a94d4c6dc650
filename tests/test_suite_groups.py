"""The suite's own scheduling (tests/conftest.py), run by pytest-xdist as `make test` runs it.

A process holds one SparkContext, so the tests on the standalone cluster and those on the
bridge's local session each go to one worker, as the xdist groups ``spark-cluster`` and
``spark-local``. With pytest 9.2 and pytest-xdist 3.8 that grouping silently stopped: every
test was handed out alone (pytest-xdist issue 1386). This runs a small suite through the
conftest's real hooks on two workers and reads, from the verbose report, which worker ran
each test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

# The conftest of the small suite: the real hooks of tests/conftest.py, nothing else of it
# (its fixtures would start a real Spark cluster).
SMALL_CONFTEST = f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("suite_conftest", {str(CONFTEST)!r})
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
pytest_collection_modifyitems = _real.pytest_collection_modifyitems
pytest_collection_finish = _real.pytest_collection_finish
"""

SMALL_TESTS = """
import pytest

@pytest.fixture(scope="session")
def spark_cluster():
    return "cluster"

@pytest.fixture(scope="session")
def spark():
    return "local"

@pytest.fixture
def on_cluster(spark_cluster):  # a cluster test may ask for it through another fixture
    return spark_cluster

def test_plain_a(): pass
def test_plain_b(): pass
def test_plain_c(): pass
def test_plain_d(): pass
def test_local_1(spark): pass
def test_local_2(spark): pass
@pytest.mark.parametrize("n", [1, 2])
def test_local_n(spark, n): pass
def test_cluster_1(spark_cluster): pass
def test_cluster_2(on_cluster): pass
def test_cluster_3(spark_cluster): pass
"""

LINE = re.compile(r"^\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", re.M)


def run_small_suite(tmp_path: Path, *options: str) -> str:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the project's configuration
    (tmp_path / "conftest.py").write_text(SMALL_CONFTEST)
    (tmp_path / "test_small.py").write_text(SMALL_TESTS)
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                           *options], cwd=tmp_path, capture_output=True, text=True,
                          timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


# three interpreters start pytest (~8 s of CPU in all); 300 s is for a machine loaded 20 times over
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_each_spark_group_runs_on_one_worker_and_before_the_rest(tmp_path):
    out = run_small_suite(tmp_path, "-n", "2", "--dist", "loadgroup")
    ran = LINE.findall(out)
    assert len(ran) == 11, out  # 4 plain, 4 on the local session, 3 on the cluster
    workers, order = defaultdict(set), defaultdict(list)
    for worker, nodeid in ran:
        group = nodeid.rpartition("@")[2] if "@" in nodeid else None
        workers[group].add(worker)
        order[worker].append(group)
    names = {nodeid.split("::")[1] for _, nodeid in ran}
    assert {n for n in names if "@spark-local" in n} == {
        "test_local_1@spark-local", "test_local_2@spark-local",
        "test_local_n[1]@spark-local", "test_local_n[2]@spark-local"}
    assert {n for n in names if "@spark-cluster" in n} == {
        "test_cluster_1@spark-cluster", "test_cluster_2@spark-cluster",
        "test_cluster_3@spark-cluster"}
    assert len(workers["spark-local"]) == 1 and len(workers["spark-cluster"]) == 1
    assert workers["spark-local"] != workers["spark-cluster"]
    # each worker began with its group: the largest units of work are handed out first
    for worker, groups in order.items():
        assert groups[0] is not None, (worker, groups)


def test_without_xdist_the_test_ids_are_left_alone(tmp_path):
    out = run_small_suite(tmp_path)
    assert "@spark" not in out
    assert "test_small.py::test_local_n[2] PASSED" in out
