"""Real servers for the tests that need a running API: `shadowplane api` under uvicorn on a
free port (stopped, killed and started again on the same port as a test likes), a Redis of
the test's own, a TCP proxy that can cut every connection through it, and a reader of the
flag stream.

Starting a server: `python -m controlplane.cli api` spends about three seconds importing the
app before uvicorn binds. A single-worker server is therefore forked from a process that has
imported it once (`_Forker`): the child sets the test's environment, then runs the same CLI
command (`controlplane.cli.app(["api", ...])`), so settings are read, the app is created and
uvicorn serves exactly as in a fresh `shadowplane api`, on its own pid, port and log. Servers
with more workers (uvicorn spawns them) are started as a plain `python -m controlplane.cli`.
Other commands are forked the same way: `run_cli` (`shadowplane <argv>` in a folder, its
stdout and stderr kept apart) and `run_python` / `start_python` (`python -c <code>`).
"""

from __future__ import annotations

import gc
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from controlplane.client.tls import default_tls

WAIT = 60.0  # bound for anything that must happen in the background
ROOT = Path(__file__).resolve().parents[1]

# Keys `seed` creates, by name: the scopes of each.
KEY_SCOPES = {
    "admin": ["admin"],
    "read": ["read"],
    "flags": ["flags:read"],
    "ingest": ["ingest"],
    "router": ["ingest", "flags:read"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(
    condition: Callable[[], Any], what: str, timeout: float = WAIT, every: float = 0.02
) -> Any:
    """Poll `condition` until it is truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(every)


def new_keys(url: str, **scopes: list[str]) -> dict[str, str]:
    """Keys with the given scopes (name=scopes), created in the database at `url`."""
    from controlplane.db import get_engine, session_scope
    from controlplane.keys.service import create_key

    with session_scope(get_engine(url)) as session:
        return {
            name: create_key(session, name=f"{name}-{os.urandom(4).hex()}", scopes=s, actor="test")[
                1
            ]
            for name, s in scopes.items()
        }


def seed(url: str) -> dict[str, str]:
    """The example tasks (ticket_classify capped at 512 input tokens, invoice_extract), and
    one key per entry of KEY_SCOPES; returns the keys by name."""
    from controlplane.db import get_engine, session_scope
    from controlplane.rollout.configs import apply_config
    from tests.conftest import INVOICE_TASK, TICKET_TASK

    with session_scope(get_engine(url)) as session:
        apply_config(session, {**TICKET_TASK, "max_input_tokens": 512}, actor="test")
        apply_config(session, INVOICE_TASK, actor="test")
    return new_keys(url, **KEY_SCOPES)


# --- the API process -----------------------------------------------------------------------


@dataclass
class ApiServer:
    """`shadowplane api` on a database with the given settings (SHADOWPLANE_* names), on a
    fixed port across restarts. `keys` are the keys the test holds for it."""

    database_url: str
    log_path: Path
    keys: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    workers: int = 1
    port: int = field(default_factory=free_port)
    proc: _Process | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        """Start the process and wait until it answers /healthz."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (`wait_ready` waits)."""
        assert self.proc is None, "the API is running already"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
        env.update(
            {
                "SHADOWPLANE_DATABASE_URL": self.database_url,
                "SHADOWPLANE_TICK_SECONDS": "0",
                "SHADOWPLANE_LOG_LEVEL": "WARNING",
                # As make_api: the suite's results carry fixed times (make_result's
                # 2026-11-30), which a 7-day bound refuses once the date has moved on; the
                # tests of that bound set their own.
                "SHADOWPLANE_MAX_BACKFILL": str(36500 * 86400),
                **self.settings,
            }
        )
        argv = ["api", "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["--workers", str(self.workers)]
        if self.workers == 1:
            self.proc = _forker().start(argv, env, self.log_path)
        else:
            self.proc = _Popen(argv, env, self.log_path)

    def wait_ready(self) -> ApiServer:
        assert self.proc is not None
        deadline = time.monotonic() + WAIT
        with httpx.Client(timeout=1, verify=default_tls()) as client:
            while True:
                assert self.proc.poll() is None, "the API exited:\n" + self.log()
                try:
                    if client.get(f"{self.base}/healthz").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the API did not start:\n" + self.log()
                time.sleep(0.02)

    def stop(self) -> int | None:
        """SIGTERM, then wait; returns the exit code (None if it had to be killed)."""
        return stop_all(self)[0]

    def kill(self) -> None:
        """Gone at once, open connections and all (SIGKILL), like a crashed host."""
        if self.proc is not None:
            proc, self.proc = self.proc, None
            proc.signal(signal.SIGKILL)
            assert proc.wait(WAIT) is not None, "the API did not die"

    def call(self, method: str, path: str, scope: str = "admin", **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.keys[scope]}"}
        kw.setdefault("verify", default_tls())
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=30, **kw)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""


def stop_all(*apis: ApiServer) -> list[int | None]:
    """`stop` them all at once (each shutdown may wait on its own timers); their exit codes."""
    procs = []
    for api in apis:
        proc, api.proc = api.proc, None
        if proc is not None:
            proc.signal(signal.SIGTERM)
        procs.append(proc)
    codes: list[int | None] = []
    for proc in procs:
        code = proc.wait(30) if proc is not None else None
        if proc is not None and code is None:
            proc.signal(signal.SIGKILL)
            proc.wait(WAIT)
        codes.append(code)
    return codes


class _Process:
    """A server process: signal it, see whether it ended, wait for its exit code."""

    def signal(self, sig: int) -> None:
        raise NotImplementedError

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it still runs after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return code


class _Popen(_Process):
    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        with log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "controlplane.cli", *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def signal(self, sig: int) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(sig)

    def poll(self) -> int | None:
        return self._proc.poll()


class _Forked(_Process):
    def __init__(self, forker: _Forker, pid: int) -> None:
        self._forker, self.pid = forker, pid
        self._code: int | None = None

    def signal(self, sig: int) -> None:
        self._forker.ask({"op": "signal", "pid": self.pid, "sig": int(sig)})

    def poll(self) -> int | None:
        if self._code is None:
            self._code = self._forker.ask({"op": "status", "pid": self.pid})
        return self._code


class _Forker:
    """A process that has imported the app and forks a server on request (`_serve`).

    Its children are reaped only when a test asks for their status, so a pid it signals is
    always the server's own (a zombie keeps its pid until then)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.liveapi import _serve; _serve()"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.ask({"op": "ping"}) == "ready"

    def ask(self, request: dict[str, Any]) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        assert line, f"the server forker ended (exit code {self._proc.poll()})"
        return json.loads(line)

    def start(self, argv: list[str], env: dict[str, str], log_path: Path) -> _Forked:
        return self.fork(argv=argv, env=env, log=str(log_path))

    def fork(self, **request: Any) -> _Forked:
        """A child running `request` (see `_child`)."""
        return _Forked(self, int(self.ask({"op": "start", **request})))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()  # it stops its children that still run, and ends
        self._proc.wait(timeout=WAIT)


_the_forker: _Forker | None = None
_forker_lock = threading.Lock()


def _forker() -> _Forker:
    global _the_forker
    with _forker_lock:
        if _the_forker is None:
            _the_forker = _Forker()
            import atexit

            atexit.register(_the_forker.close)
        return _the_forker


def _serve() -> None:
    """The forker's loop: one JSON request a line on stdin, one JSON answer a line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C is the test run's: it stops us
    import uvicorn
    import uvicorn.config
    import uvicorn.lifespan.on
    import uvicorn.loops.auto
    import uvicorn.protocols.http.auto
    import uvicorn.protocols.websockets.auto
    import uvicorn.server

    import controlplane.api
    import controlplane.cli

    del uvicorn, controlplane
    # What the imports made is frozen here, once: each server's start-up (the API freezes
    # what exists at its first start) then collects only what it made itself, instead of
    # walking and so copying the whole inherited heap again in every child (0.1 s each).
    gc.collect()
    gc.freeze()
    assert threading.active_count() == 1, "the forker must not run threads: it forks"
    children: set[int] = set()
    for line in sys.stdin:
        request = json.loads(line)
        answer: Any = None
        if request["op"] == "ping":
            answer = "ready"
        elif request["op"] == "start":
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            children.add(pid)
            answer = pid
        elif request["op"] == "signal":
            if request["pid"] in children:  # not reaped: the pid is still the server's
                os.kill(request["pid"], request["sig"])
        elif request["op"] == "status":
            if request["pid"] in children:
                done, status = os.waitpid(request["pid"], os.WNOHANG)
                if done:
                    children.discard(done)
                    answer = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    for pid in children:  # the test run ended: nothing of ours outlives it
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _child(request: dict[str, Any]) -> None:
    """In the forked child: the test's environment, working directory and log (stderr to a
    log of its own when `err` names one), then `shadowplane <argv>`, or the Python source
    `code` as `python -c` would run it."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        for fd, path in ((1, request["log"]), (2, request.get("err") or request["log"])):
            log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, fd)
            os.close(log)
        if request.get("cwd"):
            os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from controlplane.cli import app
        from controlplane.settings import get_settings

        get_settings.cache_clear()
        try:
            if request.get("code") is not None:
                exec(compile(request["code"], "<forked>", "exec"), {"__name__": "__main__"})
            else:
                app(args=request["argv"], prog_name="shadowplane")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


@dataclass
class Done:
    """How a forked command ended: its exit code (negative: the signal that ended it; None:
    still running at the timeout, then killed) and what it wrote."""

    returncode: int | None
    stdout: str
    stderr: str


def run_cli(argv: list[str], env: dict[str, str], workdir: Path, timeout: float = WAIT) -> Done:
    """`shadowplane <argv>` with exactly the environment `env`, in `workdir` (its output is
    kept there too), as a process of its own forked from the process that imported the app:
    the same command as a fresh `python -m controlplane.cli`, without the import wait."""
    return _finish(
        _forker().fork(argv=argv, env=env, cwd=str(workdir), **_logs(workdir, fresh=True)),
        workdir,
        timeout,
    )


def run_python(code: str, env: dict[str, str], workdir: Path, timeout: float = WAIT) -> Done:
    """`python -c code` with exactly the environment `env`, in `workdir`, forked likewise."""
    return _finish(start_python(code, env, workdir), workdir, timeout)


def start_python(code: str, env: dict[str, str], workdir: Path) -> _Process:
    """`run_python` without waiting: the running process (signal, poll, wait); `output`
    reads what it wrote."""
    return _forker().fork(code=code, env=env, cwd=str(workdir), **_logs(workdir, fresh=True))


def output(workdir: Path) -> Done:
    """What the command forked in `workdir` wrote so far (returncode None)."""
    read = {k: Path(v).read_text(errors="replace") for k, v in _logs(workdir).items()}
    return Done(None, read["log"], read["err"])


def _logs(workdir: Path, fresh: bool = False) -> dict[str, str]:
    """Where a command forked in `workdir` writes: `fresh` empties them for a new command
    (one command at a time per folder; several one after another are fine)."""
    paths = {"log": workdir / "stdout.log", "err": workdir / "stderr.log"}
    for path in paths.values():
        if fresh:
            path.write_bytes(b"")
        else:
            path.touch()
    return {k: str(v) for k, v in paths.items()}


def _finish(proc: _Process, workdir: Path, timeout: float) -> Done:
    code = proc.wait(timeout)
    if code is None:
        proc.signal(signal.SIGKILL)
        proc.wait(WAIT)
    done = output(workdir)
    done.returncode = code
    return done


# --- Redis, a proxy, the flag stream -------------------------------------------------------


@dataclass
class RedisServer:
    """A Redis of the test's own, on a free port, with nothing saved to disk."""

    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed: run the suite with scripts/test"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(answers, "the test's Redis to answer", timeout=30)
        client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


class Proxy:
    """Forwards 127.0.0.1:<port> to a target port; `cut()` closes every open connection, and
    `flowing.clear()` freezes them: nothing is forwarded and every connection stays open, as
    a server that stopped answering (a partition, a stopped VM) looks to its clients."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.flowing = threading.Event()
        self.flowing.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closed = False
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:  # accepted as close() ran: never handed to a pump
                    client.close()
                    upstream.close()
                    return
                self._open += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self.flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.flowing.set()
        self._listener.close()
        self.cut()


@dataclass
class Message:
    """One server-sent message: an event (id, event, data) or a comment."""

    id: str | None = None
    event: str | None = None
    data: str | None = None
    comment: str | None = None


class EventReader:
    """Reads GET /v1/flags/stream in a thread of its own; `next()` waits for a message."""

    def __init__(self, base: str, key: str, last_event_id: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self._client = httpx.Client(
            base_url=base, timeout=httpx.Timeout(10, read=120), verify=default_tls()
        )
        self._stream = self._client.stream("GET", "/v1/flags/stream", headers=headers)
        self.response = self._stream.__enter__()
        self.messages: queue.Queue[Message | BaseException | None] = queue.Queue()
        self.raw: list[str] = []
        if self.response.status_code == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        current = Message()
        try:
            for line in self.response.iter_lines():
                self.raw.append(line)
                if line == "":
                    if current != Message():
                        self.messages.put(current)
                    current = Message()
                elif line.startswith(":"):
                    current.comment = line[1:].strip()
                else:
                    name, _, value = line.partition(": ")
                    setattr(current, name, value)
            self.messages.put(None)  # the server ended the stream
        except BaseException as exc:  # the stream broke: the test sees how
            self.messages.put(exc)

    def next(self, timeout: float = WAIT) -> Message | BaseException | None:
        status = self.response.status_code
        assert status == 200, f"the stream was refused: HTTP {status}"
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message on the stream within {timeout} s") from None

    def next_event(self, timeout: float = WAIT) -> Message:
        """The next flags event, skipping heartbeats."""
        deadline = time.monotonic() + timeout
        while True:
            message = self.next(max(0.0, deadline - time.monotonic()))
            assert isinstance(message, Message), f"the stream ended: {message!r}"
            if message.comment is None and message.event != "heartbeat":
                return message

    def close(self) -> None:
        """End the stream now: the server sees the connection go at once. (Closing the
        socket alone leaves it open while the reading thread waits in recv on it, so the
        server would count the stream as open until its next heartbeat, or longer.)"""
        network = self.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self._stream.__exit__(None, None, None)
        finally:
            self._client.close()
