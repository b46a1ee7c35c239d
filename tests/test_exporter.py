"""/metrics through a real API: the histogram of `POST /v1/results` handling times (in
memory in the embedded mode; in Redis with PostgreSQL, where any replica reads the same),
and the decisions counter against a count of the decisions table."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.metrics.counters import CODES, IngestCounters
from controlplane.models import Decision, Task
from controlplane.rollout.repository import EVERY_TASK_ACTIONS, TASK_ACTIONS
from controlplane.rollout.stages import mark_regrade
from tests.conftest import Api, make_api, make_result

HISTOGRAM = "shadowplane_ingest_request_duration_seconds"


@pytest.fixture(params=["embedded", pytest.param("shared", marks=pytest.mark.integration)])
def counted_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The embedded API (SQLite, counters in memory) or PostgreSQL with the counters in Redis."""
    if request.param == "embedded":
        yield from make_api(request.getfixturevalue("sqlite_url"))
    else:
        redis_url = request.getfixturevalue("redis_url")()
        yield from make_api(request.getfixturevalue("pg_url"), redis_url=redis_url)


def scrape(api: Api) -> dict[str, list[Sample]]:
    response = api.client.get("/metrics", headers=api.headers("read"))
    assert response.status_code == 200, response.text
    return {f.name: f.samples for f in text_string_to_metric_families(response.text)}


def histogram(samples: list[Sample], code: str) -> tuple[list[tuple[float, float]], float, float]:
    """(le, cumulative count) pairs, sum and count of one status code's series."""
    mine = [s for s in samples if s.labels["code"] == code]
    buckets = [(float(s.labels["le"]), s.value) for s in mine if s.name == f"{HISTOGRAM}_bucket"]
    (total,) = [s.value for s in mine if s.name == f"{HISTOGRAM}_sum"]
    (count,) = [s.value for s in mine if s.name == f"{HISTOGRAM}_count"]
    return buckets, total, count


def test_ingest_handling_times_are_a_histogram_by_status_code(
    counted_api: Api, request: pytest.FixtureRequest
) -> None:
    api = counted_api
    started = time.perf_counter()
    for body in (
        make_result(),
        {"results": [make_result() for _ in range(20)]},
        {"results": [make_result(), {**make_result(), "served": "neither"}]},  # one bad item
    ):
        assert api.post_results(body).status_code == 200
    refused = api.post_results({"results": "not a list"})
    assert refused.status_code == 422, refused.text
    spent = time.perf_counter() - started

    samples = scrape(api)[HISTOGRAM]
    answered = {code: histogram(samples, code) for code in CODES}
    # No batch failed in the database here (500, 503: tests/ingest/test_ingest_api.py).
    assert {code: count for code, (_, _, count) in answered.items()} == {
        "200": 3,
        "422": 1,
        "500": 0,
        "503": 0,
    }
    for buckets, total, count in answered.values():
        bounds = [le for le, _ in buckets]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf
        counts = [n for _, n in buckets]
        assert counts == sorted(counts) and counts[-1] == count  # cumulative, +Inf is all
        # Each request lies between its bucket's bounds, so the sum does too (to the
        # microsecond each is kept to).
        per_bucket = [n - before for n, before in zip(counts, [0.0, *counts], strict=False)]
        lower = sum(n * low for n, low in zip(per_bucket, [0.0, *bounds], strict=False))
        upper = sum(n * high for n, high in zip(per_bucket, bounds, strict=True) if n)
        assert lower - 1e-6 * count <= total <= upper + 1e-6 * count
    # The requests ran one after another inside `spent`: their times add up to less.
    assert 0 < sum(total for _, total, _ in answered.values()) < spent

    if request.node.callspec.params["counted_api"] == "shared":
        # Another replica reads the same figures from Redis.
        other = IngestCounters(api.client.app.state.settings.redis_url).read()  # type: ignore[attr-defined]
        for code, (buckets, total, _) in answered.items():
            times = other.durations[code]
            assert [n for _, n in times.buckets()] == [n for _, n in buckets]
            assert times.sum_us / 1_000_000 == pytest.approx(total)


def decisions_exported(api: Api) -> dict[tuple[str, str], float]:
    samples = scrape(api)["shadowplane_decisions"]
    assert {s.name for s in samples} == {"shadowplane_decisions_total"}
    return {(s.labels["task"], s.labels["action"]): s.value for s in samples}


def test_decisions_total_counts_the_decisions_table_per_task_and_action(api: Api) -> None:
    tasks = ("invoice_extract", "ticket_classify")
    zeros = {(task, action): 0.0 for task in tasks for action in TASK_ACTIONS}
    zeros |= {("", action): 0.0 for action in EVERY_TASK_ACTIONS}
    # Before any decision every series is there at zero: the first one is an increase.
    assert decisions_exported(api) == zeros

    for path, body in (
        ("/v1/tasks/ticket_classify/promote", {"reason": "gate passed", "force": True}),
        ("/v1/tasks/ticket_classify/rollback", {"reason": "agreement fell"}),
        ("/v1/kill", {"reason": "incident 7"}),
        ("/v1/kill/lift", {"reason": "incident 7 over"}),
        ("/v1/tasks/ticket_classify/rearm", {"reason": "new model"}),
        ("/v1/tasks/ticket_classify/promote", {"reason": "again", "force": True}),
        ("/v1/tasks/invoice_extract/promote", {"reason": "gate passed", "force": True}),
    ):
        response = api.client.post(path, json=body, headers=api.headers())
        assert response.status_code == 200, response.text
    with session_scope(api.engine) as session:  # a decision that does not move the flag
        task = session.scalars(select(Task).where(Task.name == "ticket_classify")).one()
        rollback = session.scalars(select(Decision).where(Decision.action == "rollback")).one()
        mark_regrade(session, task, rollback, at=None)

    with session_scope(api.engine) as session:
        rows = session.execute(
            select(Task.name, Decision.action).outerjoin(Task, Task.id == Decision.task_id)
        ).all()
    counted = Counter((task or "", action) for task, action in rows)
    assert counted == {
        ("ticket_classify", "promote"): 2,
        ("ticket_classify", "rollback"): 1,
        ("ticket_classify", "rearm"): 1,
        ("ticket_classify", "needs_regrade"): 1,
        ("invoice_extract", "promote"): 1,
        ("", "kill"): 1,
        ("", "lift"): 1,
    }
    assert decisions_exported(api) == {**zeros, **{k: float(n) for k, n in counted.items()}}
