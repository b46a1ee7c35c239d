"""Drill: Redis (the broker, the flag channel, the shared counters) restarted under an API,
a Celery beat and a worker, while results arrive and a window closes. `/readyz` reports
the outage and the recovery; ingest goes on through the outage (results sent while Redis is
away are stored while it is away); beat and the worker resume on their own; nothing is
lost: every result sent is stored, and counted in the windows the worker closes.

Then PostgreSQL is restarted under the same processes. Through both, the three logs stay
quiet (issue 29): every line is a JSON object, none holds a traceback or an error, and each
process that noticed an outage logged exactly two WARNINGs about it, one as it began and one
as it ended."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from controlplane.client.reporter import ResultReporter
from controlplane.client.tls import default_tls
from controlplane.db import get_engine, session_scope
from controlplane.rollout.configs import apply_config
from tests.conftest import make_result
from tests.drills.servers import PgServer, poll
from tests.liveapi import ApiServer, RedisServer, seed
from tests.support import CeleryProcess, celery_env

pytestmark = [pytest.mark.integration, pytest.mark.drills]
TASK = "drill_task"
WINDOW, LATENESS = 10, 5  # the shortest windows a config may have: one closes in the outage


@pytest.fixture
def api(own_pg: PgServer, own_redis: RedisServer, tmp_path: Path) -> Iterator[ApiServer]:
    keys = seed(own_pg.url)
    with session_scope(get_engine(own_pg.url)) as session:
        apply_config(
            session,
            {
                "task": TASK,
                "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
                "window_seconds": WINDOW,
                "allowed_lateness_seconds": LATENESS,
            },
            actor="test",
        )
    server = ApiServer(
        own_pg.url,
        tmp_path / "api.log",
        keys=keys,
        settings={"SHADOWPLANE_REDIS_URL": own_redis.url, "SHADOWPLANE_LOG_LEVEL": "INFO"},
    ).start()
    try:
        yield server
    finally:
        server.stop()


def windows(pg: PgServer) -> list[dict[str, Any]]:
    """The drill task's windows (bucket `all`) that hold results, oldest first."""
    with pg.admin().connect() as conn:
        rows = conn.execute(
            text(
                "SELECT w.window_start, w.closed_at, m.n_results, m.n_late FROM windows w "
                "JOIN tasks t ON t.id = w.task_id JOIN window_metrics m ON m.window_id = w.id "
                "WHERE t.name = :task AND m.bucket = 'all' AND m.n_results + m.n_late > 0 "
                "ORDER BY w.window_start"
            ),
            {"task": TASK},
        ).all()
    return [dict(r._mapping) for r in rows]


def stored(pg: PgServer) -> tuple[int, int]:
    with pg.admin().connect() as conn:
        row = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT r.request_id) FROM results r "
                "JOIN tasks t ON t.id = r.task_id WHERE t.name = :task"
            ),
            {"task": TASK},
        ).one()
    return int(row[0]), int(row[1])


def ready(api: ApiServer) -> tuple[int, dict[str, str]]:
    response = httpx.get(f"{api.base}/readyz", timeout=30, verify=default_tls())
    return response.status_code, response.json()["checks"]


class Traffic:
    """Results of the drill task stamped with the time they are sent, a few every 50 ms,
    through the SDK's reporter, until `stop`."""

    def __init__(self, api: ApiServer) -> None:
        self.reporter = ResultReporter(
            api.base, api.keys["ingest"], batch_size=100, flush_interval=0.1, max_backoff=1.0
        )
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):  # pacing, not synchronisation
            for _ in range(5):
                now = datetime.now(UTC).isoformat()
                result = make_result(request_id=f"r-{self.sent}", task=TASK, ts=now)
                assert self.reporter.report(result)
                self.sent += 1

    def stop(self) -> bool:
        self._stop.set()
        self._thread.join(30)
        return self.reporter.close(timeout=60)


def lines(log: Path, start: int = 0) -> list[dict[str, Any]]:
    """The log's lines from byte `start` on, each parsed: every one must be a JSON object."""
    text = log.read_bytes()[start:].decode(errors="replace")
    parsed = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        assert isinstance(record, dict), f"{log.name}: not a JSON line: {line!r}"
        parsed.append(record)
    return parsed


def warnings_by_process(log: Path, start: int) -> dict[int, list[str]]:
    """The WARNING lines each process wrote from byte `start` on: their events (or text)."""
    found: dict[int, list[str]] = {}
    for record in lines(log, start):
        if record["level"] == "WARNING":
            found.setdefault(record["pid"], []).append(record.get("event") or record["message"])
    return found


def outage_told(log: Path, start: int, pid: int, dependency: str) -> bool:
    """Whether process `pid` logged both ends of the outage since byte `start`."""
    told = warnings_by_process(log, start).get(pid, [])
    return f"{dependency}_available" in told


def assert_quiet(logs: dict[str, Path], marks: dict[str, int], dependency: str) -> None:
    """Since each mark: no traceback, no error, and the two WARNINGs of the outage in that
    order from each process that logged one, nothing else at WARNING."""
    told = [f"{dependency}_unavailable", f"{dependency}_available"]
    for name, log in logs.items():
        records = lines(log, marks[name])
        loud = [r for r in records if r["level"] in ("ERROR", "CRITICAL") or "exception" in r]
        assert not loud, f"{name}: {loud}"
        for pid, warned in warnings_by_process(log, marks[name]).items():
            assert warned == told, f"{name}, process {pid}: {warned}"


def test_redis_restarted_during_ingest_and_a_window_close(
    own_pg: PgServer, own_redis: RedisServer, api: ApiServer, tmp_path: Path
) -> None:
    env = celery_env(
        own_pg.url, own_redis.url, SHADOWPLANE_LOG_LEVEL="INFO", SHADOWPLANE_TICK_SECONDS="1"
    )
    beat = CeleryProcess(
        ["beat", "--schedule-file", str(tmp_path / "beat-schedule")], env, tmp_path / "beat.log"
    )
    worker = CeleryProcess(["worker", "--concurrency", "1"], env, tmp_path / "worker.log")
    traffic: Traffic | None = None
    try:
        beat.start()
        worker.start()
        assert ready(api) == (200, {"database": "ok", "schema": "ok", "redis": "ok"})
        traffic = Traffic(api)
        # Beat and the worker at work: a window of the results being sent is computed.
        poll(lambda: windows(own_pg), "the worker computing a window", timeout=90)

        assert api.proc is not None and beat.proc is not None and worker.proc is not None
        logs = {"api": api.log_path, "beat": beat.log_path, "worker": worker.log_path}
        mains = {"api": api.proc.pid, "beat": beat.proc.pid, "worker": worker.proc.pid}
        marks = {name: log.stat().st_size for name, log in logs.items()}
        own_redis.stop()
        outage = datetime.now(UTC)
        status, checks = ready(api)
        assert status == 503 and checks["redis"].startswith("error"), checks
        assert checks["database"] == "ok"
        # Ingest needs no Redis: what is sent in the outage is stored in it.
        sent_at_outage = traffic.sent
        poll(
            lambda: stored(own_pg)[0] >= sent_at_outage + 100,
            "results sent in the outage stored while Redis is away",
        )
        assert ready(api)[0] == 503  # still in the outage
        # A window closes while Redis is away: stay down past the close of the window the
        # outage began in (its end plus the allowed lateness).
        due = outage.timestamp() - outage.timestamp() % WINDOW + WINDOW + LATENESS
        poll(lambda: datetime.now(UTC).timestamp() > due + 1, "the window's close time")
        assert ready(api)[0] == 503
        own_redis.start()
        back = datetime.now(UTC)

        poll(lambda: ready(api)[0] == 200, "/readyz to report the recovery")
        # Beat and the worker resumed: a window that began after the restart is computed.
        poll(
            lambda: any(w["window_start"] >= back.replace(microsecond=0) for w in windows(own_pg)),
            "a window after the restart computed",
            timeout=90,
        )
        assert traffic.stop(), (traffic.reporter.drop_reasons, traffic.reporter.last_error)
        sent = traffic.sent
        reporter = traffic.reporter
        assert reporter.dropped == 0 and reporter.rejected == 0
        assert reporter.accepted + reporter.duplicates == sent
        assert stored(own_pg) == (sent, sent)

        # Every window closes, and together they count every result sent, once.
        def all_counted() -> bool:
            rows = windows(own_pg)
            counted = sum(w["n_results"] + w["n_late"] for w in rows)
            return all(w["closed_at"] is not None for w in rows) and counted == sent

        poll(all_counted, "every window closed with every result counted", timeout=90)
        closed_in_outage = [
            w for w in windows(own_pg) if w["window_start"].timestamp() + WINDOW + LATENESS == due
        ]
        assert closed_in_outage and closed_in_outage[0]["closed_at"] is not None

        # Each process told the outage and its end once, and nothing louder.
        for name, pid in mains.items():
            poll(
                partial(outage_told, logs[name], marks[name], pid, "redis"),
                f"{name} to log that Redis answers again",
            )
        assert_quiet(logs, marks, "redis")

        # PostgreSQL restarted under the same processes: the API notices at a request, the
        # worker's pool process at its next job (beat never reads the database).
        marks = {name: log.stat().st_size for name, log in logs.items()}
        own_pg.stop()
        refused = api.call("POST", "/v1/results", "ingest", json={"results": [make_result()]})
        assert refused.status_code == 503
        poll(
            lambda: any(
                "database_unavailable" in warned
                for warned in warnings_by_process(logs["worker"], marks["worker"]).values()
            ),
            "the worker to notice the outage",
        )
        own_pg.start()
        poll(lambda: ready(api)[0] == 200, "/readyz to report the database back")
        poll(
            lambda: outage_told(logs["api"], marks["api"], mains["api"], "database"),
            "the API to log that the database answers again",
        )
        poll(
            lambda: all(
                "database_available" in warned
                for warned in warnings_by_process(logs["worker"], marks["worker"]).values()
            ),
            "the worker to log that the database answers again",
        )
        assert_quiet(logs, marks, "database")
    except BaseException:
        print("--- beat ---\n" + beat.log() + "\n--- worker ---\n" + worker.log())
        print("--- api ---\n" + api.log())
        raise
    finally:
        if traffic is not None:
            traffic.stop()
        worker.stop()
        beat.stop()
