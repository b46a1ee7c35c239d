"""A router process that forks after its clients started (gunicorn `--preload`): each child
has clients of its own. The end-to-end cases (a kill reaching a forked worker, its reports
delivered, `shadow_compare` serving its edge) are in tests/hostile/test_router_author_hostile.py;
here, what a child that never uses the flag client costs: no thread, no connection."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.liveapi import run_python

CHILD = """
import json, os, threading, time
from controlplane.client import FlagClient

def flag_threads():
    return sum(t.name == "shadowplane-flags" and t.is_alive() for t in threading.enumerate())

# Nothing listens on port 9: the thread fails its fetches and backs off, which is enough.
flags = FlagClient("http://127.0.0.1:9", "k", stream=False, poll_interval=0.05).start()
flags.wait_ready(5)
parent = flag_threads()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    before = flag_threads()
    served = flags.route("t", session_id="s").served  # the first use starts its thread
    after = flag_threads()
    os.write(w, json.dumps([before, served, after]).encode())
    os._exit(0)
os.close(w)
data = os.read(r, 4096)
os.waitpid(pid, 0)
print(json.dumps({"parent": parent, "child": json.loads(data)}))
"""


def test_a_forked_child_starts_the_flag_thread_at_its_first_use_only(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    done = run_python(CHILD, env, tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    # The parent's thread runs; the child has none until it routes, then its own; a copy
    # never fetched routes to the cloud.
    assert found == {"parent": 1, "child": [0, "cloud", 1]}, found


EXECUTOR_CHILD = """
import json, logging, os, time
from concurrent.futures import ThreadPoolExecutor
from controlplane.client import shadow_compare
from tests.client.holding import EdgeOnly, Recording

warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("shadowplane.client").addHandler(Keep())

# The router's executor, made at import and warmed up before the fork (gunicorn --preload).
pool = ThreadPoolExecutor(4)
pool.submit(lambda: None).result()

def serve(n):
    reporter = Recording()
    answers = []
    for i in range(n):
        answers.append(shadow_compare(
            f"q{i}", lambda p: "edge:" + p, lambda p: "cloud:" + p, client=EdgeOnly(),
            reporter=reporter, task="t", input_tokens=3, edge_timeout=2.0, executor=pool))
    return answers, [r["served"] for r in reporter.got]

parent = serve(1)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    child = serve(3)
    fresh = ThreadPoolExecutor(2)  # made in the child: it is used
    used = []
    shadow_compare("x", lambda p: (used.append(1), "edge:" + p)[1], lambda p: "cloud:" + p,
                   client=EdgeOnly(), reporter=Recording(), task="t", input_tokens=3,
                   executor=fresh)
    threads = len(fresh._threads)
    os.write(w, json.dumps([child, len(warnings), threads, used]).encode())
    os._exit(0)
os.close(w)
data = os.read(r, 65536)
os.waitpid(pid, 0)
print(json.dumps({"parent": parent, "warnings": len(warnings), "child": json.loads(data)}))
"""


def test_an_executor_used_before_the_fork_does_not_hold_the_childs_edge_calls(
    tmp_path: Path,
) -> None:
    # Its threads are the parent's: the child's first call was queued with no thread to run
    # it (one per thread idle at the fork), waited its edge_timeout and was served by the
    # cloud as an edge timeout.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    done = run_python(EXECUTOR_CHILD, env, tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["parent"] == [["edge:q0"], ["edge"]]
    assert found["warnings"] == 0
    child, warnings, threads, used = found["child"]
    assert child == [["edge:q0", "edge:q1", "edge:q2"], ["edge", "edge", "edge"]]
    assert warnings == 1  # said once, not per call
    assert (threads, used) == (1, [1])  # an executor made in the child runs the calls
