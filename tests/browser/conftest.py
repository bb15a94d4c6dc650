"""Fixtures for the real-browser tests: a JupyterLab server, and a page of Debian's Chromium
driven by Playwright.

The server runs ``sys.executable -m jupyterlab`` on a free loopback port with a random token
and private Jupyter, JupyterLab and IPython directories, so nothing of the user's
configuration leaks in and nothing of the test leaks out. Every process it starts (kernels,
and the topologies those kernels submit) inherits ``TUPLEFLOW_LAB_MARK``; that is how
teardown finds them all, wherever they were reparented, exactly as tests/conftest.py finds
topology processes by ``TUPLEFLOW_RUN_ROOT``.

Starting JupyterLab costs 3-28 s of a loaded machine, so one server serves every browser
test of a pytest worker. Each test still gets a server as good as new (``LabServer.reset``):
no kernel, no session, an empty root directory and no saved workspace, and a kernel spec
whose environment names the test's own ``TUPLEFLOW_RUN_ROOT`` (its kernels, and what they
submit, are the test's). A test ends by closing its kernels (``LabServer.close``), which
must leave no process behind; the server itself is stopped, and checked the same way, when
the worker's session ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
INSTALL_HINT = ("run `make test` (it installs the Debian packages, chromium included) or "
                "`apt-get install chromium`; Playwright's own browser download is not used")
MARK_ENV = "TUPLEFLOW_LAB_MARK"
RUN_ROOT_ENV = "TUPLEFLOW_RUN_ROOT"  # tests/conftest.py: whose topology processes they are
FAILURE_SHOT = REPO / "artifacts" / "browser" / "failure.png"  # the page when a test failed
START_TIMEOUT = 60.0  # a loaded 2-core machine can take a while to import JupyterLab
STOP_TIMEOUT = 20.0
# JupyterLab settings: pop-ups (news, update checks) kept off the page under test, and the
# widgets' state saved with the notebook, as `make lab` sets it (a reopened notebook shows
# its dashboard's last picture).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings": {"saveState": True},
}


def free_port() -> int:
    """A loopback port nobody listens on right now (the server may still lose a race: the
    caller retries)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def marked_processes(mark: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment carries ``MARK_ENV=mark``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARK_ENV) == mark:
                found.append(proc)
    return found


class LabServer:
    """A JupyterLab server under ``root``; ``url(path)`` adds the token. ``stop()`` shuts it
    down through its API, then kills whatever of its process tree is left, and returns the
    descriptions of the processes that had to be killed (empty when all went quietly).
    ``reset(run_root)`` readies it for the next test, ``close()`` ends a test's kernels."""

    def __init__(self, workdir: Path) -> None:
        self.token = secrets.token_hex(24)
        self.mark = secrets.token_hex(8)
        self.root = workdir / "root"
        self.log_path = workdir / "jupyterlab.log"
        self.kernels = workdir / "path" / "kernels"  # JUPYTER_PATH: searched first
        self.workspaces = workdir / "config" / "lab" / "workspaces"
        self.root.mkdir()
        self.env = self._environment(workdir)
        self.proc: subprocess.Popen | None = None
        for _attempt in range(3):
            self.port = free_port()
            self._start()
            if self._wait_ready():
                return
            self.stop()
        pytest.fail(f"JupyterLab did not start on a free loopback port in 3 attempts; its log "
                    f"({self.log_path}):\n{self.log_tail()}")

    def _environment(self, workdir: Path) -> dict[str, str]:
        """The server's environment: private Jupyter/IPython dirs, the repository importable
        by kernels, and the mark."""
        dirs = {name: workdir / name for name in ("config", "data", "runtime", "ipython",
                                                  "path")}
        for path in dirs.values():
            path.mkdir()
        settings = dirs["config"] / "lab" / "user-settings"
        for name, values in LAB_SETTINGS.items():
            (settings / name).parent.mkdir(parents=True, exist_ok=True)
            (settings / name).write_text(json.dumps(values))
        env = {key: value for key, value in os.environ.items() if not key.startswith("JUPYTER")}
        pythonpath = [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
        env.update({
            "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]),
            # before the data directory, and before the venv's own share/jupyter (which a
            # venv's Jupyter prefers to the user's data directory)
            "JUPYTER_PATH": str(dirs["path"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.workspaces),
            "IPYTHONDIR": str(dirs["ipython"]),
            "PYTHONPATH": os.pathsep.join(pythonpath),
            MARK_ENV: self.mark,
        })
        return env

    def _start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jupyterlab", "--no-browser",
                 "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
                 "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.root}",
                 f"--IdentityProvider.token={self.token}",
                 "--LabApp.news_url=", "--ServerApp.terminals_enabled=False",
                 *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI containers run as root
                cwd=self.root, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_ready(self) -> bool:
        """Poll ``/api/status`` until it answers 200; False if the server exits first."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                if self.api("GET", "/api/status").get("started"):
                    return True
            time.sleep(0.1)  # polling a condition, not synchronising on time
        return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}?token={self.token}"

    def api(self, method: str, path: str) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method=method,
            headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            body = answer.read()
        return json.loads(body) if body else {}

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def stop(self) -> list[str]:
        """Shut down (API, then SIGTERM, then SIGKILL); kill what survived; say what that was."""
        if self.proc is None:
            return []
        proc, self.proc = self.proc, None
        killed = []
        if proc.poll() is None:
            with contextlib.suppress(OSError, urllib.error.URLError):
                self.api("POST", "/api/shutdown")  # also shuts down its kernels
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:  # a shutdown that failed: say so, not only kill
                killed.append(f"{proc.pid} the JupyterLab server (still up {STOP_TIMEOUT:.0f} s "
                              f"after /api/shutdown; see {self.log_path})")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return killed + self._sweep()

    def reset(self, run_root: str) -> None:
        """As good as new for the next test: an empty root, no saved workspace (the page
        opens only what the test opens), and the ``python3`` kernel spec (in JUPYTER_PATH,
        found before ipykernel's own) giving its kernels ``run_root``, as the server says."""
        for folder in (self.root, self.workspaces):  # emptied, not removed: the server's cwd
            folder.mkdir(parents=True, exist_ok=True)
            for entry in folder.iterdir():
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        from ipykernel.kernelspec import get_kernel_dict  # the spec it installs, as it is

        spec = dict(get_kernel_dict(), env={RUN_ROOT_ENV: run_root})
        (self.kernels / "python3").mkdir(parents=True, exist_ok=True)
        (self.kernels / "python3" / "kernel.json").write_text(json.dumps(spec))
        served = self.api("GET", "/api/kernelspecs")["kernelspecs"]["python3"]["spec"]
        assert served.get("env") == spec["env"], f"the server's python3 kernel spec: {served}"

    def close(self) -> list[str]:
        """End the test's notebooks as closing them does (each session, then any kernel
        left, through the API); kill what of their process trees outlives the grace period,
        and say what that was. The server runs on."""
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")
        for kernel in self.api("GET", "/api/kernels"):
            with contextlib.suppress(urllib.error.HTTPError):  # 404: it ended meanwhile
                self.api("DELETE", f"/api/kernels/{kernel['id']}")
        return self._sweep(keep=self.proc.pid)

    def _sweep(self, keep: int | None = None) -> list[str]:
        """Give the server's descendants (kernels, their topologies) a grace period, then
        SIGKILL the stragglers and report them; ``keep``, the server, is none of them."""
        deadline = time.monotonic() + STOP_TIMEOUT
        while True:
            left = [p for p in marked_processes(self.mark) if p.pid != keep]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        described = []
        for leftover in left:
            with contextlib.suppress(psutil.Error):
                described.append(f"{leftover.pid} {' '.join(leftover.cmdline())}")
                leftover.kill()
        return described


@pytest.fixture
def chromium() -> str:
    """Debian's Chromium: a missing browser is a failure with the install hint, never a skip."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
        pytest.fail(f"{CHROMIUM} is missing: {INSTALL_HINT}")
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory):
    """The worker's one JupyterLab (``LabServer``), stopped at the end of the session; a
    process it leaves behind fails the session's last browser test."""
    server = LabServer(tmp_path_factory.mktemp("lab"))
    yield server
    leftovers = server.stop()
    assert not leftovers, f"JupyterLab left processes behind: {leftovers}"


@pytest.fixture
def lab(lab_server, topology_guard):
    """The running JupyterLab, reset for this test (``LabServer.reset``: its kernels run
    under this test's ``TUPLEFLOW_RUN_ROOT``); its kernels are closed after the test,
    whatever happened (a test that passed has closed them itself, and checked)."""
    lab_server.reset(topology_guard)
    yield lab_server
    lab_server.close()


@pytest.fixture
def page(chromium, request):
    """A fresh Playwright page in headless Chromium (1400×1000), closed after the test; when
    the test failed, a screenshot of the page is saved as ``FAILURE_SHOT`` first."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("Playwright for Python is missing: `pip install -e '.[test]'` "
                    "(or `make test`)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
            report = getattr(request.node, "report_call", None)
            if report is not None and report.failed:
                FAILURE_SHOT.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(FAILURE_SHOT))
        finally:
            browser.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, so ``page`` knows whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
