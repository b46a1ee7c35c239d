"""The ingest counters are shared by every API process through Redis: two replicas on one
PostgreSQL and one Redis, each taking part of the traffic, export the same totals (results
and requests timed), and the totals are the sum of what each took (real processes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import make_result
from tests.liveapi import ApiServer, RedisServer, seed, stop_all

pytestmark = pytest.mark.integration


@contextmanager
def replicas(pg_url: str, redis_url: str, folder: Path) -> Iterator[tuple[ApiServer, ...]]:
    settings = {"SHADOWPLANE_REDIS_URL": redis_url}
    apis = (
        ApiServer(pg_url, folder / "a.log", settings=settings),
        ApiServer(pg_url, folder / "b.log", settings=settings),
    )
    try:
        for api in apis:
            api.launch()
        yield tuple(api.wait_ready() for api in apis)
    finally:
        stop_all(*apis)


def totals(api: ApiServer) -> dict[str, float]:
    """Results per outcome and requests per status code (the handling-time histogram's
    count) as one replica exports them."""
    response = api.call("GET", "/metrics", scope="read")
    assert response.status_code == 200, response.text
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert [s.value for s in families["shadowplane_ingest_counters_up"].samples] == [1]
    results = families["shadowplane_ingest_results"].samples
    durations = families["shadowplane_ingest_request_duration_seconds"].samples
    return {s.labels["outcome"]: s.value for s in results} | {
        f"requests {s.labels['code']}": s.value for s in durations if s.name.endswith("_count")
    }


def test_two_replicas_export_the_same_ingest_totals(pg_url: str, tmp_path: Path) -> None:
    keys = seed(pg_url)
    redis = RedisServer(tmp_path).start()
    now = datetime.now(UTC).isoformat()
    try:
        with replicas(pg_url, redis.url, tmp_path) as (one, two):
            one.keys = two.keys = keys
            sent = {"accepted": 0, "duplicate": 0, "rejected": 0, "requests 200": 0}
            for api, n in ((one, 7), (two, 5)):
                batch = [make_result(ts=now) for _ in range(n)]
                bad = {**make_result(ts=now), "served": "neither"}
                body = {"results": [*batch, batch[0], bad]}  # a duplicate, a bad item
                response = api.call("POST", "/v1/results", scope="ingest", json=body)
                assert response.status_code == 200, response.text
                report = response.json()
                assert (report["accepted"], report["duplicates"]) == (n, 1), report
                sent["accepted"] += n
                sent["duplicate"] += 1
                sent["rejected"] += 1
                sent["requests 200"] += 1
            refused = one.call("POST", "/v1/results", scope="ingest", json={"results": 7})
            assert refused.status_code == 422, refused.text
            sent["requests 422"] = 1
            sent["requests 500"] = sent["requests 503"] = 0  # no batch failed
            # Each replica took its own part; each exports the whole.
            assert totals(one) == totals(two) == {k: float(v) for k, v in sent.items()}
    finally:
        redis.stop()
