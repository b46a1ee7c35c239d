"""`shadowplane tick` that fires a rollback announces it: a signed webhook reaches a
receiver, its timestamp and delivery id checked with `verify_signature`."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from controlplane.client import verify_signature
from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import make_api
from tests.liveapi import run_cli
from tests.notify.conftest import SECRET, clean_env
from tests.notify.receiver import Receiver
from tests.rollout.test_rollback_e2e import (
    LATENESS,
    WINDOW,
    config,
    promote,
    rewind,
    window_results,
)
from tests.windowdata import post_all


def test_tick_firing_a_rollback_delivers_a_signed_webhook(
    sqlite_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    # The API of this test sends nothing (no webhook settings): only `tick` does.
    for api in make_api(sqlite_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("canary_task"), actor="test")
        assert promote(api, "canary_task").status_code == 200
        start = rewind(api, tasks=("canary_task",))
        for k in range(3):
            post_all(api, window_results("canary_task", start, k, {"2048+": 0.4}))
        # Two breaching windows closed here; the third closes in `tick`, which rolls back.
        for k in range(2):
            run_pass(api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS))
        assert receiver.received == []
        clock = start + timedelta(seconds=3 * WINDOW + LATENESS)
        env = clean_env(
            SHADOWPLANE_DATABASE_URL=sqlite_url,
            SHADOWPLANE_WEBHOOK_URLS=receiver.url,
            SHADOWPLANE_WEBHOOK_SECRET=SECRET,
            SHADOWPLANE_PUBLIC_URL="https://shadowplane.example",
        )
        # `shadowplane tick` as a process of its own (forked from one that imported the app).
        done = run_cli(["tick", "--now", clock.isoformat()], env, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "delivered" in done.stdout, done.stdout

        # `tick` has returned: everything it announced is already at the receiver.
        rollbacks = [r for r in receiver.received if r.document.get("action") == "rollback"]
        assert len(rollbacks) == 1, [r.document for r in receiver.received]
        [got] = rollbacks
        # The real clock: the signature's timestamp is the time it was sent.
        assert verify_signature(SECRET, got.headers, got.body)
        assert not verify_signature(SECRET, got.headers, got.body + b" ")
        document = got.document
        assert document["delivery_id"] == got.delivery_id
        assert (document["kind"], document["task"], document["actor"]) == (
            "decision",
            "canary_task",
            "policy",
        )
        assert document["bucket"] == "2048+" and document["rule"] == "agreement >= 0.9 per bucket"
        assert document["evidence"]["windows"] == 3
        assert document["links"]["task"] == "https://shadowplane.example/v1/tasks/canary_task"
        stage = api.client.get("/v1/tasks/canary_task", headers=api.headers("read")).json()
        assert stage["stage"] == "rolled_back"
        # The deliveries list shows it delivered, under the id the receiver saw.
        listed = api.client.get(
            "/v1/webhooks/deliveries", params={"task": "canary_task"}, headers=api.headers()
        ).json()["deliveries"]
        by_id = {d["delivery_id"]: d for d in listed}
        assert by_id[got.delivery_id]["status"] == "delivered"
        # Every delivery id arrived once: the forced promote is announced too.
        ids = [r.delivery_id for r in receiver.received]
        assert len(ids) == len(set(ids))
        assert {"promote", "rollback"} <= {r.document.get("action") for r in receiver.received}
