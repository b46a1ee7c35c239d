"""Alerts open, get acknowledged and resolve by themselves, on windows crafted from real results."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import update

from controlplane.catalog.schemas import DEFAULT_RULES
from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.grading_support import offload_grade_of_lengths
from tests.windowdata import LATENESS, METRICS_TASK, T0, WINDOW, post_all

DEFAULT_RULES_JSON = [
    r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in DEFAULT_RULES
]


def _window(
    k: int, *, n: int = 100, conflicts: int = 4, edge: int = 0, tokens: int = 300
) -> list[dict[str, Any]]:
    start = T0 + timedelta(seconds=k * WINDOW)
    return [
        make_result(
            request_id=f"a-{k}-{i}",
            task="metrics_task",
            ts=(start + timedelta(seconds=i * WINDOW / n)).isoformat(),
            input_tokens=tokens + i % 7,
            served="edge" if i < edge else "cloud",
            edge={"output": "exchange" if i < conflicts else "refund"},
        )
        for i in range(n)
    ]


def _alerts(api: Api, **params: str) -> list[dict[str, Any]]:
    response = api.client.get("/v1/alerts", params=params, headers=api.headers("read"))
    assert response.status_code == 200, response.text
    return [a for a in response.json()["alerts"] if a["task"] == "metrics_task"]


def _close(api: Api, k: int) -> None:
    run_pass(api.engine, T0 + timedelta(seconds=(k + 1) * WINDOW + LATENESS))


def test_a_shifted_window_opens_alerts_that_a_person_acks_and_a_normal_window_resolves(
    metrics_api: Api,
) -> None:
    # The input-shift alert compares each window (a span of one window here, judged from
    # 50 results) with the lengths of its offload grade: those of the normal windows.
    shift_rule = {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": "1m",
                  "min_samples": 50}  # fmt: skip
    with session_scope(metrics_api.engine) as session:
        apply_config(
            session,
            {**METRICS_TASK, "rollback": {"rules": [*DEFAULT_RULES_JSON[:-1], shift_rule]}},
            actor="test",
        )
        task = session.query(Task).filter(Task.name == "metrics_task").one()
        task.stage_changed_at = T0 - timedelta(hours=1)
        # A task in shadow is compared with the input lengths of its latest offload grade.
        offload_grade_of_lengths(session, task, [300 + i % 7 for i in range(100)], T0)
    for k in range(4):
        post_all(metrics_api, _window(k))
    _close(metrics_api, 3)
    assert _alerts(metrics_api) == []

    # Conflicts 4% → 40%, the edge suddenly serves half, inputs four times longer.
    post_all(metrics_api, _window(4, conflicts=40, edge=50, tokens=1200))
    _close(metrics_api, 4)
    opened = {a["kind"]: a for a in _alerts(metrics_api, state="open")}
    assert set(opened) == {"conflict_jump", "edge_share_jump", "input_shift"}
    shifted = opened["input_shift"]
    assert shifted["value"] > 0.25 and shifted["baseline"] == 0.1
    assert "population stability index" in shifted["message"]
    assert "against the offload grade of 2026-11-30" in shifted["message"]
    conflict = opened["conflict_jump"]
    assert conflict["value"] == 0.4 and conflict["baseline"] == 0.04
    assert conflict["window_start"].startswith(
        (T0 + timedelta(seconds=4 * WINDOW)).isoformat()[:19]
    )

    ack = metrics_api.client.post(
        f"/v1/alerts/{conflict['id']}/ack", json={"note": "looking"}, headers=metrics_api.headers()
    )
    assert ack.status_code == 200 and ack.json()["state"] == "acknowledged"
    assert ack.json()["acknowledged_by"] == "admin-key"
    assert (
        metrics_api.client.post(
            f"/v1/alerts/{conflict['id']}/ack", headers=metrics_api.headers("read")
        ).status_code
        == 403
    )
    assert (
        metrics_api.client.post("/v1/alerts/999999/ack", headers=metrics_api.headers()).status_code
        == 404
    )

    # Conflicts and edge share still off in the next window: still one alert per kind, and
    # the acknowledged one stays acknowledged; input lengths are back, so the drift resolves.
    post_all(metrics_api, _window(5, conflicts=45, edge=50))
    _close(metrics_api, 5)
    states = {a["kind"]: a["state"] for a in _alerts(metrics_api)}
    assert len(_alerts(metrics_api)) == 3
    assert states == {
        "conflict_jump": "acknowledged",
        "edge_share_jump": "open",
        "input_shift": "resolved",
    }

    post_all(metrics_api, _window(6))
    _close(metrics_api, 6)
    states = {a["kind"]: a["state"] for a in _alerts(metrics_api)}
    assert set(states.values()) == {"resolved"} and len(states) == 3
    audit = metrics_api.client.get(
        "/v1/audit", params={"task": "metrics_task"}, headers=metrics_api.headers()
    )
    assert any(e["action"] == "alert.ack" for e in audit.json()["entries"])


def test_the_silence_alert_fires_for_a_quiet_task_and_resolves_when_traffic_returns(
    metrics_api: Api,
) -> None:
    from datetime import UTC, datetime

    # The task has existed in shadow for ten minutes (results may not lie ahead of the
    # clock, so the task is moved back rather than the clock forward), with no traffic.
    later = datetime.now(UTC)
    with session_scope(metrics_api.engine) as session:
        session.execute(
            update(Task)
            .where(Task.name == "metrics_task")
            .values(
                created_at=later - timedelta(minutes=10),
                stage_changed_at=later - timedelta(minutes=10),
            )
        )
    run_pass(metrics_api.engine, later)
    silent = _alerts(metrics_api, state="open")
    assert [a["kind"] for a in silent] == ["no_traffic"]
    assert "No results for 3 windows" in silent[0]["message"]

    start = later - timedelta(seconds=later.timestamp() % WINDOW)
    post_all(
        metrics_api,
        [
            make_result(
                request_id=f"back-{i}",
                task="metrics_task",
                ts=(start + timedelta(seconds=i)).isoformat(),
            )
            for i in range(5)
        ],
    )
    run_pass(metrics_api.engine, start + timedelta(seconds=WINDOW + LATENESS))
    assert [a["state"] for a in _alerts(metrics_api)] == ["resolved"]


def test_an_alert_id_beyond_64_bits_is_refused_not_a_server_error(api: Api) -> None:
    # Found by the schema fuzzer: the database cannot compare such a number (500 before).
    response = api.client.post("/v1/alerts/36893488147419103231/ack", headers=api.headers())
    assert response.status_code == 422, response.text
    assert "alert_id" in response.text
    assert api.client.post("/v1/alerts/1/ack", headers=api.headers()).status_code == 404
