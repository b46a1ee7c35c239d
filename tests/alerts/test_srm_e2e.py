"""The sample-ratio alert end to end: results routed by the real routing rule and posted
through ingest (ids hashed, buckets stored), windows closed by the pass, the `srm` alert
opened, kept single, announced and resolved — on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from controlplane.client.routing import route
from controlplane.client.sticky import sticky_bucket
from controlplane.db import session_scope
from controlplane.models import OutboxEvent, Task
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api
from tests.windowdata import post_all

WINDOW, LATENESS, CAP = 60, 30, 2000


def config(name: str) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "max_input_tokens": CAP,
        # ids are stored hashed: the check reads the bucket ingest computed from the raw id
        "payload_policy": "redacted",
        "promotion": {"canary_steps": [25]},
    }


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("srm_task"), actor="test")
            apply_config(session, config("srm_shadow"), actor="test")
        yield api


def results(
    task: str,
    flag: dict[str, Any],
    start: datetime,
    k: int,
    *,
    rogue: bool,
    sessions: int = 120,
    misroute: str | None = None,
) -> list[dict[str, Any]]:
    """One window of a router's results: sessions of a few requests, routed by the flag
    (a rogue router serves 30% of its sessions from the edge whatever the flag says);
    some requests ineligible, over the cap, or from a router that had no flag yet; 5% of
    sessions send no session id. `misroute` makes the router otherwise faithful send to
    the edge what the rule keeps on the cloud: `ineligible` (what it reported decision
    cloud for), `keyless` (requests without a session id), or report no flag version
    (`unversioned`)."""
    rng = random.Random(f"{task}-{k}-{rogue}-{misroute}")
    out = []
    for j in range(sessions):
        session = None if j % 20 == 0 else f"s-{k}-{j}"
        ignored = rogue and session is not None and (sticky_bucket("rogue", session) or 0) < 30
        for i in range(rng.randrange(2, 7)):
            tokens = rng.choice([300, 900, CAP + 500]) if i else 300
            eligible = rng.random() < 0.9
            known = rng.random() > 0.03
            r = route(
                flag if known else None,
                task,
                draw=rng.random(),
                session_id=session,
                input_tokens=tokens,
                eligible=eligible,
            )
            served = "edge" if ignored and eligible else r.served
            if misroute == "ineligible" and not eligible and known:
                served = "edge"
            if misroute == "keyless" and session is None and eligible and known:
                served = "edge"
            version = None if misroute == "unversioned" else r.flag_version
            degraded = served == "edge" and rng.random() < 0.1
            out.append(
                {
                    "request_id": f"{task}-{k}-{j}-{i}",
                    "task": task,
                    "ts": (
                        start + timedelta(seconds=k * WINDOW + rng.uniform(0, WINDOW - 1))
                    ).isoformat(),
                    "session_id": session,
                    "input_tokens": tokens,
                    "decision": "edge" if eligible else "cloud",
                    "served": "cloud" if degraded else served,
                    "degraded": degraded,
                    "degrade_reason": "low_confidence" if degraded else None,
                    "flag_version": version,
                    "edge": {"output": "refund", "model": "small@3"},
                    "cloud": {"output": "refund", "model": "large@7"},
                }
            )
    return out


def backdate(api: Api, start: datetime) -> None:
    """The two tasks of these tests exist, in their stage, from `start` on (the first
    window). The suite's other tasks keep their creation time, later than every clock a
    pass runs at here, so no pass computes their empty windows."""
    with session_scope(api.engine) as session:
        session.execute(
            update(Task)
            .where(Task.name.in_(["srm_task", "srm_shadow"]))
            .values(created_at=start, stage_changed_at=start)
        )


def srm_alerts(api: Api, task: str) -> list[dict[str, Any]]:
    response = api.client.get("/v1/alerts", params={"task": task}, headers=api.headers("read"))
    assert response.status_code == 200, response.text
    return [a for a in response.json()["alerts"] if a["kind"] == "srm"]


def test_a_router_ignoring_its_flag_opens_one_srm_alert_that_resolves_when_it_follows(
    api: Api,
) -> None:
    promoted = api.client.post(
        "/v1/tasks/srm_task/promote", json={"reason": "canary", "force": True},
        headers=api.headers(),
    )  # fmt: skip
    assert promoted.status_code == 200, promoted.text
    flag = api.client.get("/v1/flags/srm_task", headers=api.headers("flags:read")).json()
    assert (flag["stage"], flag["edge_percent"]) == ("canary", 25)
    shadow_flag = api.client.get("/v1/flags/srm_shadow", headers=api.headers("flags:read")).json()
    assert shadow_flag["stage"] == "shadow"
    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW + 8 * WINDOW)
    backdate(api, start)

    def window(k: int, *, rogue: bool) -> None:
        post_all(api, results("srm_task", flag, start, k, rogue=rogue))
        # A task outside canary is not judged, however its router routes.
        post_all(api, results("srm_shadow", shadow_flag, start, k, rogue=True))
        run_pass(api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS))

    window(0, rogue=False)
    assert srm_alerts(api, "srm_task") == []

    window(1, rogue=True)
    [alert] = srm_alerts(api, "srm_task")
    assert alert["state"] == "open"
    assert alert["value"] > alert["baseline"] > 0
    message = alert["message"]
    for part in ("Routers do not follow their flag", f"v{flag['version']}, edge_percent 25",
                 " requests, where the routing rule", "reported no flag version",
                 "went to the edge where the rule says cloud"):  # fmt: skip
        assert part in message, message

    window(2, rogue=True)  # still skewed: the same alert, updated
    [again] = srm_alerts(api, "srm_task")
    assert again["id"] == alert["id"] and again["state"] == "open"

    window(3, rogue=False)
    [resolved] = srm_alerts(api, "srm_task")
    assert resolved["id"] == alert["id"] and resolved["state"] == "resolved"
    assert srm_alerts(api, "srm_shadow") == []

    with session_scope(api.engine) as session:
        announced = [
            (e.task, e.document["action"])
            for e in session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))
            if e.kind == "alert" and e.document["rule"] == "srm"
        ]
    assert announced == [("srm_task", "alert_opened"), ("srm_task", "alert_resolved")]


def test_requests_the_rule_keeps_on_the_cloud_sent_to_the_edge_open_the_alert(api: Api) -> None:
    """Once never judged: a router serving from the edge what it reported ineligible,
    canary requests without a session id, or reporting no flag version."""
    promoted = api.client.post(
        "/v1/tasks/srm_task/promote", json={"reason": "canary", "force": True},
        headers=api.headers(),
    )  # fmt: skip
    assert promoted.status_code == 200, promoted.text
    flag = api.client.get("/v1/flags/srm_task", headers=api.headers("flags:read")).json()
    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW + 10 * WINDOW)
    backdate(api, start)

    def window(k: int, misroute: str | None) -> None:
        post_all(api, results("srm_task", flag, start, k, rogue=False, misroute=misroute))
        run_pass(api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS))

    window(0, None)
    assert srm_alerts(api, "srm_task") == []
    seen: set[int] = set()
    cases = [("ineligible", "the router itself reported as ineligible (decision cloud)"),
             ("keyless", "without the sticky key their version splits by"),
             ("unversioned", "with no flag version or one the flag history does not know")]  # fmt: skip
    for k, (misroute, words) in enumerate(cases, start=1):
        window(2 * k - 1, misroute)
        [alert] = [a for a in srm_alerts(api, "srm_task") if a["state"] == "open"]
        assert alert["id"] not in seen
        seen.add(alert["id"])
        assert "Routers do not follow their flag" in alert["message"], alert["message"]
        assert words in alert["message"], alert["message"]
        window(2 * k, None)  # following again: resolved
        assert [a for a in srm_alerts(api, "srm_task") if a["state"] == "open"] == []
    assert {a["id"] for a in srm_alerts(api, "srm_task")} == seen
