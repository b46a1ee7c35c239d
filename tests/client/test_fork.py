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
