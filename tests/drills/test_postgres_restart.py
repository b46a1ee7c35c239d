"""Drill: PostgreSQL restarted under a running API (a process of its own, on a cluster of
the drill's own). The SDK's `ResultReporter` keeps sending through it: the API answers
503 while the database is away, and once it is back every result is stored exactly once,
with its payload, a batch caught half-written by the crash included. Keys the process
has already seen keep working through the outage."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from controlplane.client.reporter import ResultReporter
from controlplane.client.tls import default_tls
from tests.conftest import make_result
from tests.drills.servers import PgServer, poll, waiting_on_lock
from tests.liveapi import ApiServer, new_keys, seed

pytestmark = [pytest.mark.integration, pytest.mark.drills]


@pytest.fixture
def api(own_pg: PgServer, tmp_path: Path) -> Iterator[ApiServer]:
    keys = seed(own_pg.url)
    # Keys are read again every 0.2 s: the snapshot is stale within the outage, as a 5 s
    # cache is in a longer one.
    server = ApiServer(
        own_pg.url,
        tmp_path / "api.log",
        keys=keys,
        settings={"SHADOWPLANE_KEY_CACHE_SECONDS": "0.2"},
    ).start()
    try:
        yield server
    finally:
        server.stop()


def stored(pg: PgServer) -> tuple[int, int, int]:
    """(rows, distinct request ids, payloads) of ticket_classify's results."""
    with pg.admin().connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT r.request_id), "
                "(SELECT count(*) FROM payloads p JOIN results q ON q.id = p.result_id "
                "JOIN tasks u ON u.id = q.task_id WHERE u.name = 'ticket_classify') "
                "FROM results r JOIN tasks t ON t.id = r.task_id "
                "WHERE t.name = 'ticket_classify'"
            )
        ).one()
    return int(row[0]), int(row[1]), int(row[2])


def batch(prefix: str, n: int) -> list[dict[str, object]]:
    """Results whose sides disagree: the task keeps the payload of every conflict, so each
    result stored is a row in `results` and one in `payloads`."""
    return [
        make_result(
            request_id=f"{prefix}-{i}",
            edge={"output": "refund", "latency_ms": 41.0, "confidence": 0.9},
            cloud={"output": "exchange", "latency_ms": 380.0},
        )
        for i in range(n)
    ]


def test_the_reporter_gets_503s_then_every_result_is_stored_exactly_once(
    own_pg: PgServer, api: ApiServer
) -> None:
    reporter = ResultReporter(
        api.base, api.keys["ingest"], batch_size=50, flush_interval=0.05, max_backoff=1.0
    )
    try:
        for result in batch("before", 300):
            assert reporter.report(result)
        poll(lambda: reporter.accepted == 300, "the first 300 results stored")

        # A batch in the middle of its transaction when the database goes: its results are
        # written, its payloads wait on the test's lock.
        locker = own_pg.admin().connect()
        locker.execute(text("BEGIN"))
        locker.execute(text("LOCK TABLE payloads IN EXCLUSIVE MODE"))
        for result in batch("caught", 50):
            assert reporter.report(result)
        poll(lambda: waiting_on_lock(own_pg.admin(), "") >= 1, "a batch waiting on the lock")
        own_pg.stop("immediate")  # as a crash: no clean shutdown, recovery at the next start
        try:
            locker.close()
        except Exception:  # its server is gone: nothing to close
            pass
        try:
            for result in batch("during", 300):
                assert reporter.report(result)
            # The API answers 503 with Retry-After, and the reporter keeps the results.
            poll(
                lambda: (reporter.last_error or "").startswith("POST /v1/results: HTTP 503"),
                "the reporter to see a 503",
            )
            probe = httpx.post(
                f"{api.base}/v1/results",
                json={"results": batch("probe", 5)},
                headers={"Authorization": f"Bearer {api.keys['ingest']}"},
                timeout=30,
                verify=default_tls(),
            )
            assert probe.status_code == 503, probe.text
            assert probe.headers.get("Retry-After")
            ready = httpx.get(f"{api.base}/readyz", timeout=30, verify=default_tls())
            assert ready.status_code == 503
            assert ready.json()["checks"]["database"].startswith("error")
            assert reporter.accepted == 300 and reporter.dropped == 0
        finally:
            own_pg.start()

        for result in batch("after", 300):
            assert reporter.report(result)
        assert reporter.close(timeout=60), (reporter.drop_reasons, reporter.last_error)
    finally:
        reporter.close(timeout=5)
    assert reporter.dropped == 0 and reporter.rejected == 0
    # Each result once: stored, or (a batch whose answer was lost) a duplicate of itself.
    assert reporter.accepted + reporter.duplicates == 950
    assert stored(own_pg) == (950, 950, 950)


def test_a_key_already_seen_keeps_working_through_a_database_outage(
    own_pg: PgServer, api: ApiServer
) -> None:
    """docs/decisions.md: "keys already seen keep working through a database outage
    (requests that need storage then answer 503 with `Retry-After`)"; docs/operations.md:
    "Keys a process has seen keep authenticating from its cache. Flags are still answered
    from each process's last copy"."""
    seen = api.call("GET", "/v1/flags/ticket_classify", scope="flags")
    assert seen.status_code == 200, seen.text
    assert api.call("POST", "/v1/results", scope="ingest", json=make_result()).status_code == 200

    own_pg.stop("fast")
    try:
        poll(
            lambda: (
                httpx.get(f"{api.base}/readyz", timeout=30, verify=default_tls()).status_code == 503
            ),
            "/readyz to report the outage",
        )

        # The key this process has seen: flags from its last copy, marked stale once the
        # copy's next check (every second) has failed; never a 503 or a 401 meanwhile.
        def stale_copy() -> bool:
            flags = api.call("GET", "/v1/flags/ticket_classify", scope="flags")
            assert flags.status_code == 200, flags.text
            assert flags.json()["stage"] == seen.json()["stage"]
            return "X-Shadowplane-Stale" in flags.headers

        poll(stale_copy, "the flags answered from the stale copy")
        # An ingest key it has seen is authenticated: the 503 is storage's, not the key's.
        during = api.call("POST", "/v1/results", scope="ingest", json=make_result())
        assert during.status_code == 503, during.text
        assert "nothing from this request was stored" in during.json()["detail"]
        # A token its snapshot of the key table does not hold cannot be checked: 503,
        # neither 200 nor 401.
        unknown = httpx.get(
            f"{api.base}/v1/flags/ticket_classify",
            headers={"Authorization": "Bearer sp_never_seen"},
            timeout=30,
            verify=default_tls(),
        )
        assert unknown.status_code == 503, unknown.text
    finally:
        own_pg.start()
    poll(
        lambda: (
            httpx.get(f"{api.base}/readyz", timeout=30, verify=default_tls()).status_code == 200
        ),
        "/readyz to report the recovery",
    )
    # A key created after the outage works within about a second.
    created = new_keys(own_pg.url, other=["flags:read"])["other"]
    poll(
        lambda: (
            httpx.get(
                f"{api.base}/v1/flags/ticket_classify",
                headers={"Authorization": f"Bearer {created}"},
                timeout=30,
                verify=default_tls(),
            ).status_code
            == 200
        ),
        "a key created after the outage to work",
    )
