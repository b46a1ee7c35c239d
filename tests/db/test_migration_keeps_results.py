"""A migration never loses or changes a stored result: a database holding results over
several days (payloads kept, a task without payloads, resends) is taken down the latest
migration and up again, and its rows, payloads and recomputed windows are compared.

The latest migration is the one a release adds, so whatever it does to `results` and
`payloads` (a conversion of the tables, new keys) runs here, both ways, on data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import select, text

from controlplane.catalog.service import runtimes
from controlplane.db import get_engine, session_scope
from controlplane.metrics import repository as metrics_repository
from controlplane.metrics.windows import window_start
from controlplane.migrate import alembic_config, current_revisions, head_revisions, upgrade
from controlplane.models import Payload, Result
from controlplane.models.partitions import is_partitioned
from tests.conftest import Api, make_api, make_result

# Four recent days (each gets a partition of its own on PostgreSQL), ending yesterday.
_MIDNIGHT = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
DAYS = [_MIDNIGHT - timedelta(days=d) for d in range(4, 0, -1)]
OUTPUTS = ["refund", "exchange", "complaint", "inquiry"]


@pytest.fixture
def loaded(db_url: str) -> Iterator[Api]:
    """An app whose database holds results on four days, near midnight too, of both tasks."""
    for api in make_api(db_url):
        batch: list[dict[str, Any]] = []
        for d, day in enumerate(DAYS):
            for i in range(40):
                # At three times of the day (a few windows, each holding several results:
                # every window is recomputed twice below); every tenth a few seconds before
                # midnight.
                ts = (
                    day + timedelta(hours=8 * (i % 3), seconds=i)
                    if i % 10
                    else day - timedelta(seconds=i + 1)
                )
                batch.append(
                    make_result(
                        request_id=f"t-{d}-{i}",
                        ts=ts.isoformat(),
                        input_tokens=10 + i * 97,
                        edge={
                            "output": OUTPUTS[i % 4],
                            "latency_ms": 20.0 + i,
                            "confidence": 0.5 + (i % 5) / 10,
                            "model": "small@3",
                        },
                    )
                )
                batch.append(
                    make_result(
                        task="invoice_extract",
                        request_id=f"i-{d}-{i}",
                        ts=ts.isoformat(),
                        input={"text": "invoice"},
                        edge={"output": {"amount": i, "currency": "EUR"}, "latency_ms": 9.0},
                        cloud={"output": {"amount": i % 7, "currency": "EUR"}, "latency_ms": 90.0},
                    )
                )
        # No `ts` at all: stored at the time it was received.
        batch.append(make_result(request_id="no-ts", ts=None))
        for start in range(0, len(batch), 100):
            report = api.post_results({"results": batch[start : start + 100]}).json()
            assert report["rejected"] == [], report
        assert api.post_results({"results": batch[:30]}).json()["duplicates"] == 30
        yield api


# The result columns the latest migration adds (none: controlplane/migrations/versions/
# *_overview_traffic_index.py adds an index of window metrics only), and the window metric
# columns it adds (none).
ADDED_BY_LATEST: tuple[str, ...] = ()
WINDOW_FIELDS_ADDED_BY_LATEST: set[str] = set()


def _without(row: dict[str, Any], names: set[str]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in names}


def _differences(after: Any, before: Any, where: str = "") -> list[str]:
    """Where two recomputed window rows differ: every key and value alike, except that two
    floats may differ in their last bits (a window's cost sums add its rows in the order
    PostgreSQL reads them, which a plan chosen after the migration's statistics may change)."""
    if isinstance(after, dict) and isinstance(before, dict):
        if after.keys() != before.keys():
            return [f"{where}: keys {sorted(map(str, after))} != {sorted(map(str, before))}"]
        return [d for k in after for d in _differences(after[k], before[k], f"{where}/{k}")]
    if isinstance(after, float) and isinstance(before, float):
        close = math.isclose(after, before, rel_tol=1e-12, abs_tol=1e-12)
        return [] if close else [f"{where}: {after!r} != {before!r}"]
    return [] if after == before else [f"{where}: {after!r} != {before!r}"]


def snapshot(url: str) -> dict[str, Any]:
    """Every stored result and payload (ids included), and every window recomputed."""
    engine = get_engine(url)
    with engine.connect() as conn:
        results = conn.execute(select(Result.__table__).order_by(Result.id)).mappings().all()
        payloads = (
            conn.execute(select(Payload.__table__).order_by(Payload.result_id)).mappings().all()
        )
    windows: dict[tuple[str, datetime], Any] = {}
    with session_scope(engine) as session:
        for task, runtime in runtimes(session).values():
            config = runtime.config
            starts = {
                window_start(r["ts"], config.window_seconds)
                for r in results
                if r["task_id"] == task.id
            }
            for start in sorted(starts):
                windows[(task.name, start)] = metrics_repository.aggregate_window(
                    session,
                    task.id,
                    start,
                    start + timedelta(seconds=config.window_seconds),
                    config.length_buckets,
                    config.prices.model_dump(),
                )
    return {
        "results": [dict(r) for r in results],
        "payloads": [dict(p) for p in payloads],
        "windows": windows,
    }


def test_the_latest_migration_down_and_up_keeps_every_result(loaded: Api) -> None:
    url = loaded.url
    before = snapshot(url)
    assert len(before["results"]) == 4 * 40 * 2 + 1
    assert len(before["payloads"]) > 100  # ticket_classify keeps payloads, invoice_extract none
    assert sum(w["all"]["n_results"] for w in before["windows"].values()) == 4 * 40 * 2 + 1

    get_engine(url).dispose()
    with get_engine(url).connect() as conn:
        partitioned = is_partitioned(conn)
    command.downgrade(alembic_config(url), "-1")
    with get_engine(url).connect() as conn:
        # Down, every row is still there (partitioned or not, as that revision has it).
        assert conn.execute(text("SELECT count(*) FROM results")).scalar_one() == len(
            before["results"]
        )
    get_engine(url).dispose()
    upgrade(url)
    get_engine(url).dispose()
    with get_engine(url).connect() as conn:
        assert current_revisions(conn) == head_revisions()
        assert is_partitioned(conn) == partitioned
        if conn.dialect.name == "postgresql":
            assert is_partitioned(conn)
            # Each day's rows in that day's partition (those a few seconds before midnight
            # in the day before), none in the default partition.
            for day in DAYS:
                held = conn.execute(text(f"SELECT count(*) FROM results_p{day:%Y%m%d}"))
                assert held.scalar_one() == sum(
                    1 for r in before["results"] if r["ts"].date() == day.date()
                )
            assert conn.execute(text("SELECT count(*) FROM results_default")).scalar_one() == 0

    after = snapshot(url)
    assert len(after["results"]) == len(before["results"])
    assert len(after["payloads"]) == len(before["payloads"])
    # What the latest migration adds is dropped on the way down
    # by design and comes back empty; every column older than it must survive untouched.
    added = set(ADDED_BY_LATEST)
    assert [_without(r, added) for r in after["results"]] == [
        _without(r, added) for r in before["results"]
    ]
    assert after["payloads"] == before["payloads"]
    added_fields = WINDOW_FIELDS_ADDED_BY_LATEST
    differences = _differences(
        {
            key: {b: _without(m, added_fields) for b, m in w.items()}
            for key, w in after["windows"].items()
        },
        {
            key: {b: _without(m, added_fields) for b, m in w.items()}
            for key, w in before["windows"].items()
        },
    )
    assert not differences, differences[:10]

    # Idempotent ingest holds across the migration, by (task, request id) alone: a resend
    # is a duplicate even when its `ts` differs from the stored one (another day here, or
    # none at all, which stores the time received), and a new result is accepted.
    resend = [
        make_result(request_id=f"t-{d}-{i}", ts=(DAYS[d] + timedelta(days=1)).isoformat())
        for d in range(4)
        for i in range(3)
    ]
    resend.append(make_result(request_id="no-ts", ts=None))
    assert loaded.post_results({"results": resend}).json()["duplicates"] == 13
    assert loaded.post_results(make_result(request_id="after")).json()["accepted"] == 1
