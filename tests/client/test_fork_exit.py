"""A process that ends without calling its `ResultReporter`'s `close()`: a router's script,
and a child forked from a router whose module-level reporter was made before the fork (a
`multiprocessing` pool's worker, the pool closed and joined; a `multiprocessing.Process`
whose target returns or raises; an `os.fork` child that ends through the interpreter's own
exit). What it reported reaches the real API all the same; what cannot be delivered in the
close timeout is counted and logged, and the process still exits. A reporter registers its
close at the exit once, at its first report, and close() takes it back; a child that has
not reported registers nothing.

Each router here waits a minute before it sends a batch that is not full (`flush_interval`),
so a result is still in the queue when the child ends, unless something flushes it then."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from controlplane.db import get_engine, session_scope
from controlplane.models import Result
from tests.liveapi import WAIT, ApiServer, run_python

# The router's own module, imported by its main script before any fork.
ROUTER = '''
"""A router: its reporter made at import (README's module-level clients)."""
import os

from controlplane.client import ResultReporter

reporter = ResultReporter(os.environ["URL"], os.environ["KEY"], flush_interval=60)


def result(request_id):
    return {
        "request_id": request_id,
        "task": "ticket_classify",
        "input_tokens": 10,
        "decision": "cloud",
        "served": "cloud",
        "cloud": {"output": "refund", "latency_ms": 3.0},
    }


def handle(request_id):
    """A pool's task: one request served, its result reported."""
    return [os.getpid(), reporter.report(result(request_id))]


def serve(run, n, then_raise=False):
    """A Process's target: n requests served, their results reported; then it returns, or
    raises."""
    for i in range(n):
        reporter.report(result(f"{run}-{i}"))
    if then_raise:
        raise RuntimeError("the worker's last request failed")
'''

HEAD = """
import json, multiprocessing, os, sys
sys.path.insert(0, os.getcwd())
import router

RUN = os.environ["RUN"]
fork = multiprocessing.get_context("fork")
"""


def _env(api: ApiServer | None, run: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["URL"] = api.base if api is not None else "http://127.0.0.1:9"  # nothing listens
    env["KEY"] = api.keys["router"] if api is not None else "k"
    env["RUN"] = run
    return env


def _run(api: ApiServer | None, run: str, tmp_path: Path, body: str) -> tuple[Any, str]:
    """The router's main script (`HEAD` + body, which sets OUT) run as a process of its own,
    its request ids `<run>-<i>`: OUT, and what the processes wrote to stderr."""
    (tmp_path / "router.py").write_text(ROUTER)
    code = HEAD + textwrap.dedent(body) + "\nprint(json.dumps(OUT))\n"
    done = run_python(code, _env(api, run), tmp_path, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _run_interpreter(api: ApiServer, run: str, tmp_path: Path, body: str) -> Any:
    """`_run`'s script in an interpreter of its own, which ends as a script does (its
    atexit run; `_run`'s forked process ends with os._exit): its OUT."""
    (tmp_path / "router.py").write_text(ROUTER)
    return _interpreter(
        HEAD + textwrap.dedent(body) + "\nprint(json.dumps(OUT))\n", api, run, tmp_path
    )


def _interpreter(code: str, api: ApiServer, run: str, tmp_path: Path) -> Any:
    """`python -c code` in tmp_path, ended as a script ends: what it printed last, read as
    JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(api, run),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _new_run() -> str:
    return uuid.uuid4().hex[:12]


def _stored(api: ApiServer, run: str) -> tuple[int, int]:
    """The results of the run in the database: how many, how many distinct request ids."""
    with session_scope(get_engine(api.database_url)) as session:
        n, distinct = session.execute(
            select(func.count(), func.count(func.distinct(Result.request_id))).where(
                Result.request_id.like(f"{run}-%")
            )
        ).one()
    return int(n), int(distinct)


def test_a_pool_worker_that_ends_without_close_delivers_what_it_reported(
    shared_api: ApiServer, tmp_path: Path
) -> None:
    run = _new_run()
    body = """
        pool = fork.Pool(2)
        answers = pool.map(router.handle, [f"{RUN}-{i}" for i in range(40)], chunksize=5)
        pool.close()
        pool.join()  # the workers end as a pool's do: no close() in them
        OUT = [len({pid for pid, _ in answers}), [queued for _, queued in answers]]
    """
    (workers, queued), _ = _run(shared_api, run, tmp_path, body)
    assert 1 <= workers <= 2 and queued == [True] * 40
    # Every result the workers reported is in the database, once.
    assert _stored(shared_api, run) == (40, 40)


@pytest.mark.parametrize("then_raise", [False, True], ids=["returns", "raises"])
def test_a_process_whose_target_ends_without_close_delivers_what_it_reported(
    shared_api: ApiServer, tmp_path: Path, then_raise: bool
) -> None:
    run = _new_run()
    body = f"""
        child = fork.Process(target=router.serve, args=(RUN, 25, {then_raise}))
        child.start()
        child.join(60)
        OUT = child.exitcode
    """
    exitcode, stderr = _run(shared_api, run, tmp_path, body)
    assert exitcode == (1 if then_raise else 0), stderr
    assert _stored(shared_api, run) == (25, 25)


def test_a_forked_child_ending_through_the_interpreters_exit_delivers_what_it_reported(
    shared_api: ApiServer, tmp_path: Path
) -> None:
    # A real `python` process (its own interpreter exit, atexit and all), forking with
    # os.fork as gunicorn does: the child ends with sys.exit, its results not closed.
    run = _new_run()
    (tmp_path / "router.py").write_text(ROUTER)
    main = """
        import atexit, json, os, sys
        sys.path.insert(0, os.getcwd())
        import controlplane.client

        before = atexit._ncallbacks()
        import router

        router.reporter.report(router.result(os.environ["RUN"] + "-parent"))
        in_parent = atexit._ncallbacks() - before
        at_fork = atexit._ncallbacks()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            unused = atexit._ncallbacks() - at_fork  # before the child's first report
            for i in range(30):
                router.reporter.report(router.result(f"{os.environ['RUN']}-{i}"))
            os.write(w, json.dumps(unused).encode())
            os.close(w)
            sys.exit(0)
        os.close(w)
        unused = json.loads(os.read(r, 100))
        _, status = os.waitpid(pid, 0)
        delivered = router.reporter.close()
        print(json.dumps([os.waitstatus_to_exitcode(status), delivered, in_parent, unused]))
    """
    # The child exited 0; the parent delivered its own at close(). The parent's first
    # report registered one close at the exit; the fork registered nothing in the child
    # before it reported.
    assert _interpreter(textwrap.dedent(main), shared_api, run, tmp_path) == [0, True, 1, 0]
    assert _stored(shared_api, run) == (31, 31)


def test_a_child_whose_results_cannot_be_delivered_counts_and_logs_them_at_its_exit(
    tmp_path: Path,
) -> None:
    # Nothing listens: the child's exit waits (1 s here, 10 s by default), then gives up on
    # its results, counted and logged as close() does, and the child ends.
    body = """
        import controlplane.client.reporter
        controlplane.client.reporter.EXIT_WAIT = 1.0  # the fork keeps it
        child = fork.Process(target=router.serve, args=(RUN, 3))
        child.start()
        child.join(60)
        OUT = child.exitcode
    """
    exitcode, stderr = _run(None, _new_run(), tmp_path, body)
    assert exitcode == 0
    assert "results: dropped 3 (3 in all): 3 results unsent at close" in stderr, stderr


def test_a_script_that_ends_without_close_delivers_what_it_reported(
    shared_api: ApiServer, tmp_path: Path
) -> None:
    # The commonest router: a script that reports and ends, close() forgotten. Its sender
    # is a daemon thread, which the interpreter's end stops wherever it is.
    run = _new_run()
    body = """
        OUT = [router.reporter.report(router.result(f"{RUN}-{i}")) for i in range(20)]
    """
    queued = _run_interpreter(shared_api, run, tmp_path, body)
    assert queued == [True] * 20
    assert _stored(shared_api, run) == (20, 20)


def test_a_reporter_closed_is_not_kept_for_the_exit(shared_api: ApiServer, tmp_path: Path) -> None:
    # A process that makes reporters and closes them (one per job) keeps none of them alive
    # for the exit, and one never used registers nothing. In a process of its own: atexit
    # counts every registration of the process (and never counts one down).
    run = _new_run()
    body = """
        import atexit, gc, weakref
        from controlplane.client import ResultReporter

        before = atexit._ncallbacks()
        made = [ResultReporter(os.environ["URL"], os.environ["KEY"]) for _ in range(5)]
        unused = atexit._ncallbacks() - before
        for i, reporter in enumerate(made):
            reporter.report(router.result(f"{RUN}-{i}"))
            reporter.report(router.result(f"{RUN}-{i}-again"))
        used = atexit._ncallbacks() - before
        delivered = all(reporter.close() for reporter in made)
        first = weakref.ref(made[0])
        del made, reporter
        gc.collect()
        OUT = [unused, used, delivered, first() is None]
    """
    outcome = _run_interpreter(shared_api, run, tmp_path, body)
    # None before a report, one for each at its first, and a closed one is let go.
    assert outcome == [0, 5, True, True]
    assert _stored(shared_api, run) == (10, 10)
