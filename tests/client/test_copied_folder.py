"""The copied-folder check: `controlplane/client/` copied into a router's repository under
another name works in a fresh virtualenv that holds nothing but `httpx`: the routing rule
and its vectors, and `FlagClient`, `ResultReporter` and `shadow_compare` against a running
API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import controlplane.client
from tests.liveapi import ApiServer

ROUTER = r"""
import json, sys

import shadowplane_client as sp

base, key = sys.argv[1], sys.argv[2]
here = sp.__file__.rsplit("/", 1)[0]
vectors = json.load(open(f"{here}/routing_vectors.json", encoding="utf-8"))["cases"]
for case in vectors:
    got = sp.evaluate(case["flag"], case["task"], **case["request"])
    assert got.served == case["expected"]["served"], case["name"]
buckets = json.load(open(f"{here}/sticky_bucket_vectors.json", encoding="utf-8"))["vectors"]
assert all(sp.sticky_bucket(v["task"], v["key"]) == v["bucket"] for v in buckets)

with sp.FlagClient(base, key, stream=True) as flags, sp.ResultReporter(base, key) as reporter:
    assert flags.wait_ready(60), flags.status()
    route = flags.route("ticket_classify", session_id="s-1", input_tokens=100)
    answer = sp.shadow_compare(
        "hello",
        lambda p: "refund",
        lambda p: "refund",
        client=flags,
        task="ticket_classify",
        reporter=reporter,
        input_tokens=100,
        session_id="s-1",
        request_id="copied-1",
    )
    mode = flags.status().mode
delivered = reporter.accepted
heavy = sorted(m for m in sys.modules if m.split(".")[0] in
               {"controlplane", "pydantic", "fastapi", "sqlalchemy", "starlette"})
print(json.dumps({"served": route.served, "version": route.flag_version, "answer": answer,
                  "mode": mode, "delivered": delivered, "cases": len(vectors),
                  "heavy": heavy}))
"""


@pytest.mark.integration  # installs httpx from the package index into a fresh virtualenv
def test_the_client_folder_works_alone_in_a_fresh_venv_with_only_httpx(
    live_api: ApiServer, tmp_path: Path
) -> None:
    live_api.launch()  # it comes up while the virtualenv is made
    venv = tmp_path / "venv"
    # Not even pip in it: this test's pip installs httpx (and what httpx needs) into it.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "httpx"],
        check=True,
        timeout=600,
        env=env,
        capture_output=True,
    )
    router = tmp_path / "router"
    shutil.copytree(
        Path(controlplane.client.__file__).parent,
        router / "shadowplane_client",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (router / "router.py").write_text(ROUTER, encoding="utf-8")

    live_api.wait_ready()
    for _ in range(3):  # to full: the edge serves within the cap
        live_api.call(
            "POST", "/v1/tasks/ticket_classify/promote", json={"reason": "t", "force": True}
        ).raise_for_status()
    done = subprocess.run(
        [str(python), "router.py", live_api.base, live_api.keys["router"]],
        cwd=router,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["heavy"] == [] and out["cases"] > 30
    assert (out["served"], out["answer"], out["mode"], out["delivered"]) == (
        "edge",
        "refund",
        "stream",
        1,
    )
    stored = live_api.call("GET", "/v1/results/ticket_classify/copied-1", scope="read")
    assert stored.status_code == 200 and stored.json()["served"] == "edge"
