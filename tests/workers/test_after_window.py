"""After a window, once: the in-process pass (`run_pass`), the Celery path (the plan, then
`compute_window_job` per window, as a worker runs them) and `shadowplane tick --now` (a
process of its own) call the same `after_window`, and for the same traffic they leave the
same rows — alerts, decisions (span rules and the needs_regrade mark among them), audit
entries, outbox events — on three real PostgreSQL databases (ids and processing times set
aside)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

import shadowplane_workers.jobs
from controlplane.db import in_transaction, session_scope
from controlplane.metrics.service import plan
from controlplane.models import Alert, AuditEntry, Decision, OutboxEvent, Task
from controlplane.rollout import actions
from controlplane.rollout.configs import apply_tasks
from controlplane.scheduler import run_pass
from controlplane.settings import Settings
from tests.actions.test_doors import cli
from tests.conftest import Api, cloned_database, make_api
from tests.grading_support import give_offload_grade
from tests.test_isolation import LATENESS, WINDOW, config, first_future_window, window_results
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
VETO = 0.7


@pytest.fixture
def three_urls(pg_url: str, pg_template: str) -> Iterator[tuple[str, str, str]]:
    """Three fresh migrated databases: the conftest's, and two more cloned the same way."""
    with cloned_database() as second, cloned_database() as third:
        yield pg_url, second, third


def with_rule(document: dict[str, Any], rule: dict[str, Any], **extra: Any) -> dict[str, Any]:
    rollback = document["rollback"]
    return {**document, "rollback": {**rollback, "rules": [*rollback["rules"], rule]}, **extra}


def setup(api: Api, start: datetime) -> None:
    """A canary that will breach on long inputs, a shadow task with auto-promotion that
    will pass its gate, a task that goes silent (an alert), a canary whose fixed costs
    exceed its savings (net_savings) and one promoted on short inputs that now come long
    (input_shift: a rollback and the needs_regrade mark)."""
    gentle = {"min_windows": 2, "min_samples_per_bucket": 50, "agreement_lower_bound": 0.8}
    documents = [
        config("breaching"),
        {**config("eager"), "promotion": {**gentle, "auto_promote": True, "canary_steps": [50]}},
        {**config("silent"), "stage": "shadow"},
        with_rule(
            config("costly"),
            {"metric": "net_savings", "op": ">=", "threshold": 0, "span": 60},
            fixed_costs={"routing": 100, "gpu": 250, "ops": 50},
        ),
        with_rule(
            config("shifting"), {"metric": "input_shift", "op": "<=", "threshold": 0.25, "span": 60}
        ),
    ]
    apply_tasks(api.engine, documents, actor="test")
    # The eager task grades `offload` (leaving shadow needs it), placed back from the
    # passes' clock so that both databases hold the same windows; the shifting one's grade
    # keeps its inputs (about 50 tokens each): the baseline it leaves shadow with.
    give_offload_grade(api.url, "eager", now=start)
    give_offload_grade(api.url, "shifting", now=start, input_lengths=True)
    for name in ("breaching", "costly", "shifting"):
        actions.promote(api.engine, name, actor="test", reason="go", force=True, veto=VETO)


def traffic(api: Api, start: datetime, k: int) -> None:
    post_all(api, window_results("breaching", start, k, long_conflicts=0.4))
    post_all(api, window_results("eager", start, k, long_conflicts=0.0))
    if k == 0:
        post_all(api, window_results("silent", start, k, long_conflicts=0.0))
    # Served by the cloud with the edge run beside it: the canary saves nothing.
    post_all(api, window_results("costly", start, k, long_conflicts=0.0))
    # 60 to 3,000 tokens against a baseline of about 50.
    post_all(api, window_results("shifting", start, k, long_conflicts=0.0))


def in_process(api: Api, start: datetime, windows: int) -> None:
    for k in range(windows):
        traffic(api, start, k)
        clock = start + timedelta(seconds=(k + 1) * WINDOW + LATENESS)
        run_pass(api.engine, clock, veto=VETO)


def celery(api: Api, start: datetime, windows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shadowplane_workers.jobs, "get_engine", lambda: api.engine)
    monkeypatch.setattr(
        shadowplane_workers.jobs,
        "get_settings",
        lambda: Settings(database_url=api.url, error_cost_veto=VETO),
    )
    for k in range(windows):
        traffic(api, start, k)
        clock = start + timedelta(seconds=(k + 1) * WINDOW + LATENESS)
        # What `plan_windows` queues, run one job at a time as a worker would.
        planned = in_transaction(api.engine, lambda session, c=clock: plan(session, c))  # type: ignore[misc]
        for job in planned.jobs:
            shadowplane_workers.jobs.compute_window_job.run(
                job.task_id, job.window_start.isoformat(), clock.isoformat()
            )


def ticked(api: Api, start: datetime, windows: int) -> str:
    """Each window closed by `shadowplane tick --now` (a process of its own, the default
    veto: 0.7); what the ticks printed."""
    printed = []
    for k in range(windows):
        traffic(api, start, k)
        clock = start + timedelta(seconds=(k + 1) * WINDOW + LATENESS)
        printed.append(cli(api, "tick", "--now", clock.isoformat()).stdout)
    return "".join(printed)


def clockless(evidence: dict[str, Any]) -> dict[str, Any]:
    """A person's promotion out of shadow grades the task at the clock it runs (the setup's,
    seconds apart in the two databases): its grade's times are processing times, and so is
    the end of the graded span its input baseline keeps."""
    if not evidence.get("grade"):
        return evidence
    grade = {k: v for k, v in evidence["grade"].items() if k not in ("computed_at", "span")}
    out = {**evidence, "grade": grade}
    if evidence.get("input_baseline"):
        out["input_baseline"] = {k: v for k, v in evidence["input_baseline"].items() if k != "end"}
    return out


def rows(api: Api) -> dict[str, Any]:
    with session_scope(api.engine) as session:
        names = dict(session.execute(select(Task.id, Task.name)).all())
        alerts = [
            (names[a.task_id], a.kind, a.state, a.window_start, a.value, a.baseline, a.message)
            for a in session.scalars(select(Alert).order_by(Alert.id))
        ]
        decisions = [
            (
                names.get(d.task_id),
                d.action,
                d.actor,
                d.reason,
                d.rule,
                d.bucket,
                d.stage_before,
                d.stage_after,
                d.flag_version_before,
                d.flag_version_after,
                d.evidence if d.actor == "policy" else clockless(d.evidence),
            )
            for d in session.scalars(select(Decision).order_by(Decision.id))
        ]
        audit = [
            (a.actor, a.action, a.task, {k: v for k, v in a.details.items() if k != "decision"})
            for a in session.scalars(select(AuditEntry).order_by(AuditEntry.id))
        ]
        events = [
            (e.kind, e.task, {k: v for k, v in e.document.items() if k != "decision_id"})
            for e in session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))
        ]
    return {"alerts": alerts, "decisions": decisions, "audit": audit, "events": events}


def test_the_pass_the_celery_jobs_and_the_tick_command_leave_the_same_rows(
    three_urls: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert VETO == Settings.model_fields["error_cost_veto"].default  # the tick command's
    start = first_future_window()
    windows = 4
    found, printed = [], ""
    for url, path in zip(three_urls, ("pass", "celery", "tick"), strict=True):
        for api in make_api(url):
            setup(api, start)
            # The databases are set up seconds apart: pin what the clock decided (the
            # stage's start, the tasks' creation) so a minute boundary crossed in between
            # cannot make the second see one window fewer in the stage.
            with session_scope(api.engine) as session:
                session.execute(
                    update(Task).values(
                        created_at=start - timedelta(minutes=5),
                        stage_changed_at=start - timedelta(minutes=1),
                    )
                )
            if path == "pass":
                in_process(api, start, windows)
            elif path == "celery":
                celery(api, start, windows, monkeypatch)
            else:
                printed = ticked(api, start, windows)
            found.append(rows(api))
    by_pass, by_celery, by_tick = found
    # The traffic did what it is for: a policy rollback, a policy promotion, an alert.
    assert ("breaching", "rollback", "policy") in [d[:3] for d in by_pass["decisions"]]
    assert ("eager", "promote", "policy") in [d[:3] for d in by_pass["decisions"]]
    assert any(a[0] == "silent" for a in by_pass["alerts"])
    assert {e[0] for e in by_pass["events"]} >= {"decision", "alert"}
    # Both span rules fired, the input shift with its mark, audited and announced.
    fired = {d[0]: d[10]["how"] for d in by_pass["decisions"] if d[1:3] == ("rollback", "policy")}
    assert (fired["costly"], fired["shifting"]) == ("net_savings", "input_shift")
    assert ("shifting", "needs_regrade", "policy") in [d[:3] for d in by_pass["decisions"]]
    assert ("policy", "task.needs_regrade", "shifting") in [a[:3] for a in by_pass["audit"]]
    announced = [(e[1], e[2].get("action")) for e in by_pass["events"] if e[0] == "decision"]
    assert {("costly", "rollback"), ("shifting", "rollback"), ("shifting", "needs_regrade")} <= set(
        announced
    )
    assert ("shifting", "input_shift") in [a[:2] for a in by_pass["alerts"]]
    assert by_pass == by_celery
    assert by_pass == by_tick
    # The ticks said what they decided.
    for action, task in [
        ("rollback", "breaching"),
        ("promote", "eager"),
        ("rollback", "costly"),
        ("rollback", "shifting"),
        ("needs_regrade", "shifting"),
    ]:
        assert f": {action} on {task}" in printed, printed
