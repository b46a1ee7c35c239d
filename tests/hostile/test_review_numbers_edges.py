"""Hostile review of numbers at their edges: values the system accepts (in a task config, in
a setting) that later make a background job fail for good, or turn a rollback rule or the
error-cost veto off without a word. The rule under test: when in doubt the answer is the
cloud, and no value one config carries may stall a task's evaluation or a page of all tasks.

Each test pins one defect as a strict xfail; it becomes a plain test once the defect is
fixed. A fix may refuse the value where it is given (the test then passes at the refusal)
or make it work; either way the property checked is the same.

Found on real PostgreSQL, results posted through the API and windows closed by the pass:

- `rollback.confidence: 1` (or `0`; or a rule's own `confidence: 1`) is accepted by
  POST /v1/tasks: `Fraction` allows both ends. Every verdict then asks
  `NormalDist().inv_cdf(1.0)` (controlplane/rollout/verdicts.py, `z_for`), which raises
  "StatisticsError: p must be in the range 0.0 < p < 1.0": every pass reports the task's
  rollout evaluation failed, and a canary whose edge answers every request wrong (100%
  conflicts) stays in canary for good. The Overview (dashboard and `overview()`) judges the
  same rules (`rollout.overview.breaches`) and raises too: one task's config takes the
  page of every task down.
- A net_savings rule's `confidence` is refused at 1 but not at 0.9999999999999999 (the
  largest double below 1): `t_quantile` asks `inv_cdf(0.5 + level / 2)`, which rounds to
  `inv_cdf(1.0)`: the same StatisticsError at every window close (levels with fifteen
  nines also divide by a density that underflows: ZeroDivisionError from about 400
  windows in the span).
- The CUSUM's parameters at their lower float edge make a rule blind, however bad the
  windows: `min_effect: 1e-17` (allowed: `gt=0`) moves the threshold 0.9 by less than its
  last bit, so both log-likelihood weights are exactly 0 (`detectors.llr_weights`); `h:
  5e-324` (allowed: `gt=0`) gets the default cap `h / 2`, which underflows to 0
  (`catalog.schemas.resolved_cap`). Either way no window ever adds evidence: 100%
  conflicts in every window, never a rollback.
- `SHADOWPLANE_ERROR_COST_VETO` is a bare float: `70` (a percentage), `nan` or `inf` are
  read without a word, and `error_cost >= veto` is then never true: a task declaring
  `error_cost: 1.0` is promoted to canary (forced past its grade, as the demo does), where
  the documented veto says it "never leaves shadow, forced or not".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import update

from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout.overview import overview
from controlplane.scheduler import run_pass
from controlplane.settings import Settings
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
WINDOW, LATENESS = 60, 30
PER_WINDOW = 40  # results per window: twice the rules' min_samples below


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    yield from make_api(pg_url)


def task_config(name: str, rollback: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "rollback": {"min_samples": PER_WINDOW // 2, **rollback},
        "promotion": {"canary_steps": [50]},
        **extra,
    }


def apply(api: Api, config: dict[str, Any]) -> int:
    """POST /v1/tasks as an SRE would; its status code."""
    response = api.client.post("/v1/tasks", json=config, headers=api.headers())
    assert response.status_code in (200, 201, 422), response.text
    return response.status_code


def to_canary(api: Api, name: str) -> datetime:
    """Promote `name` to canary (forced past the gate and the grade) and move its creation
    and stage change an hour before the start of a window eight windows ago: the start,
    so the test's windows lie in the past and its passes run at past clocks."""
    response = api.client.post(
        f"/v1/tasks/{name}/promote", json={"reason": "test", "force": True}, headers=api.headers()
    )
    assert response.status_code == 200, response.text
    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW + 8 * WINDOW)
    earlier = start - timedelta(hours=1)
    with session_scope(api.engine) as session:
        session.execute(
            update(Task)
            .where(Task.name == name)
            .values(created_at=earlier, stage_changed_at=earlier)
        )
    return start


def stage(api: Api, name: str) -> str:
    return str(api.client.get(f"/v1/tasks/{name}", headers=api.headers("read")).json()["stage"])


def broken_windows(api: Api, name: str, start: datetime, windows: int, **result: Any) -> list[Any]:
    """`windows` windows in which the edge answers every request wrong (each result a
    conflict), each closed by a pass; the passes' failures, in order."""
    failed = []
    for k in range(windows):
        post_all(
            api,
            [
                make_result(
                    request_id=f"{name}-{k}-{i}",
                    task=name,
                    ts=(start + timedelta(seconds=k * WINDOW + i * 30 / PER_WINDOW)).isoformat(),
                    input={"text": f"{name} ticket {k}-{i}"},
                    edge={"output": "exchange", "model": "small@3"},
                    **result,
                )
                for i in range(PER_WINDOW)
            ],
        )
        report = run_pass(api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS))
        failed += report.failed
    return failed


AGREEMENT = {"metric": "agreement", "op": ">=", "threshold": 0.9}


# --- a rate rule's confidence of 1 or 0 ---------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="rollback confidence 1 or 0 is accepted; every evaluation then raises "
    "StatisticsError in verdicts.z_for (inv_cdf(1.0)) and the canary is never rolled back",
)
@pytest.mark.parametrize(
    "rollback",
    [
        {"confidence": 1.0, "rules": [AGREEMENT]},
        {"confidence": 0.0, "rules": [AGREEMENT]},
        {"rules": [{**AGREEMENT, "confidence": 1.0}]},
    ],
    ids=["policy-1", "policy-0", "rule-1"],
)
def test_a_canary_with_a_rollback_confidence_at_an_end_still_rolls_back(
    api: Api, rollback: dict[str, Any]
) -> None:
    if apply(api, task_config("sure", rollback)) == 422:
        return  # refused where it is written: fixed
    start = to_canary(api, "sure")
    failed = broken_windows(api, "sure", start, windows=4)
    assert failed == [], failed[:1]
    assert stage(api, "sure") == "rolled_back"


@pytest.mark.xfail(
    strict=True,
    reason="the Overview judges every task's rules (rollout.overview.breaches): one task "
    "with rollback confidence 1 makes overview() raise StatisticsError for every task",
)
def test_one_task_with_a_rollback_confidence_of_one_leaves_the_overview_readable(
    api: Api,
) -> None:
    if apply(api, task_config("sure", {"confidence": 1.0, "rules": [AGREEMENT]})) == 422:
        return  # refused where it is written: fixed
    start = to_canary(api, "sure")
    broken_windows(api, "sure", start, windows=1)
    with session_scope(api.engine) as session:
        shown = overview(session, now=start + timedelta(seconds=WINDOW + LATENESS + 1))
    rows = {row.task: row for row in shown.rows}
    assert set(rows) >= {"sure", "ticket_classify", "invoice_extract"}
    assert rows["sure"].breaches  # every answer of its window was wrong


# --- a net_savings rule's confidence just below 1 -----------------------------------------

NET_SAVINGS = {
    "metric": "net_savings",
    "op": ">=",
    "threshold": 0,
    "span": "2m",
    "min_samples": 20,
    "confidence": 0.9999999999999999,
}


@pytest.mark.xfail(
    strict=True,
    reason="net_savings confidence 0.9999999999999999 is accepted (< 1); spans.t_quantile "
    "asks inv_cdf(0.5 + level / 2) = inv_cdf(1.0): StatisticsError at every window close",
)
def test_a_net_savings_confidence_just_below_one_never_fails_the_evaluation(api: Api) -> None:
    assert 0.9999999999999999 < 1 and 0.5 + 0.9999999999999999 / 2 == 1.0
    config = task_config("dear", {"rules": [NET_SAVINGS]}, fixed_costs={"gpu": 1000.0})
    if apply(api, config) == 422:
        return  # refused where it is written: fixed
    start = to_canary(api, "dear")
    # The edge serves every request alone: the interval needs two windows with results.
    failed = broken_windows(api, "dear", start, windows=3, served="edge", cloud=None)
    assert failed == [], failed[:1]


# --- CUSUM parameters at the lower float edge ---------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="min_effect 1e-17 (p1 rounds to p0: both LLR weights 0) and h 5e-324 (default "
    "cap h/2 underflows to 0) are accepted and make the capped CUSUM blind: 100% "
    "conflicts never roll back",
)
@pytest.mark.parametrize(
    "detector", [{"min_effect": 1e-17}, {"h": 5e-324}], ids=["min_effect-1e-17", "h-5e-324"]
)
def test_a_rule_whose_cusum_parameters_are_at_the_float_edge_still_rolls_back(
    api: Api, detector: dict[str, Any]
) -> None:
    if apply(api, task_config("blind", {"rules": [{**AGREEMENT, **detector}]})) == 422:
        return  # refused where it is written: fixed
    start = to_canary(api, "blind")
    # The default h (5) and cap (2) fire at the third such window; six are given.
    failed = broken_windows(api, "blind", start, windows=6)
    assert failed == [], failed[:1]
    assert stage(api, "blind") == "rolled_back"


# --- the error-cost veto setting ----------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="SHADOWPLANE_ERROR_COST_VETO is an unbounded float: 70, nan or inf is read, "
    "error_cost >= veto is never true, and an error_cost 1.0 task leaves shadow",
)
@pytest.mark.parametrize("value", ["70", "nan", "inf"])
def test_an_error_cost_veto_setting_never_lets_an_error_cost_of_one_leave_shadow(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SHADOWPLANE_ERROR_COST_VETO", value)
    try:
        veto = Settings(database_url=pg_url).error_cost_veto
    except ValidationError:
        return  # refused where it is set: fixed
    assert veto == 70 or not math.isfinite(veto)
    for api in make_api(pg_url, error_cost_veto=veto):
        assert apply(api, task_config("refunds", {}, error_cost=1.0)) in (200, 201)
        response = api.client.post(
            "/v1/tasks/refunds/promote",
            json={"reason": "forced", "force": True},
            headers=api.headers(),
        )
        assert response.status_code == 409, response.text
        assert stage(api, "refunds") == "shadow"
