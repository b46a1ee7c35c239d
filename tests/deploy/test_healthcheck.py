"""The image's HEALTHCHECK (deploy/healthcheck.py) asks the process the container runs by its
own command line: the API and the dashboard over HTTP on their --host and --port, any other
command while it runs; a stopped process is unhealthy. scripts/test-image runs it in the
image, for every process it starts."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.liveapi import ROOT

pytestmark = pytest.mark.integration


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "deploy" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


health = _load()


@pytest.mark.parametrize(
    ("argv", "url"),
    [
        # The image's default command, and as Python runs the script.
        (
            ["shadowplane", "api", "--host", "0.0.0.0", "--port", "8000"],
            "http://127.0.0.1:8000/healthz",
        ),
        (
            [
                "/opt/shadowplane/bin/python3",
                "/opt/shadowplane/bin/shadowplane",
                "api",
                "--port=9001",
            ],
            "http://127.0.0.1:9001/healthz",
        ),
        (
            ["shadowplane", "api", "--host", "10.0.0.7", "--port", "81"],
            "http://10.0.0.7:81/healthz",
        ),
        (["shadowplane", "api", "--host", "::"], "http://[::1]:8000/healthz"),
        (["shadowplane", "api"], "http://127.0.0.1:8000/healthz"),
        (
            ["shadowplane", "dashboard", "--host", "0.0.0.0"],
            "http://127.0.0.1:8501/_stcore/health",
        ),
        (["shadowplane", "worker", "--concurrency", "2"], None),
        (["shadowplane", "beat"], None),
        # What `shadowplane worker` and `beat` exec: Celery's program.
        (
            [
                "/opt/shadowplane/bin/python3",
                "-m",
                "shadowplane_workers",
                "worker",
                "--concurrency",
                "2",
            ],
            None,
        ),
        (["/opt/shadowplane/bin/python3", "-m", "shadowplane_workers", "beat", "-s", "/x"], None),
        # What `shadowplane dashboard` execs: Streamlit's program.
        (
            [
                "python3",
                "-m",
                "shadowplane_dashboard",
                "run",
                "/x/server.py",
                "--server.address",
                "0.0.0.0",
            ]
            + ["--server.port", "8601", "--server.headless", "true"],
            "http://127.0.0.1:8601/_stcore/health",
        ),
        (["shadowplane", "migrate"], None),
    ],
)
def test_each_command_is_asked_where_it_answers(argv: list[str], url: str | None) -> None:
    words = health.command_of(argv)
    assert words is not None and words[0] in ("api", "dashboard", "worker", "beat", "migrate")
    assert health.url_to_ask(words) == url


def test_other_processes_are_not_taken_for_shadowplane() -> None:
    assert health.command_of(["/usr/bin/tini", "--", "sleep", "1"]) is None
    assert health.command_of(["python3", "/opt/shadowplane/healthcheck.py"]) is None


def test_a_stopped_process_is_not_running() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert health.running(child.pid)
        child.send_signal(signal.SIGSTOP)
        stat = Path(f"/proc/{child.pid}/stat")
        for _ in range(200):
            if stat.read_text().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                break
            time.sleep(0.01)
        assert not health.running(child.pid)
        child.send_signal(signal.SIGCONT)
    finally:
        child.kill()
        child.wait()
    assert not health.running(child.pid)  # gone
