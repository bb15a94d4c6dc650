"""A real Spark standalone cluster on loopback: one master and one worker, from the
installed pyspark's own ``bin/spark-class``, on free ports, in a folder of the caller's.

Used by the remote-runtime tests (a session fixture in tests/conftest.py) and by
``benchmarks/remote.py``. Readiness is read from the master's JSON status page
(``/json/``): the cluster is ready when the worker is registered and ALIVE.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

START_TIMEOUT = 120.0  # a JVM cold start on a loaded 2-core machine takes a while


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkCluster:
    """``master_url`` (``spark://127.0.0.1:PORT``) once started; ``stop()`` ends the JVMs.

    By default one worker beside the master on loopback. ``workers`` may instead list
    ``(network namespace, address)`` pairs: each worker then runs inside its namespace
    (``ip netns exec``, root only), a "host" of its own, and the master on ``host``.
    """

    def __init__(self, workdir: Path, *, cores: int = 2, memory: str = "1g",
                 host: str = "127.0.0.1",
                 workers: tuple[tuple[str | None, str], ...] = ((None, "127.0.0.1"),)) -> None:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise RuntimeError("Java 17 is needed for Spark: install openjdk-17-jre-headless "
                               "(`make test` does) or set JAVA_HOME")
        self.workdir, self.host, self.workers = Path(workdir), host, len(workers)
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://{host}:{self.port}"
        env = dict(os.environ, SPARK_LOCAL_IP=host, SPARK_HOME=str(spark_home()),
                   SPARK_LOG_DIR=str(self.workdir / "logs"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        self._start(env, "org.apache.spark.deploy.master.Master", "master",
                    "--host", host, "--port", str(self.port),
                    "--webui-port", str(self.ui_port))
        for i, (netns, address) in enumerate(workers):
            work = str(self.workdir / ("work" if i == 0 else f"work-{i}"))
            self._start(dict(env, SPARK_LOCAL_IP=address, SPARK_WORKER_DIR=work),
                        "org.apache.spark.deploy.worker.Worker",
                        "worker" if i == 0 else f"worker-{i}",
                        "--host", address, "--webui-port", str(free_port()),
                        "--cores", str(cores), "--memory", memory,
                        "--work-dir", work, self.master_url, netns=netns)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _start(self, env: dict, main: str, name: str, *args: str,
               netns: str | None = None) -> None:
        log = open(self.workdir / "logs" / f"{name}.out", "wb")  # noqa: SIM115 - kept with the proc
        cmd = [str(spark_home() / "bin" / "spark-class"), main, *args]
        if netns is not None:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))
        log.close()

    def status(self) -> dict:
        url = f"http://{self.host}:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=2) as answer:
            return json.load(answer)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited with {proc.returncode}; see "
                                       f"{self.workdir / 'logs'}")
            try:
                if self.status().get("aliveworkers", 0) >= self.workers:
                    return
            except (OSError, ValueError):
                # its web UI is not up yet, or answers with an HTML page instead of JSON
                # while the master is not yet the elected leader (seen on a loaded machine)
                pass
            time.sleep(0.25)  # polling the cluster's own status page
        raise RuntimeError(f"the Spark cluster was not ready in {START_TIMEOUT:.0f} s; see "
                           f"{self.workdir / 'logs'}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 15)
                except ProcessLookupError:
                    continue
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
