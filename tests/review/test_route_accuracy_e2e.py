"""End to end on PostgreSQL: results → windows closed by `run_pass` → the sampler's review
items → a simulated reviewer labels them blind through the review queue → route-accuracy
windows → the `route_acc` and `failure_class` rules roll canaries back; the
`new_failure_class` alert; the read endpoints.

Three tasks in canary share one run (one database, one app): `acc_task` whose edge is
wrong on 40% of its inputs (rolled back by `route_acc`), `class_task` the same but judged
by a `failure_class` rule only (rolled back by it), and `fine_task` whose edge is always
right (stays). The simulated reviewer knows the right answer from the input text — a real
one reads it there too — and never learns which side is the edge.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from controlplane.db import session_scope
from controlplane.models import OutboxEvent, ReviewItem, RouteAccuracyWindow, Task
from controlplane.review import actions as review
from controlplane.review.schemas import AgreementOut, CalibrationOut, RouteAccuracyOut
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, cloned_database, make_api, make_result
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
WINDOW, LATENESS = 60, 30
WINDOWS = 5
PER_WINDOW = 40
LABELS = ["refund", "exchange"]


def config(name: str, rule: dict[str, Any]) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": LABELS},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "keep_agreeing_rate": 1.0,
        # `consecutive`, named: these canaries are judged on three windows of ~10 labels
        # each, where the default CUSUM would want a fourth (tests/review/
        # test_route_accuracy_rule.py covers it on label windows).
        "rollback": {"min_samples": 3, "detector": "consecutive", "rules": [rule]},
        "promotion": {"canary_steps": [50]},
        "review": {
            "quota_per_window": 10,
            # Route-accuracy windows as long as the metric windows, open for labels one more
            # window: the labels given after a pass count at the next one, which closes them.
            "route_acc_window_seconds": WINDOW,
            "route_acc_lateness_seconds": WINDOW,
        },
    }


TASKS = {
    "acc_task": (config("acc_task", {"metric": "route_acc", "op": ">=", "threshold": 0.9}), 0.4),
    "class_task": (
        config(
            "class_task",
            {"metric": "failure_class", "class": "amount", "op": "<=", "threshold": 0.05},
        ),
        0.4,
    ),
    "fine_task": (config("fine_task", {"metric": "route_acc", "op": ">=", "threshold": 0.9}), 0.0),
}


def results(task: str, start: datetime, k: int, wrong_share: float) -> list[dict[str, Any]]:
    """One window: the cloud always right, the edge wrong on `wrong_share` of the inputs;
    one in twenty decided for the cloud (its edge right: a missed offload)."""
    out = []
    wrong = round(PER_WINDOW * wrong_share)
    for i in range(PER_WINDOW):
        truth = LABELS[i % 2]
        other = LABELS[(i + 1) % 2]
        out.append(
            make_result(
                request_id=f"{task}-{k}-{i}",
                task=task,
                ts=(start + timedelta(seconds=k * WINDOW + i)).isoformat(),
                input_tokens=60,
                session_id=f"s-{i}",
                decision="cloud" if i % 20 == 19 else "edge",
                input={"text": f"ticket {k}-{i}: the customer asks for {truth}"},
                edge={
                    "output": other if i < wrong else truth,
                    "confidence": 0.9,
                    "model": "small@3",
                },
                cloud={"output": truth, "model": "large@7"},
            )
        )
    return out


def judge(item: dict[str, Any]) -> tuple[str, str | None]:
    """The simulated reviewer: the verdict from the input text, and `amount` named as the
    failure class of a wrong answer."""
    truth = item["input"]["text"].rsplit(" ", 1)[-1]
    if item["kind"] == "single":
        return ("correct" if item["a"] == truth else "wrong"), None
    a_right, b_right = item["a"] == truth, item["b"] == truth
    verdict = {
        (True, True): "both_correct",
        (True, False): "a_correct",
        (False, True): "b_correct",
        (False, False): "both_wrong",
    }[(a_right, b_right)]
    return verdict, None if verdict == "both_correct" else "amount"


@dataclass
class Run:
    api: Api
    start: datetime
    decisions: list[dict[str, Any]] = field(default_factory=list)
    # stage of each task after each pass
    stages: list[dict[str, str]] = field(default_factory=list)
    labelled: int = 0
    # new_failure_class alerts of class_task after each pass: (state, value)
    class_alerts: list[list[tuple[str, float | None]]] = field(default_factory=list)


def label_everything(api: Api, tasks: list[str]) -> int:
    """Label every item of the tasks (those still in canary: what a rolled-back task's
    reviewers do next is not this test's business)."""
    done = 0
    for task in tasks:
        while (item := review.claim(api.engine, task, "reviewer-1")) is not None:
            verdict, failure_class = judge(item)
            review.label(
                api.engine, item["id"], "reviewer-1", verdict=verdict, failure_class=failure_class
            )
            done += 1
    return done


@pytest.fixture(scope="module")
def run(pg_template: str) -> Iterator[Run]:
    with cloned_database() as url:
        for api in make_api(url):
            with session_scope(api.engine) as session:
                for document, _ in TASKS.values():
                    apply_config(session, document, actor="test")
            for name in TASKS:
                promoted = api.client.post(
                    f"/v1/tasks/{name}/promote",
                    json={"reason": "test canary", "force": True},
                    headers=api.headers(),
                )
                assert promoted.status_code == 200, promoted.text
            # The windows lie in the past (results may be at most 5 minutes ahead), the
            # stage began before them.
            now = datetime.now(UTC)
            start = now - timedelta(seconds=now.timestamp() % WINDOW + (WINDOWS + 4) * WINDOW)
            with session_scope(api.engine) as session:
                session.execute(update(Task).values(stage_changed_at=start - timedelta(hours=1)))
            out = Run(api, start)
            for k in range(WINDOWS):
                for name, (_, wrong) in TASKS.items():
                    post_all(api, results(name, start, k, wrong))
                report = run_pass(
                    api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS)
                )
                assert report.failed == [], report.failed
                out.decisions += report.decisions
                with session_scope(api.engine) as session:
                    out.stages.append(dict(session.execute(select(Task.name, Task.stage)).all()))
                out.labelled += label_everything(
                    api, [name for name in TASKS if out.stages[-1][name] == "canary"]
                )
                alerts = api.client.get(
                    "/v1/alerts", params={"task": "class_task"}, headers=api.headers("read")
                ).json()["alerts"]
                out.class_alerts.append(
                    [(a["state"], a["value"]) for a in alerts if a["kind"] == "new_failure_class"]
                )
            yield out


def test_a_route_accuracy_breach_rolls_the_canary_back(run: Run) -> None:
    assert run.labelled > 0
    # Route-accuracy windows 0, 1, 2 close (with their labels) at passes 1, 2, 3.
    assert [s["acc_task"] for s in run.stages] == ["canary"] * 3 + ["rolled_back"] * 2
    [decision] = [d for d in run.decisions if d["task"] == "acc_task"]
    assert decision["action"] == "rollback" and decision["actor"] == "policy"
    assert decision["rule"] == "route_acc >= 0.9" and decision["bucket"] == "all"
    windows = decision["evidence"]["windows"]
    assert len(windows) == 3 and all(w["verdict"] == "breach" for w in windows)
    for k, w in enumerate(windows):
        begin = datetime.fromisoformat(w["window_start"])
        assert begin == run.start + timedelta(seconds=k * WINDOW)
        assert datetime.fromisoformat(w["window_end"]) - begin == timedelta(seconds=WINDOW)
        assert w["counts"] == "effective labels"
        assert 0 < w["den"] and w["num"] == pytest.approx(w["estimate"] * w["den"], abs=1e-3)
        # 38 of 40 decided edge, 16 of those wrong, 2 missed offloads: the truth is 22/40
        assert w["estimate"] < 0.9 and w["bound"] < 0.9
    assert "route accuracy from labels overall breached >= 0.9" in decision["reason"]
    assert "effective labels" in decision["reason"]
    assert decision["evidence"]["models"] == ["small@3"]
    assert run.stages[-1]["fine_task"] == "canary"


def test_a_failure_class_rule_rolls_the_canary_back(run: Run) -> None:
    assert [s["class_task"] for s in run.stages] == ["canary"] * 3 + ["rolled_back"] * 2
    [decision] = [d for d in run.decisions if d["task"] == "class_task"]
    assert decision["rule"] == "failure_class amount <= 0.05"
    assert "failure class amount" in decision["reason"]
    assert all(
        w["verdict"] == "breach" and w["estimate"] > 0.05 for w in decision["evidence"]["windows"]
    )
    assert {d["task"] for d in run.decisions} == {"acc_task", "class_task"}


def test_route_accuracy_windows_are_served(run: Run) -> None:
    api = run.api
    body = api.client.get("/v1/tasks/acc_task/route-accuracy", headers=api.headers("read")).json()
    RouteAccuracyOut.model_validate(body, strict=False)  # the answer its schema documents
    assert body["window_seconds"] == WINDOW and body["note"] is None
    windows = sorted(body["windows"], key=lambda w: w["window_start"])
    assert len(windows) == WINDOWS
    closed = [w for w in windows if w["closed"]]
    assert len(closed) == WINDOWS - 1 and not windows[-1]["closed"]
    # Windows 0-2 were labelled; after the rollback at pass 3 nobody labels this task.
    assert [w["n_labels"] > 0 for w in closed] == [True] * 3 + [False] * (WINDOWS - 4)
    for w in closed[:3]:
        assert w["n_effective"] > 0
        assert w["low"] <= w["estimate"] <= w["high"]
        # The two error directions make up what route accuracy misses.
        assert w["estimate"] + w["missed_offload"] + w["wrong_offload"] == pytest.approx(1.0)
        assert w["missed_offload"] > 0 and w["wrong_offload"] > 0
        assert w["failure_classes"]["amount"] == pytest.approx(w["wrong_offload"])
    fine = api.client.get("/v1/tasks/fine_task/route-accuracy", headers=api.headers("read")).json()
    assert all(w["wrong_offload"] == 0 for w in fine["windows"] if w["n_labels"])
    # A closed window is frozen: the rows in the database were closed by a pass clock.
    with session_scope(api.engine) as session:
        frozen = session.scalars(
            select(RouteAccuracyWindow.closed_at).where(RouteAccuracyWindow.closed_at.is_not(None))
        ).all()
    assert frozen and all(c < datetime.now(UTC) for c in frozen)
    refused = api.client.get("/v1/tasks/acc_task/route-accuracy", headers=api.headers("review"))
    assert refused.status_code == 403
    assert (
        api.client.get("/v1/tasks/nope/route-accuracy", headers=api.headers("read")).status_code
        == 404
    )


def test_new_failure_class_alert_opens_once_and_resolves_when_its_window_closed(run: Run) -> None:
    # Labels of window 0 are counted at pass 1 (which also closes window 0): the alert opens
    # there, and resolves at pass 2. `amount` is never new again.
    assert run.class_alerts[0] == []
    assert run.class_alerts[1] == [("open", 1.0)]
    assert run.class_alerts[2] == [("resolved", 1.0)]
    assert all(a == [("resolved", 1.0)] for a in run.class_alerts[2:])
    with session_scope(run.api.engine) as session:
        announced = [
            (e.task, e.document["action"])
            for e in session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))
            if e.kind == "alert" and e.document["rule"] == "new_failure_class"
        ]
    assert ("class_task", "alert_opened") in announced
    assert announced.count(("class_task", "alert_opened")) == 1
    assert announced.count(("class_task", "alert_resolved")) == 1
    assert ("fine_task", "alert_opened") not in announced


def test_agreement_and_calibration_are_served(run: Run) -> None:
    api = run.api
    calibration = api.client.get("/v1/tasks/acc_task/calibration", headers=api.headers("read"))
    assert calibration.status_code == 200
    CalibrationOut.model_validate(calibration.json())
    (label,) = calibration.json()["comparators"]
    assert label["comparator"] == "label"
    # Every conflict was a wrong edge answer; no agreeing pair hid one.
    assert label["conflict_precision"]["estimate"] == 1.0
    assert label["agree_miss_rate"]["estimate"] == 0.0
    agreement = api.client.get("/v1/tasks/acc_task/review-agreement", headers=api.headers("read"))
    assert agreement.status_code == 200
    AgreementOut.model_validate(agreement.json())
    # One reviewer per item: nothing to agree on yet, and it says so.
    assert agreement.json()["items"] == 0 and agreement.json()["note"]
    with session_scope(api.engine) as session:
        reasons = set(
            session.scalars(select(ReviewItem.reason).where(ReviewItem.layer != "regression"))
        )
    assert {"conflict", "agree"} <= reasons
