"""The windows API as JSON and CSV, its errors, and /metrics in the Prometheus text format."""

from __future__ import annotations

import csv
import io
import random
from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from controlplane.metrics.fields import FIELDS
from controlplane.scheduler import run_pass
from tests.conftest import Api
from tests.windowdata import LATENESS, T0, WINDOW, generated_result, post_all

RANGE = {"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()}


def _fill(api: Api, n: int = 300) -> None:
    rng = random.Random(3)
    post_all(api, [generated_result(rng, i, T0, 2 * WINDOW) for i in range(n)])
    run_pass(api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS))


def test_csv_has_every_field_and_the_same_rows_as_json(metrics_api: Api) -> None:
    _fill(metrics_api)
    url = "/v1/tasks/metrics_task/windows"
    rows = metrics_api.client.get(url, params=RANGE, headers=metrics_api.headers("read")).json()[
        "windows"
    ]
    response = metrics_api.client.get(
        url, params=RANGE, headers={**metrics_api.headers("read"), "Accept": "text/csv"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.text)))
    assert tuple(table[0]) == FIELDS and len(table) == len(rows) == 10
    for got, want in zip(table, rows, strict=True):
        assert int(got["n_results"]) == want["n_results"]
        assert got["bucket"] == want["bucket"]
        assert (got["agreement"] == "") == (want["agreement"] is None)
        if want["agreement"] is not None:
            assert float(got["agreement"]) == want["agreement"]
    only = metrics_api.client.get(
        url, params={**RANGE, "bucket": "2048+"}, headers=metrics_api.headers("read")
    ).json()["windows"]
    assert [r["bucket"] for r in only] == ["2048+", "2048+"]


def test_windows_errors_name_the_field(metrics_api: Api) -> None:
    url = "/v1/tasks/metrics_task/windows"
    read = metrics_api.headers("read")
    assert metrics_api.client.get("/v1/tasks/nope/windows", headers=read).status_code == 404
    # Not a bucket's name: refused as the parameter; a name the task has no bucket of: 404.
    bad = metrics_api.client.get(url, params={"bucket": "huge"}, headers=read)
    assert bad.status_code == 422, bad.text
    (detail,) = bad.json()["detail"]
    assert detail.startswith("query.bucket: ") and '"huge"' in detail, detail
    absent = metrics_api.client.get(url, params={"bucket": "5-9"}, headers=read)
    assert absent.status_code == 404 and "bucket: metrics_task has no bucket '5-9'" in absent.text
    assert "2048+" in absent.text
    # No window starts at or after `since` and before an earlier `until`.
    backwards = metrics_api.client.get(
        url, params={"since": RANGE["until"], "until": RANGE["since"]}, headers=read
    )
    assert backwards.status_code == 200 and backwards.json() == {"windows": []}
    assert (
        metrics_api.client.get(url, params={"since": "yesterday"}, headers=read).status_code == 422
    )
    assert metrics_api.client.get(url).status_code == 401
    assert metrics_api.client.get(url, headers=metrics_api.headers("ingest")).status_code == 403


def test_a_query_time_without_a_timezone_is_utc(metrics_api: Api) -> None:
    _fill(metrics_api)
    url = "/v1/tasks/metrics_task/windows"
    read = metrics_api.headers("read")

    def naive(moment: datetime) -> str:
        return moment.replace(tzinfo=None).isoformat()

    hour = timedelta(hours=1)
    response = metrics_api.client.get(
        url, params={"since": naive(T0), "until": naive(T0 + hour), "bucket": "all"}, headers=read
    )
    assert response.status_code == 200, response.text
    # The window starting at T0 (UTC) is included by `since=T0` without a timezone.
    starts = [r["window_start"] for r in response.json()["windows"]]
    assert starts == [T0.isoformat(), (T0 + timedelta(seconds=WINDOW)).isoformat()]
    # Only one bound without a timezone, the other with one: the same rows.
    for params in ({"since": naive(T0)}, {"since": naive(T0), "until": (T0 + hour).isoformat()}):
        again = metrics_api.client.get(url, params={**params, "bucket": "all"}, headers=read)
        assert again.status_code == 200, again.text
        assert [r["window_start"] for r in again.json()["windows"]] == starts
    later = metrics_api.client.get(
        url, params={"since": naive(T0 + timedelta(seconds=WINDOW)), "bucket": "all"}, headers=read
    )
    assert [r["window_start"] for r in later.json()["windows"]] == starts[1:]
    # A time past the last (or before the first) moment UTC holds here reads as that moment:
    # no window lies beyond it, and it is answered, not a 500.
    far = metrics_api.client.get(url, params={"since": "9999-12-31T23:59:00-01:00"}, headers=read)
    assert far.status_code == 200 and far.json() == {"windows": []}
    first = metrics_api.client.get(url, params={"until": "0001-01-01T00:00:00"}, headers=read)
    assert first.status_code == 200 and first.json() == {"windows": []}

    # The audit log reads its `since` the same way.
    entries = metrics_api.client.get(
        "/v1/audit", params={"since": naive(datetime.now(UTC) - hour)}, headers=read
    ).json()["entries"]
    assert "task.create" in {e["action"] for e in entries}
    future = metrics_api.client.get(
        "/v1/audit", params={"since": naive(datetime.now(UTC) + hour)}, headers=read
    )
    assert future.status_code == 200 and future.json()["entries"] == []


def test_metrics_parse_as_prometheus_text_with_the_latest_closed_window(metrics_api: Api) -> None:
    _fill(metrics_api)
    assert metrics_api.client.get("/metrics").status_code == 401
    response = metrics_api.client.get("/metrics", headers=metrics_api.headers("ingest"))
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    latest = metrics_api.client.get(
        "/v1/tasks/metrics_task/windows",
        params={**RANGE, "since": (T0 + timedelta(seconds=WINDOW)).isoformat()},
        headers=metrics_api.headers("read"),
    ).json()["windows"]
    by_bucket = {r["bucket"]: r for r in latest}

    def sample(name: str, **labels: str) -> float:
        found = [s.value for s in families[name].samples if s.labels == labels]
        assert len(found) == 1, (name, labels, families[name].samples)
        return found[0]

    for bucket in ("all", "0-127", "512-2047"):
        row = by_bucket[bucket]
        assert (
            sample("shadowplane_window_n_results", task="metrics_task", bucket=bucket)
            == row["n_results"]
        )
        assert (
            sample("shadowplane_window_agreement", task="metrics_task", bucket=bucket)
            == row["agreement"]
        )
        assert (
            sample("shadowplane_window_edge_latency_ms_p95", task="metrics_task", bucket=bucket)
            == row["edge_latency_ms_p95"]
        )
    # An empty bucket has no rate: the series is absent rather than a made-up number.
    assert not [
        s
        for s in families["shadowplane_window_agreement"].samples
        if s.labels.get("bucket") == "2048+"
    ]
    assert sample("shadowplane_window_n_results", task="metrics_task", bucket="2048+") == 0
    assert (
        sample("shadowplane_window_start_timestamp_seconds", task="metrics_task")
        == (T0 + timedelta(seconds=WINDOW)).timestamp()
    )
    assert sample("shadowplane_ingest_results", outcome="accepted") == 300
    assert sample("shadowplane_ingest_results", outcome="rejected") == 0
    assert sample("shadowplane_ingest_counters_up") == 1
    assert sample("shadowplane_task_stage", task="metrics_task", stage="shadow") == 1
    assert sample("shadowplane_flag_edge_percent", task="metrics_task") == 0
    assert sample("shadowplane_flag_killed", task="metrics_task") == 0
    assert sample("shadowplane_flags_revision") == 3  # three tasks registered
    # The clock of that pass is two minutes past T0; the windows due since are not closed
    # by any pass, and the lag says so (computed against the real clock).
    assert families["shadowplane_window_close_lag_seconds"].type == "gauge"
    assert sample("shadowplane_window_computed_age_seconds", task="metrics_task") >= 0
