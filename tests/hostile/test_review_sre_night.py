"""Hostile review as the SRE paged at 3 a.m.: docs/operations.md followed literally against a
development setup (`scripts/services`, then `shadowplane ...`), the alert rules and the
Grafana dashboard of deploy/ read against /metrics, the kill switch and the rollback paths
tried. Each defect found is a strict xfail here until it is fixed.

1. "A rollback fired", step 2 (and ShadowplaneRollback's description): `GET
   /v1/decisions?task=<task>&limit=1` is to give the rollback's rule, bucket, windows and
   examples. After an input-shift rollback it gives the `needs_regrade` mark recorded
   after it (evidence `{rollback, shifted_at}` only).
2. The commands the runbook sends the SRE to in an incident (`shadowplane kill`, `tick`)
   print a 400-600 line traceback when PostgreSQL does not answer, and never name
   SHADOWPLANE_DATABASE_URL; `shadowplane migrate` says the same in one line.
3. "Outages ... are two WARNING lines per process, whatever their length" and "a
   `*_unavailable` line without its `*_available` ... is the outage still going": with
   Redis configured (every production API), an API process whose PostgreSQL is down logs
   `database_available` within a second — its flag copy, vouched for by the Redis key,
   counts as the database answering — and then a new pair for every request that meets
   the outage, each `available` false.
4. `shadowplane lift` prints one line, "lift on every task", when a task whose stored config
   does not parse was left killed (the decision's evidence says `left_killed`; the command
   does not).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import get_args

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from controlplane.logs import DATABASE
from controlplane.rollout import actions, flagbus
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.repository import EVERY_TASK_ACTIONS, TASK_ACTIONS
from controlplane.rollout.schemas import DecisionAction
from tests.conftest import Api, make_api
from tests.liveapi import Proxy, free_port, run_cli, wait_until
from tests.rollout.test_rollback_triggers_e2e import (
    INPUT_SHIFT,
    LONG,
    WINDOW,
    close,
    config,
    promote,
    results,
    rewind,
    stage,
    stage_from,
)
from tests.test_isolation import store_broken_config
from tests.windowdata import post_all

pytestmark = pytest.mark.integration


def test_the_runbooks_read_why_after_an_input_shift_rollback_shows_the_rollback(
    pg_api: Api,
) -> None:
    api = pg_api
    apply_tasks(api.engine, [config("shifting", INPUT_SHIFT)], actor="test")
    start = rewind(api, windows=10, tasks=("shifting",))
    for k in range(3):
        post_all(api, results("shifting", start, k, 20))
        close(api, start, k)
    assert promote(api, "shifting").status_code == 200
    stage_from(api, "shifting", start + timedelta(seconds=3 * WINDOW))
    for k in range(3, 7):
        post_all(api, results("shifting", start, k, 20, tokens=LONG))
        close(api, start, k)
    assert stage(api, "shifting") == "rolled_back"

    # The newest decision is the needs_regrade mark recorded after the rollback.
    newest = api.client.get("/v1/decisions?task=shifting&limit=1", headers=api.headers("read"))
    assert newest.json()["decisions"][0]["action"] == "needs_regrade"
    # docs/operations.md, "A rollback fired", step 2 (and ShadowplaneRollback's
    # description in deploy/prometheus/alerts.yml), word for word.
    runbook = Path("docs/operations.md").read_text()
    assert "2. Read why: `GET /v1/decisions?task=<task>&action=rollback&limit=1`" in runbook
    assert "GET /v1/decisions?task={{ $labels.task }}&action=rollback&limit=1;" in (
        Path("deploy/prometheus/alerts.yml").read_text()
    )
    answer = api.client.get(
        "/v1/decisions?task=shifting&action=rollback&limit=1", headers=api.headers("read")
    ).json()["decisions"]
    assert len(answer) == 1
    why = answer[0]
    # "the rule, the bucket, the sentence ..., every window of the run with its counts,
    # the edge models seen ..., and up to 20 example request ids"
    assert why["action"] == "rollback", why
    assert why["rule"] == "input_shift <= 0.25 over 4m"
    assert why["evidence"]["examples"]


def test_the_decisions_action_filter_takes_every_action_a_decision_records(
    pg_api: Api,
) -> None:
    assert set(get_args(DecisionAction)) == {*TASK_ACTIONS, *EVERY_TASK_ACTIONS}
    actions.kill(pg_api.engine, actor="test", reason="drill")
    kills = pg_api.client.get("/v1/decisions?action=kill", headers=pg_api.headers("read"))
    assert [d["action"] for d in kills.json()["decisions"]] == ["kill"]
    wrong = pg_api.client.get("/v1/decisions?action=rolback", headers=pg_api.headers("read"))
    assert wrong.status_code == 422 and "action" in wrong.text


def _unreachable_database() -> dict[str, str]:
    """This process's environment with a database URL where nothing listens."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = (
        f"postgresql+psycopg://shadowplane:pw@127.0.0.1:{free_port()}/shadowplane"
    )
    return env


@pytest.mark.parametrize(
    "argv", [["kill", "--reason", "3am drill"], ["tick"]], ids=["kill", "tick"]
)
def test_the_incident_commands_say_in_one_line_that_the_database_is_out_of_reach(
    tmp_path: Path, argv: list[str]
) -> None:
    env = _unreachable_database()
    migrate = run_cli(["migrate"], env, tmp_path)
    # The standard the runbook sets: one line, naming the setting and the server's words.
    assert migrate.returncode == 1
    assert migrate.stderr.startswith("error: SHADOWPLANE_DATABASE_URL: cannot migrate")
    assert len(migrate.stderr.strip().splitlines()) == 1

    done = run_cli(argv, env, tmp_path)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, f"{len(done.stderr.splitlines())} lines"
    assert "SHADOWPLANE_DATABASE_URL" in done.stderr
    assert "Connection refused" in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2, done.stderr[-2000:]


def _revision_key(url: str) -> bytes | None:
    client = redis.Redis.from_url(url)
    try:
        return client.get(flagbus.KEY)  # type: ignore[no-any-return]
    finally:
        client.close()


def test_a_database_outage_is_not_said_over_while_the_database_is_still_down(
    pg_url: str, redis_url: Callable[[], str]
) -> None:
    target = make_url(pg_url)
    proxy = Proxy(target.port or 5432)
    via = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    broker = redis_url()
    DATABASE.reset()
    try:
        for api in make_api(via, redis_url=broker, flag_check_seconds=0.1):
            # The copy is followed through the Redis key, as on every production API.
            wait_until(lambda: _revision_key(broker) is not None, "the revision key")
            proxy.close()  # PostgreSQL gone: connections cut, new ones refused
            assert api.client.get("/metrics", headers=api.headers("read")).status_code == 503
            assert DATABASE.down
            # Ten checks of the flag copy.
            time.sleep(1.0)
            assert api.client.get("/readyz").status_code == 503  # still down
            # The outage is over for the process's log once `database_available` is said,
            # which is when DATABASE stops being down (controlplane.logs.Outage.answered).
            assert DATABASE.down, "database_available logged while the database is down"
    finally:
        proxy.close()
        DATABASE.reset()


def test_lift_says_which_tasks_it_left_on_the_cloud(pg_api: Api, tmp_path: Path) -> None:
    api = pg_api
    store_broken_config(api.engine, "ticket_classify")
    actions.kill(api.engine, actor="test", reason="drill")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    env["SHADOWPLANE_DATABASE_URL"] = api.url
    done = run_cli(["lift", "--reason", "drill over"], env, tmp_path)
    # The lift is recorded, but a script reading the exit code learns not every flag is back.
    assert done.returncode == 1, done.stderr
    flag = api.client.get("/v1/flags/ticket_classify", headers=api.headers("flags:read"))
    assert flag.json()["killed"] is True  # left on the cloud
    assert "ticket_classify" in done.stdout + done.stderr, done.stdout
    # And Prometheus sees it (the Grafana stage timeline draws it as "killed").
    killed = _killed_flags(api)
    assert killed["ticket_classify"] == 1
    assert len(killed) > 1 and not any(v for t, v in killed.items() if t != "ticket_classify")


def _killed_flags(api: Api) -> dict[str, float]:
    scraped = api.client.get("/metrics", headers=api.headers("read")).text
    return {
        s.labels["task"]: s.value
        for family in text_string_to_metric_families(scraped)
        if family.name == "shadowplane_flag_killed"
        for s in family.samples
    }


def test_the_kill_switch_shows_on_every_tasks_killed_gauge(pg_api: Api) -> None:
    assert set(_killed_flags(pg_api).values()) == {0}
    actions.kill(pg_api.engine, actor="test", reason="drill")
    killed = _killed_flags(pg_api)
    assert killed and set(killed.values()) == {1}
