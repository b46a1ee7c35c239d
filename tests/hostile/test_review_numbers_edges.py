"""Hostile review of numbers at their edges: values the system accepts (in a task config, in
a setting) that later make a background job fail for good, or turn a rollback rule or the
error-cost veto off without a word. The rule under test: when in doubt the answer is the
cloud, and no value one config carries may stall a task's evaluation or a page of all tasks.

Each test pinned one defect as a strict xfail; each is fixed where the value is given, and
the tests now check both halves: the value is refused, naming the field and why, and at
the edge of what is allowed the system does what the refused value kept it from doing (a
canary with every answer wrong is rolled back, the evaluation never fails, the Overview
reads every task, the veto holds). Bounds: a confidence from 0.5 to 0.999999 (`point`
aside), a `min_effect` of at least 1e-5, an `h` of at least 1e-6, a veto above 0 and at
most 1 (controlplane/catalog/schemas.py and controlplane/settings.py say why).

Found on real PostgreSQL, results posted through the API and windows closed by the pass
(each now refused where it is given):

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

import logging
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from statistics import StatisticsError
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import update

from controlplane.catalog.schemas import MAX_CONFIDENCE, MIN_CONFIDENCE, MIN_EFFECT_LEAST, MIN_H
from controlplane.db import session_scope
from controlplane.models import Task
from controlplane.rollout import overview as overview_module
from controlplane.rollout.overview import overview
from controlplane.rollout.spans import t_quantile, t_within
from controlplane.rollout.verdicts import judge
from controlplane.scheduler import run_pass
from controlplane.settings import Settings, explain
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


def refused(api: Api, config: dict[str, Any], *said: str) -> None:
    """POST /v1/tasks refuses `config` with 422, saying each of `said` (the field, why),
    and registers nothing."""
    response = api.client.post("/v1/tasks", json=config, headers=api.headers())
    assert response.status_code == 422, response.text
    assert all(words in response.text for words in said), response.text
    name = config["task"]
    gone = api.client.get(f"/v1/tasks/{name}", headers=api.headers("read"))
    assert gone.status_code == 404, gone.text


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

LEVEL_REFUSED = f"must be `point` or a level from {MIN_CONFIDENCE} to {MAX_CONFIDENCE}"


@pytest.mark.parametrize(
    ("rollback", "field", "edge"),
    [
        (
            {"confidence": 1.0, "rules": [AGREEMENT]},
            "rollback.confidence",
            {"confidence": MAX_CONFIDENCE, "rules": [AGREEMENT]},
        ),
        (
            {"confidence": 0.0, "rules": [AGREEMENT]},
            "rollback.confidence",
            {"confidence": MIN_CONFIDENCE, "rules": [AGREEMENT]},
        ),
        (
            {"rules": [{**AGREEMENT, "confidence": 1.0}]},
            "rollback.rules.0.confidence",
            {"rules": [{**AGREEMENT, "confidence": MAX_CONFIDENCE}]},
        ),
    ],
    ids=["policy-1", "policy-0", "rule-1"],
)
def test_a_canary_with_a_rollback_confidence_at_an_end_still_rolls_back(
    api: Api, rollback: dict[str, Any], field: str, edge: dict[str, Any]
) -> None:
    # 1 (or 0) made every verdict ask inv_cdf(1.0) (or 0.0): refused where it is written.
    refused(api, task_config("sure", rollback), field, LEVEL_REFUSED)
    # At the end of what is allowed every evaluation runs and the canary is rolled back.
    assert apply(api, task_config("sure", edge)) in (200, 201)
    start = to_canary(api, "sure")
    failed = broken_windows(api, "sure", start, windows=4)
    assert failed == [], failed[:1]
    assert stage(api, "sure") == "rolled_back"


ODD = 0.654321  # a confidence no default has: the tag of the task whose judging fails


def test_one_task_with_a_rollback_confidence_of_one_leaves_the_overview_readable(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refused(
        api,
        task_config("sure", {"confidence": 1.0, "rules": [AGREEMENT]}),
        "rollback.confidence",
        LEVEL_REFUSED,
    )
    # At the highest allowed confidence the Overview judges the task's window.
    sure = task_config("sure", {"confidence": MAX_CONFIDENCE, "rules": [AGREEMENT]})
    assert apply(api, sure) in (200, 201)
    start = to_canary(api, "sure")
    broken_windows(api, "sure", start, windows=1)
    # A task whose judging still fails, whatever the reason (here made to, by its tag),
    # is shown in trouble, logged, and takes no other task's row with it.
    assert apply(api, task_config("odd", {"confidence": ODD, "rules": [AGREEMENT]})) in (200, 201)
    odd_start = to_canary(api, "odd")
    broken_windows(api, "odd", odd_start, windows=1)

    def failing(windows: Any, op: Any, threshold: float, confidence: Any) -> Any:
        if confidence == ODD:
            raise StatisticsError("p must be in the range 0.0 < p < 1.0")
        return judge(windows, op, threshold, confidence)

    monkeypatch.setattr(overview_module, "judge", failing)
    with caplog.at_level(logging.ERROR), session_scope(api.engine) as session:
        shown = overview(session, now=start + timedelta(seconds=WINDOW + LATENESS + 1))
    rows = {row.task: row for row in shown.rows}
    assert set(rows) >= {"sure", "odd", "ticket_classify", "invoice_extract"}
    assert rows["sure"].breaches  # every answer of its window was wrong
    assert rows["sure"].rules_error is None
    odd = rows["odd"]
    assert odd.rules_error is not None and "StatisticsError" in odd.rules_error
    assert "its rules cannot be judged" in odd.trouble and odd in shown.in_trouble
    assert odd.n_pairs == PER_WINDOW  # its figures are still shown
    assert all(row.rules_error is None for name, row in rows.items() if name != "odd")
    assert [r.getMessage() for r in caplog.records if "overview" in r.name] == [
        "task odd: the overview could not judge its latest window"
    ]


# --- a net_savings rule's confidence just below 1 -----------------------------------------

NET_SAVINGS = {
    "metric": "net_savings",
    "op": ">=",
    "threshold": 0,
    "span": "2m",
    "min_samples": 20,
    "confidence": 0.9999999999999999,
}


def test_a_net_savings_confidence_just_below_one_never_fails_the_evaluation(api: Api) -> None:
    assert 0.9999999999999999 < 1 and 0.5 + 0.9999999999999999 / 2 == 1.0
    config = task_config("dear", {"rules": [NET_SAVINGS]}, fixed_costs={"gpu": 1000.0})
    refused(
        api,
        config,
        "rollback.rules.0",
        "confidence of a net_savings rule is its interval's level",
        f"at most {MAX_CONFIDENCE}",
    )
    # The highest allowed level: Student's t stays exact over every span an evaluation reads
    # (1 to 2015 degrees of freedom), its tail within 1e-7 of itself.
    for df in range(1, 2016):
        t = t_quantile(MAX_CONFIDENCE, df)
        assert math.isfinite(t) and t > 0, df
        assert abs((1 - t_within(t, df)) - (1 - MAX_CONFIDENCE)) < 1e-7 * (1 - MAX_CONFIDENCE), df
    edge = {**NET_SAVINGS, "confidence": MAX_CONFIDENCE}
    assert apply(api, {**config, "rollback": {**config["rollback"], "rules": [edge]}}) in (200, 201)
    start = to_canary(api, "dear")
    # The edge serves every request alone: the interval needs two windows with results.
    failed = broken_windows(api, "dear", start, windows=3, served="edge", cloud=None)
    assert failed == [], failed[:1]


# --- CUSUM parameters at the lower float edge ---------------------------------------------


@pytest.mark.parametrize(
    ("detector", "field", "why", "edge"),
    [
        (
            {"min_effect": 1e-17},
            "rollback.rules.0.min_effect",
            f"must be at least {MIN_EFFECT_LEAST:g}",
            # The least shift adds little evidence a window (40 conflicts: 0.004), so a
            # small h: three such windows reach it.
            {"min_effect": MIN_EFFECT_LEAST, "h": 0.01},
        ),
        (
            {"h": 5e-324},
            "rollback.rules.0.h",
            f"must be at least {MIN_H:g}",
            {"h": MIN_H},
        ),
    ],
    ids=["min_effect-1e-17", "h-5e-324"],
)
def test_a_rule_whose_cusum_parameters_are_at_the_float_edge_still_rolls_back(
    api: Api, detector: dict[str, Any], field: str, why: str, edge: dict[str, Any]
) -> None:
    refused(api, task_config("blind", {"rules": [{**AGREEMENT, **detector}]}), field, why)
    assert apply(api, task_config("blind", {"rules": [{**AGREEMENT, **edge}]})) in (200, 201)
    start = to_canary(api, "blind")
    failed = broken_windows(api, "blind", start, windows=6)
    assert failed == [], failed[:1]
    assert stage(api, "blind") == "rolled_back"


# --- the error-cost veto setting ----------------------------------------------------------


@pytest.mark.parametrize("value", ["70", "nan", "inf", "0", "-0.5"])
def test_an_error_cost_veto_setting_that_would_hold_nothing_is_refused(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SHADOWPLANE_ERROR_COST_VETO", value)
    with pytest.raises(ValidationError) as refusal:
        Settings(database_url=pg_url)
    [line] = explain(refusal.value)
    assert line.startswith("SHADOWPLANE_ERROR_COST_VETO: must be above 0 and at most 1"), line


def test_an_error_cost_veto_setting_never_lets_an_error_cost_of_one_leave_shadow(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The highest veto allowed still holds a task whose error_cost is 1.
    monkeypatch.setenv("SHADOWPLANE_ERROR_COST_VETO", "1")
    veto = Settings(database_url=pg_url).error_cost_veto
    assert veto == 1.0
    for api in make_api(pg_url, error_cost_veto=veto):
        assert apply(api, task_config("refunds", {}, error_cost=1.0)) in (200, 201)
        response = api.client.post(
            "/v1/tasks/refunds/promote",
            json={"reason": "forced", "force": True},
            headers=api.headers(),
        )
        assert response.status_code == 409, response.text
        assert "veto" in response.json()["detail"], response.text
        assert stage(api, "refunds") == "shadow"
