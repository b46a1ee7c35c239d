"""The container image's HEALTHCHECK: asks the Shadowplane process the container runs, by
its own command line, whatever the image was started with.

- `api`: GET /healthz on the host and port of its `--host`/`--port` (8000 by default);
- `dashboard`: GET /_stcore/health on its port (8501 by default);
- any other command (`worker`, `beat`, `migrate`, ...): healthy while the process runs and
  is not stopped (a worker or beat that hangs is caught by the window lag alerts, which
  watch the work itself).

Standard library only: it runs in the image's Python, on every check, in well under a
second. Exit status 0 healthy, 1 not (what Docker reads).
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

# The commands that answer HTTP: the path to ask, and the port when none is given.
HTTP = {"api": ("/healthz", 8000), "dashboard": ("/_stcore/health", 8501)}


def option(words: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in a command line."""
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def command_of(argv: list[str]) -> list[str] | None:
    """The `shadowplane` command and its options in a process's argv (the script run
    directly or by its Python), or None for any other process. The commands that become
    another program are read back: `worker` and `beat` run `python -m shadowplane_workers worker|beat`
    (Celery's), `dashboard` runs `python -m shadowplane_dashboard run … --server.address HOST
    --server.port PORT` (Streamlit's)."""
    for i, word in enumerate(argv[:3]):
        if os.path.basename(word) == "shadowplane":
            return argv[i + 1 :]
        if word == "-m" and argv[i + 1 : i + 2] == ["shadowplane_workers"]:
            return argv[i + 2 :]
        if word == "-m" and argv[i + 1 : i + 2] == ["shadowplane_dashboard"]:
            rest = argv[i + 2 :]
            host = option(rest, "--server.address") or "127.0.0.1"
            port = option(rest, "--server.port") or str(HTTP["dashboard"][1])
            return ["dashboard", "--host", host, "--port", port]
    return None


def url_to_ask(words: list[str]) -> str | None:
    """The URL a command answers health on, or None when it answers no HTTP."""
    if not words or words[0] not in HTTP:
        return None
    path, default_port = HTTP[words[0]]
    host = option(words, "--host") or "127.0.0.1"
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    port = option(words, "--port") or str(default_port)
    return f"http://{host}:{port}{path}"


def running(pid: int) -> bool:
    """Whether a process runs (not stopped, traced or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("T", "t", "Z", "X")


def find_process() -> tuple[int, list[str]] | None:
    """The container's Shadowplane process: the lowest pid running a `shadowplane` command
    (PID 1, or the child of an init such as `docker run --init`)."""
    pids = sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        words = command_of([w for w in argv.split("\0") if w])
        if words is not None:
            return pid, words
    return None


def check() -> str | None:
    """None when healthy, else why not."""
    found = find_process()
    if found is None:
        return "no shadowplane process runs in this container"
    pid, words = found
    if not running(pid):
        return f"process {pid} ({' '.join(words[:1])}) is stopped"
    url = url_to_ask(words)
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return None if answer.status == 200 else f"{url} answered {answer.status}"
    except OSError as exc:
        return f"{url}: {exc}"


if __name__ == "__main__":
    problem = check()
    if problem:
        print(problem, file=sys.stderr)
    sys.exit(1 if problem else 0)
