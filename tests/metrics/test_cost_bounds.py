"""A cost no bill can hold is refused at ingest, alone, naming its field; the window sums of
the costs accepted stay finite. Two results of `cost` 1.7e308 each (finite, so accepted
before) made PostgreSQL's float8 SUM raise "value out of range: overflow": the task's window
was never computed again, its alerts and rollback rule went blind."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.windowdata import T0, WINDOW


def _result(i: int, **overrides: Any) -> dict[str, Any]:
    return make_result(
        request_id=f"cost-{i}",
        task="metrics_task",
        ts=(T0 + timedelta(seconds=1 + i)).isoformat(),
        input_tokens=100,
        **overrides,
    )


def _post(api: Api, results: list[dict[str, Any]]) -> dict[str, Any]:
    response = api.client.post(
        "/v1/results", json={"results": results}, headers=api.headers("ingest")
    )
    assert response.status_code in (200, 207), response.text
    body: dict[str, Any] = response.json()
    return body


def test_costs_past_any_bill_are_refused_alone_and_the_window_is_computed(
    pg_metrics_api: Api,
) -> None:
    api = pg_metrics_api
    huge = 1.7e308
    answer = _post(
        api,
        [
            _result(0, edge={"output": "refund", "cost": huge}),
            _result(1, cloud={"output": "refund", "cost": huge}),
            _result(2, edge={"output": "refund", "cost": 0.002}),
        ],
    )
    rejected = {r["index"]: r for r in answer["rejected"]}
    assert sorted(rejected) == [0, 1], answer
    assert "edge.cost" in str(rejected[0]), rejected[0]
    assert "cloud.cost" in str(rejected[1]), rejected[1]
    assert answer["accepted"] == 1, answer

    report = run_pass(api.engine, T0 + timedelta(seconds=WINDOW * 3))
    assert not report.failed, report.failed
    response = api.client.get(
        "/v1/tasks/metrics_task/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(seconds=WINDOW)).isoformat()},
        headers=api.headers("read"),
    )
    assert response.status_code == 200, response.text
    every = [w for w in response.json()["windows"] if w["bucket"] == "all"]
    assert every and every[0]["edge_cost"] is not None, every
