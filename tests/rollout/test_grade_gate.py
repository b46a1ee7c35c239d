"""Leaving shadow needs the task's grade, computed at the promotion, to be `offload`; the
gate's own checks stay. A `shadow`, `insufficient` or by-score `keep_cloud` grade refuses
naming the dimension (or what is missing), and `force` goes past it, audited with the tier
and why; the error-cost veto and `forbid` refuse even forced. Moves that do not leave
shadow (cloud → shadow, canary → next step) never read the grade. Promotions through the
API, and the policy's auto-promotion, on SQLite and PostgreSQL.

The grades here are the real `grade()` over windows the tests write
(tests/grading_support.py); every expected figure is worked out from what was written."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from controlplane.db import session_scope
from controlplane.models import Task, TaskGrade
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.grading_support import give_offload_grade, write_graded_traffic
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
WINDOW, LATENESS = 60, 30
VETO = 0.7  # the settings' default, which the test app runs with
PAIRS = 60  # agreeing pairs in the one window the gate reads (it needs 20; no edge
# failure among 60 keeps the failure bound under the 10% rule)
# A long tail: the field guide's ticket classifier (P95 8.7x P50, 640 tokens on average).
P50, P95, MEAN = 300.0, 2600.0, 640.0


@pytest.fixture
def pg_api(pg_url: str) -> Iterator[Api]:
    """PostgreSQL only, for the tests that run the same paths once more per tier."""
    yield from make_api(pg_url)


def config(name: str, **overrides: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        # One rule, off: no rule can fire, so the gate's own checks are the only ones.
        "rollback": {
            "rules": [{"metric": "offload_fail_rate", "op": "<=", "threshold": 0.1, "mode": "off"}]
        },
        "promotion": {
            "min_windows": 1,
            "min_samples_per_bucket": 20,
            "agreement_lower_bound": 0.5,
            "canary_steps": [50],
        },
        **overrides,
    }


def apply(api: Api, document: dict[str, Any]) -> None:
    with session_scope(api.engine) as session:
        apply_config(session, document, actor="test")


def gate(api: Api, task: str) -> dict[str, Any]:
    return dict(api.client.get(f"/v1/tasks/{task}/gate", headers=api.headers("read")).json())


def close_a_window(api: Api, task: str, windows_ago: int = 4) -> None:
    """One window of PAIRS agreeing pairs closed in the task's stage (its stage change
    moved half an hour before it), closed by a pass at its clock."""
    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW + windows_ago * WINDOW)
    with session_scope(api.engine) as session:
        earlier = start - timedelta(minutes=30)
        session.execute(update(Task).where(Task.name == task).values(stage_changed_at=earlier))
    post_all(
        api,
        [
            make_result(
                request_id=f"{task}-{windows_ago}-{i}",
                task=task,
                ts=(start + timedelta(seconds=i / 2)).isoformat(),
                input_tokens=300,
                # Inputs all different: no duplicate counts as a free repeat pair.
                input={"text": f"ticket {windows_ago}-{i}: where is my order?"},
            )
            for i in range(PAIRS)
        ],
    )
    run_pass(api.engine, start + timedelta(seconds=WINDOW + LATENESS), veto=VETO)


def pass_the_gate(api: Api, task: str) -> None:
    close_a_window(api, task)
    seen = gate(api, task)
    assert seen["passed"] is True and seen["windows"] == 1, (seen["reasons"], seen["buckets"])


def promote(api: Api, task: str, *, force: bool = False, reason: str = "test") -> Any:
    return api.client.post(
        f"/v1/tasks/{task}/promote", json={"reason": reason, "force": force}, headers=api.headers()
    )


def stage(api: Api, task: str) -> str:
    return str(api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"])


def promotions_audited(api: Api, task: str) -> list[dict[str, Any]]:
    entries = api.client.get("/v1/audit", params={"task": task}, headers=api.headers()).json()
    return [e for e in entries["entries"] if e["action"] == "task.promote"]


def kept_grade(api: Api, task: str) -> TaskGrade | None:
    with session_scope(api.engine) as session:
        return session.scalars(
            select(TaskGrade).join(Task, Task.id == TaskGrade.task_id).where(Task.name == task)
        ).one_or_none()


def test_an_offload_grade_and_a_passing_gate_promote_out_of_shadow(api: Api) -> None:
    apply(api, config("easy"))
    give_offload_grade(api.url, "easy")
    pass_the_gate(api, "easy")

    promoted = promote(api, "easy")
    assert promoted.status_code == 200, promoted.text
    evidence = promoted.json()["evidence"]
    assert evidence["forced"] is False and "forced_past" not in evidence
    assert evidence["gate"]["passed"] is True
    assert evidence["grade"]["tier"] == "offload" and evidence["grade"]["missing"] == []
    assert stage(api, "easy") == "canary"
    # The grade judged at the promotion is kept as the day's grade.
    kept = kept_grade(api, "easy")
    assert kept is not None and kept.tier == "offload"
    assert kept.document["computed_at"] == evidence["grade"]["computed_at"]
    (entry,) = promotions_audited(api, "easy")
    assert entry["details"]["tier"] == "offload" and "forced" not in entry["details"]


def _long_tail(api: Api, task: str) -> str:
    write_graded_traffic(api.url, task, p50=P50, p95=P95, mean=MEAN)
    return f"input length: P95 is {P95 / P50:.1f}x P50"


def _self_disagreeing(api: Api, task: str) -> str:
    write_graded_traffic(api.url, task, p50=P50, p95=P95, mean=MEAN, self_agreement=0.6)
    return "determinism: the cloud agrees with itself on 60.0% of"


def _no_traffic(api: Api, task: str) -> str:
    return "too little traffic to grade the task: results: 0 of the 1,000 needed"


@pytest.mark.parametrize(
    ("tier", "traffic"),
    [("shadow", _long_tail), ("keep_cloud", _self_disagreeing), ("insufficient", _no_traffic)],
)
def test_a_grade_short_of_offload_refuses_naming_the_dimension_and_force_is_audited(
    pg_api: Api, tier: str, traffic: Any
) -> None:
    api = pg_api
    apply(api, config("graded"))
    named = traffic(api, "graded")
    pass_the_gate(api, "graded")

    refused = promote(api, "graded")
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    assert list(detail) == ["grade"]  # the gate passed: the grade alone refuses
    assert detail["grade"]["tier"] == tier and detail["grade"]["forceable"] is True
    assert named in detail["grade"]["reason"], detail["grade"]["reason"]
    assert stage(api, "graded") == "shadow"
    assert kept_grade(api, "graded") is None  # a refused promotion keeps nothing

    forced = promote(api, "graded", force=True, reason="the tail is routed to the cloud")
    assert forced.status_code == 200, forced.text
    evidence = forced.json()["evidence"]
    past = {"grade": {"tier": tier, "reason": detail["grade"]["reason"]}}
    assert evidence["forced"] is True and evidence["forced_past"] == past
    assert evidence["grade"]["tier"] == tier and evidence["gate"]["passed"] is True
    assert stage(api, "graded") == "canary"
    (entry,) = promotions_audited(api, "graded")
    assert entry["details"]["forced"] is True and entry["details"]["forced_past"] == past
    assert (
        entry["details"]["reason"] == "promoted to canary at 50%: the tail is routed to the cloud"
    )
    assert entry["details"]["tier"] == tier


def test_the_refusal_names_both_the_gate_and_the_grade_when_both_block(pg_api: Api) -> None:
    api = pg_api
    apply(api, config("unready"))
    refused = promote(api, "unready")
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert detail["gate"]["passed"] is False and detail["grade"]["tier"] == "insufficient"
    assert detail["gate"]["reasons"] == gate(api, "unready")["reasons"]
    forced = promote(api, "unready", force=True).json()["evidence"]
    assert forced["forced_past"] == {
        "gate": detail["gate"]["reasons"],
        "grade": {"tier": "insufficient", "reason": detail["grade"]["reason"]},
    }


def test_the_veto_and_forbid_refuse_even_forced(api: Api) -> None:
    apply(api, config("risky", error_cost=0.8))
    apply(api, config("planner", forbid="planning"))
    for name in ("risky", "planner"):
        give_offload_grade(api.url, name)
        pass_the_gate(api, name)

    vetoed = promote(api, "risky", force=True)
    assert vetoed.status_code == 409
    assert "error_cost 0.8 is at or over the error-cost veto 0.7" in vetoed.json()["detail"]["veto"]

    forbidden = promote(api, "planner", force=True)
    assert forbidden.status_code == 409
    refusal = forbidden.json()["detail"]
    assert list(refusal) == ["grade"]
    assert refusal["grade"]["tier"] == "forbid" and refusal["grade"]["forceable"] is False
    assert refusal["grade"]["reason"].startswith("forbid: declared long-chain planning")
    for name in ("risky", "planner"):
        assert stage(api, name) == "shadow"
        assert promotions_audited(api, name) == []


def test_cloud_to_shadow_and_canary_steps_do_not_read_the_grade(api: Api) -> None:
    apply(api, config("cloudy", stage="cloud"))
    apply(api, config("stepping", promotion={**config("x")["promotion"], "canary_steps": [5, 50]}))
    # No traffic at all: the grade would be `insufficient`.
    to_shadow = promote(api, "cloudy")
    assert to_shadow.status_code == 200, to_shadow.text
    assert "grade" not in to_shadow.json()["evidence"] and stage(api, "cloudy") == "shadow"

    assert promote(api, "stepping", force=True).status_code == 200  # past `insufficient`
    pass_the_gate(api, "stepping")  # in canary at 5%
    step = promote(api, "stepping")
    assert step.status_code == 200, step.text
    assert step.json()["stage_after"] == "canary" and "grade" not in step.json()["evidence"]
    assert kept_grade(api, "stepping") is not None  # kept once, by the forced promotion


def test_auto_promotion_waits_for_an_offload_grade(api: Api) -> None:
    promotion = {**config("x")["promotion"], "auto_promote": True}
    apply(api, config("eager", promotion=promotion))
    close_a_window(api, "eager", windows_ago=6)
    assert gate(api, "eager")["passed"] is True
    assert stage(api, "eager") == "shadow"  # the gate passed, the grade is insufficient

    give_offload_grade(api.url, "eager")
    close_a_window(api, "eager", windows_ago=4)
    assert stage(api, "eager") == "canary"
    decisions = api.client.get(
        "/v1/decisions", params={"task": "eager"}, headers=api.headers("read")
    ).json()["decisions"]
    (promoted,) = [d for d in decisions if d["action"] == "promote"]
    assert promoted["actor"] == "policy" and promoted["evidence"]["forced"] is False
    assert promoted["evidence"]["grade"]["tier"] == "offload"
    kept = kept_grade(api, "eager")
    assert kept is not None and kept.tier == "offload"
