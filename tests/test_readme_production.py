"""README, "Running it in production": its steps, run as written against real PostgreSQL and
Redis, end with a task in canary that a simulated scenario rolls back (issue 29: followed as
written, the steps never put a task in canary, so nothing was ever rolled back).

The section's shell blocks are read out of README.md and run line by line: the setup
(migrate, the keys, the task, the API, a Celery worker and beat), the path to protection
(the gate, the grade, and promotions that the gate and the grade refuse: nothing is in
shadow yet) and the rehearsal (the task with 10-second windows, a forced promotion to
canary, the simulated routers with the long-ticket scenario until their flag reads
`rolled_back`, Ctrl-C, the decisions). Each call's scope, as its comment names it, is
checked with a key of that scope alone, and refused to a key without it.

What the test supplies in place of the reader's: its own PostgreSQL database and Redis for
the two URLs, a free port for the API and one API worker, a state folder for beat, and
SHADOWPLANE_TICK_SECONDS=1, as the rehearsal asks of beat. The install lines and the
dashboard are not run. `shadowplane` commands run forked from a process that imported the
CLI (tests/liveapi.run_cli: the same command without the import wait); `curl` runs curl.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane.client.tls import default_tls
from tests.liveapi import (
    ROOT,
    ApiServer,
    Done,
    new_keys,
    output,
    run_cli,
    start_python,
    wait_until,
)
from tests.support import CeleryProcess, celery_env

pytestmark = pytest.mark.integration

README = ROOT / "README.md"
# A scope that is not the one named (nor admin, which holds all): its key is refused the call.
OTHER_SCOPE = {"read": "ingest", "ingest": "read", "flags:read": "read", "review": "read"}
# The servers a line starts, which run until the test stops them.
SERVERS = ("api", "worker", "beat", "dashboard")
# How long the rehearsal's routers may run before the policy must have rolled back: three
# 10-second windows, the lateness, a tick, and room for a loaded machine.
ROLLBACK_WAIT = 120.0
# simulate's line when its routers' flag changes, as the README says to watch for it.
ROLLED_BACK = "ticket_classify: the routers' flag is now rolled_back 0% edge"


@dataclass
class Line:
    """One command of a README block: the command as written (without its comment), its
    words (variables not yet expanded), the comment after it, and a heredoc's body when it
    writes a file."""

    text: str
    words: list[str]
    comment: str
    body: str | None = None


def production_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Running it in production\n")
    return text[start : text.index("\n## ", start + 1)]


def shell_blocks(section: str) -> list[list[Line]]:
    """The ```sh blocks of the section, as commands (heredocs kept whole)."""
    blocks = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S):
        lines: list[Line] = []
        rows = iter(block.splitlines())
        for row in rows:
            command, comment = split_comment(row)
            if not command:
                continue
            line = Line(command, shlex.split(command), comment)
            heredoc = re.fullmatch(r"cat > (\S+) <<'(\w+)'", command)
            if heredoc:
                body = []
                for inner in rows:
                    if inner == heredoc[2]:
                        break
                    body.append(inner)
                line.body = "\n".join(body) + "\n"
            lines.append(line)
        blocks.append(lines)
    return blocks


def split_comment(row: str) -> tuple[str, str]:
    """The command and its comment: the first `#` after a space, outside quotes."""
    quote = None
    for i, char in enumerate(row):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or row[i - 1] == " "):
            return row[:i].strip(), row[i + 1 :].strip()
    return row.strip(), ""


@dataclass
class Shell:
    """Runs README lines: variables (`NAME=value`, `NAME=$(shadowplane … | tail -n 1)`),
    `shadowplane` commands and `curl`; keeps the scopes of the keys it made, by variable."""

    workdir: Path
    env: dict[str, str]
    api_port: int
    variables: dict[str, str] = field(default_factory=dict)
    key_scopes: dict[str, set[str]] = field(default_factory=dict)
    readme_port: str | None = None

    def expand(self, word: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match[1] or match[2]
            assert name in self.variables, f"${name} is used before the README sets it"
            return self.variables[name]

        return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, word)

    def cli(self, argv: list[str]) -> Done:
        """A `shadowplane` command; `> FILE` at its end writes its output there."""
        target = None
        if len(argv) > 2 and argv[-2] == ">":
            argv, target = argv[:-2], self.workdir / self.expand(argv[-1])
        done = run_cli([self.expand(w) for w in argv], self.env, self.workdir, timeout=120)
        if target is not None and done.returncode == 0:
            target.write_text(done.stdout, encoding="utf-8")
        return done

    def assign(self, line: Line) -> bool:
        """`NAME=$(shadowplane … | tail -n 1)` or `NAME=value`; False for other lines."""
        captured = re.fullmatch(r"(\w+)=\$\((shadowplane .+) \| tail -n 1\)", line.text)
        if captured:
            argv = shlex.split(captured[2])[1:]
            done = self.cli(argv)
            assert done.returncode == 0, done.stdout + done.stderr
            self.variables[captured[1]] = done.stdout.strip().splitlines()[-1]
            if argv[:2] == ["keys", "create"]:
                self.key_scopes[captured[1]] = {
                    argv[i + 1] for i, word in enumerate(argv) if word == "--scope"
                }
            return True
        plain = re.fullmatch(r"(\w+)=(\S+)", " ".join(line.words))
        if plain and len(line.words) == 1:
            value = plain[2]
            if self.readme_port is not None:  # the README's API, on the test's port
                value = value.replace(f":{self.readme_port}", f":{self.api_port}")
            self.variables[plain[1]] = value
            return True
        return False

    def curl(self, line: Line) -> Any:
        """Run the curl line; its answer as JSON."""
        argv = [self.expand(w) for w in line.words]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (line.text, done.stderr)
        return json.loads(done.stdout)


SCOPE = r"(?:ingest|flags:read|read|review|admin)"


def scope_named(comment: str) -> set[str]:
    """What a comment says first of the key a line needs: `no key`, or the scopes it
    names ("read: …", "ingest + flags:read")."""
    if comment.startswith("no key"):
        return {"no key"}
    named = re.match(rf"{SCOPE}(?:\s*\+\s*{SCOPE})*(?!\w)", comment)
    assert named, f"names no scope first: {comment!r}"
    return {scope.strip() for scope in named[0].split("+")}


def check_scope(shell: Shell, line: Line) -> None:
    """A curl line's scope, as its comment names it, is the one the call needs: a key of
    that scope alone is answered, a key without it refused."""
    [scope] = scope_named(line.comment)
    url = next(shell.expand(w) for w in line.words if "/v1/" in w)
    keys = new_keys(shell.env["SHADOWPLANE_DATABASE_URL"], only=[scope], other=[OTHER_SCOPE[scope]])

    def status(name: str) -> int:
        headers = {"Authorization": f"Bearer {keys[name]}"}
        return httpx.get(url, headers=headers, timeout=30, verify=default_tls()).status_code

    # A key made a moment ago is known to the API within about a second.
    wait_until(lambda: status("only") != 401, "the API to know the new keys", every=0.2)
    assert (status("only"), status("other")) == (200, 403), line.text


# It asks for `redis_url` so that what it stops is gone before the Redis database is given
# back to the next test.
@pytest.fixture
def servers(redis_url: Callable[[], str]) -> Iterator[list[Callable[[], Any]]]:
    """What the test starts, stopped after it (newest first)."""
    stops: list[Callable[[], Any]] = []
    yield stops
    for stop in reversed(stops):
        stop()


def test_the_readme_production_steps_end_with_a_canary_the_scenario_rolls_back(
    pg_url: str, redis_url: Callable[[], str], tmp_path: Path, servers: list[Callable[[], Any]]
) -> None:
    assert shutil.which("curl"), "curl is not installed: run the suite with scripts/test"
    section = production_section()
    # The container image's blocks are scripts/test-image's to try (it builds and runs it).
    setup, path, rehearsal = [
        block
        for block in shell_blocks(section)
        if not any("docker" in line.words for line in block)
    ]
    assert ROLLED_BACK.split(": ", 1)[1] in " ".join(section.split()), "the README's words"
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    home = tmp_path / "home"
    redis = redis_url()
    env = celery_env(pg_url, redis, SHADOWPLANE_TICK_SECONDS="1", HOME=str(home))
    env.pop("XDG_STATE_HOME", None)
    shell = Shell(workdir, env, api_port=0)

    # The setup, as written: the exports are the test's servers.
    api: ApiServer | None = None
    for line in setup:
        program = line.words[0]
        if program in ("python3", "pip"):  # the install: this checkout is installed
            continue
        if program == "export":  # the servers' URLs: the test's (in `env`)
            name = line.words[1].split("=", 1)[0]
            assert name in ("SHADOWPLANE_DATABASE_URL", "SHADOWPLANE_REDIS_URL"), line.text
            continue
        if shell.assign(line):
            continue
        assert program == "shadowplane", line.text
        command = line.words[1]
        if command == "api":
            options = dict(zip(line.words[2::2], line.words[3::2], strict=True))
            assert set(options) == {"--host", "--port", "--workers"}, line.text
            shell.readme_port = options["--port"]
            api = ApiServer(pg_url, tmp_path / "api.log", settings=_settings(env))
            servers.append(api.stop)
            api.start()
            shell.api_port = api.port
        elif command in ("worker", "beat"):
            process = CeleryProcess(line.words[1:], env, tmp_path / f"{command}.log", workdir)
            servers.append(process.kill)  # nothing of theirs to finish: no warm shutdown
            process.start()
        elif command != "dashboard":  # the dashboard: people's, tested in tests/dashboard
            done = shell.cli(line.words[1:])
            assert done.returncode == 0, (line.text, done.stdout, done.stderr)
    assert api is not None and {"ADMIN_KEY", "ROUTER_KEY"} <= set(shell.variables)
    assert shell.key_scopes["ROUTER_KEY"] == {"ingest", "flags:read"}
    assert shell.key_scopes["ADMIN_KEY"] == {"admin"}

    # The path to protection: with nothing closed in shadow yet, the gate and the grade
    # say so and the promotions are refused, naming them.
    for line in path:
        if shell.assign(line):
            continue
        assert line.comment, f"{line.text}: says nothing of the key it needs"
        if line.words[0] == "curl":
            check_scope(shell, line)
            gate = shell.curl(line)
            assert gate["passed"] is False and gate["reasons"], gate
            continue
        assert scope_named(line.comment) == {"no key"}, line.text
        done = shell.cli(line.words[1:])
        if line.words[1] == "promote":
            assert done.returncode == 1, (line.text, done.stdout, done.stderr)
            expected = line.words[line.words.index("--expected-stage") + 1]
            if expected == "shadow":  # refused by both, each naming what is missing
                assert "windows needed have closed in shadow" in done.stderr, done.stderr
                assert "- the grade is insufficient: " in done.stderr, done.stderr
            else:  # still in shadow, not at the step the line expects
                assert f"is in shadow, not {expected}" in done.stderr, done.stderr
        else:
            assert done.returncode == 0 and "ticket_classify" in done.stdout, done.stdout

    # The rehearsal.
    simulate: Any = None
    answers: list[Any] = []
    for line in rehearsal:
        if line.body is not None:
            (workdir / line.words[2]).write_text(line.body, encoding="utf-8")
            continue
        assert line.comment, f"{line.text}: says nothing of the key it needs"
        if line.words[0] == "curl":
            check_scope(shell, line)
            answers.append(shell.curl(line))
            continue
        command = line.words[1]
        if command != "simulate":
            assert scope_named(line.comment) == {"no key"}, line.text
            done = shell.cli(line.words[1:])
            assert done.returncode == 0, (line.text, done.stdout, done.stderr)
            continue
        key = line.words[line.words.index("--key") + 1].lstrip("$")
        assert scope_named(line.comment) == shell.key_scopes[key], line.text
        simulate = _run_until_rolled_back(shell, line, tmp_path / "simulate")
    gate, decisions = answers
    assert gate["passed"] is False, gate
    assert simulate is not None

    # The routers went from canary to the cloud, by the policy's rollback on the long
    # tickets the scenario broke.
    held = re.findall(r"(?:; flag|flag is now) (\w+) (\d+)% edge", simulate.stdout)
    assert held[0] == ("canary", "5") and held[-1] == ("rolled_back", "0"), simulate.stdout
    assert "traffic stopped (Ctrl-C)" in simulate.stdout, simulate.stdout
    assert re.search(r"ticket_classify: generated \d+, .*not delivered 0$", simulate.stdout, re.M)
    assert simulate.returncode == 0, simulate.stdout + simulate.stderr
    [rollback] = [d for d in decisions["decisions"] if d["action"] == "rollback"]
    assert rollback["actor"] == "policy" and rollback["stage_after"] == "rolled_back", rollback
    assert rollback["rule"].startswith("agreement >= 0.9") and rollback["bucket"] == "2048+", (
        rollback
    )
    admin = {"Authorization": f"Bearer {shell.variables['ADMIN_KEY']}"}
    flag = httpx.get(
        f"{api.base}/v1/flags/ticket_classify", headers=admin, timeout=30, verify=default_tls()
    ).json()
    assert flag["stage"] == "rolled_back" and flag["edge_percent"] == 0, flag


def _settings(env: dict[str, str]) -> dict[str, str]:
    """The API's settings of the environment (ApiServer sets the database and the tick: with
    Redis, beat queues the passes, never the API)."""
    own = ("SHADOWPLANE_DATABASE_URL", "SHADOWPLANE_TICK_SECONDS")
    return {k: v for k, v in env.items() if k.startswith("SHADOWPLANE_") and k not in own}


def _run_until_rolled_back(shell: Shell, line: Line, folder: Path) -> Done:
    """The simulate line in the background until its lines show the flag rolled back,
    then Ctrl-C, as the README says; what it printed and its exit code."""
    folder.mkdir()
    argv = [shell.expand(w) for w in line.words[1:]]
    code = f"from controlplane.cli import app; app(args={argv!r}, prog_name='shadowplane')"
    process = start_python(code, shell.env, folder)
    try:
        wait_until(
            lambda: process.poll() is not None or ROLLED_BACK in output(folder).stdout,
            "the simulated routers' flag to read rolled_back",
            timeout=ROLLBACK_WAIT,
            every=0.2,
        )
        assert process.poll() is None, output(folder)
        process.signal(signal.SIGINT)
        code_now = process.wait(90)
    finally:
        if process.poll() is None:
            process.signal(signal.SIGKILL)
            process.wait(30)
    done = output(folder)
    done.returncode = code_now
    return done
