"""End to end on PostgreSQL: the span rollback triggers over results posted through the API
and windows closed by the pass. net_savings rolls back a canary whose fixed costs exceed
its savings (evidence that sums by hand from the windows API), leaves one notice per run
in shadow, and never fires on a saving task; input_shift rolls back a canary whose inputs
grew and stayed, marks it needs_regrade until a grade over traffic since the shift says
offload, and only raises an alert for a one-window burst. (That `shadowplane tick` writes
what the in-process pass writes for both rules: tests/workers/test_after_window.py.)"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from controlplane.db import session_scope
from controlplane.models import Decision, OutboxEvent, Task, TaskConfigVersion
from controlplane.rollout.configs import apply_tasks
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
WINDOW, LATENESS = 60, 30
VETO = 0.7
# Per day: 400 in all, 0.2778 per one-minute window — far more than 50 results save.
FIXED_COSTS = {"routing": 100.0, "gpu": 250.0, "ops": 50.0}
NET_SAVINGS = {"metric": "net_savings", "op": ">=", "threshold": 0, "span": "2m", "min_samples": 50}
INPUT_SHIFT = {
    "metric": "input_shift",
    "op": "<=",
    "threshold": 0.25,
    "span": "4m",
    "min_samples": 40,
}
# A grade reads traffic since the shift: 300 results with 60 repeat pairs are enough here.
GRADING = {"min_results": 200, "min_repeat_pairs": 40, "min_days": 0}
SHORT, LONG = 300, 900  # input tokens before and after the shift (3x)


def config(name: str, rule: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "rollback": {"rules": [rule]},
        "promotion": {"canary_steps": [50]},
        "grading": GRADING,
        **extra,
    }


def results(
    task: str,
    start: datetime,
    k: int,
    n: int,
    *,
    tokens: int = SHORT,
    edge: int = 0,
    repeats: int = 0,
) -> list[dict[str, Any]]:
    """`n` results in window `k`, each with an input of its own: the first `edge` served by
    the edge alone, the rest by the cloud with the edge run beside it (agreeing), the last
    `repeats` of those asked of the cloud twice (it agrees with itself)."""
    out = []
    for i in range(n):
        by_edge = i < edge
        result = make_result(
            request_id=f"{task}-{k}-{i}",
            task=task,
            ts=(start + timedelta(seconds=k * WINDOW + i * 30 / n)).isoformat(),
            input={"text": f"{task} ticket {k}-{i}"},
            input_tokens=tokens,
            served="edge" if by_edge else "cloud",
        )
        if by_edge:
            result["cloud"] = None
        elif i >= n - repeats:
            result["cloud_repeat"] = {"output": "refund", "latency_ms": 390.0}
        out.append(result)
    return out


def rewind(api: Api, windows: int, tasks: tuple[str, ...] | None = None) -> datetime:
    """The start of the window `windows` windows before the current one; `tasks` (every
    task when None), their stages and every config version moved an hour before it (the
    test's windows lie in the past, the passes run at past clocks, and a grade reads them as
    the current version's). A task left out keeps its creation time, later than every
    clock a pass runs at here, so no pass computes its empty windows."""
    start = first_window(windows)
    earlier = start - timedelta(hours=1)
    moved = update(Task) if tasks is None else update(Task).where(Task.name.in_(tasks))
    with session_scope(api.engine) as session:
        session.execute(moved.values(created_at=earlier, stage_changed_at=earlier))
        session.execute(update(TaskConfigVersion).values(created_at=earlier))
    return start


def first_window(windows: int) -> datetime:
    now = int(datetime.now(UTC).timestamp())
    return datetime.fromtimestamp((now // WINDOW - windows) * WINDOW, UTC)


def stage_from(api: Api, task: str, at: datetime) -> None:
    """The task's stage began at `at` (a window start): its first window in the stage, and
    the time of the decision that moved it there (the test's clock runs in the past)."""
    with session_scope(api.engine) as session:
        found = session.query(Task).filter(Task.name == task).one()
        found.stage_changed_at = at
        latest = session.scalar(
            select(Decision.id).where(Decision.task_id == found.id).order_by(Decision.id.desc())
        )
        if latest is not None:
            session.execute(update(Decision).where(Decision.id == latest).values(created_at=at))


def clock(start: datetime, k: int) -> datetime:
    """When window `k` closes."""
    return start + timedelta(seconds=(k + 1) * WINDOW + LATENESS)


def close(api: Api, start: datetime, k: int, **kwargs: Any) -> Any:
    return run_pass(api.engine, clock(start, k), veto=VETO, **kwargs)


def promote(api: Api, task: str) -> Any:
    return api.client.post(
        f"/v1/tasks/{task}/promote", json={"reason": "canary", "force": True}, headers=api.headers()
    )


def stage(api: Api, task: str) -> str:
    return str(api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"])


def decisions(api: Api, task: str) -> list[dict[str, Any]]:
    """The task's decisions, oldest first."""
    found = api.client.get(
        "/v1/decisions", params={"task": task}, headers=api.headers("read")
    ).json()["decisions"]
    return list(reversed(found))


def audit_actions(api: Api, task: str) -> list[str]:
    entries = api.client.get("/v1/audit", params={"task": task}, headers=api.headers()).json()
    return [e["action"] for e in reversed(entries["entries"])]


def events(api: Api, task: str, kind: str) -> list[dict[str, Any]]:
    with session_scope(api.engine) as session:
        return list(
            session.scalars(
                select(OutboxEvent.document)
                .where(OutboxEvent.task == task, OutboxEvent.kind == kind)
                .order_by(OutboxEvent.id)
            )
        )


def all_rows(api: Api, task: str, start: datetime, first: int, last: int) -> list[dict[str, Any]]:
    """The `all` rows of windows `first`..`last` from the windows API."""
    answer = api.client.get(
        f"/v1/tasks/{task}/windows",
        params={
            "since": (start + timedelta(seconds=first * WINDOW)).isoformat(),
            "until": (start + timedelta(seconds=(last + 1) * WINDOW)).isoformat(),
            "bucket": "all",
        },
        headers=api.headers("read"),
    )
    assert answer.status_code == 200, answer.text
    rows = [r for r in answer.json()["windows"] if r["bucket"] == "all"]
    assert len(rows) == last - first + 1 and all(r["closed"] for r in rows)
    return rows


def net_savings_by_hand(
    rows: list[dict[str, Any]], *, windows: int, fixed_costs: dict[str, float]
) -> dict[str, Any]:
    """The span's components from two windows' `all` rows: sums, the fixed costs prorated
    over the `windows` elapsed, and the interval with the windows as clusters —
    net ± t · sqrt(K/(K−1) · Σ (s_w − (S/N)·n_w)²), t of a 95% interval with K−1 = 1
    degree of freedom being tan(0.95·π/2) = 12.706."""
    assert len(rows) == 2
    n = sum(r["n_results"] for r in rows)
    edge = sum(r["edge_cost"] for r in rows)
    cloud = sum(r["cloud_cost"] for r in rows)
    base = sum(r["baseline_cost"] for r in rows)
    savings = base - edge - cloud
    share = windows * WINDOW / 86400
    fixed = sum(fixed_costs.values()) * share
    net = savings - fixed
    spread = sum(
        (r["baseline_cost"] - r["edge_cost"] - r["cloud_cost"] - savings / n * r["n_results"]) ** 2
        for r in rows
    )
    half = math.tan(0.95 * math.pi / 2) * math.sqrt(spread * 2 / 1)
    return {
        "results": n,
        "windows": 2,
        "span_seconds": windows * WINDOW,
        "edge_cost": edge,
        "cloud_cost": cloud,
        "paid": edge + cloud,
        "baseline_cost": base,
        "savings": savings,
        "fixed_cost": fixed,
        "fixed_costs": {name: per_day * share for name, per_day in fixed_costs.items()},
        "net_savings": net,
        "low": net - half,
        "high": net + half,
        "per_1k": {
            "edge_cost": edge / n * 1000,
            "cloud_cost": cloud / n * 1000,
            "baseline_cost": base / n * 1000,
            "savings": savings / n * 1000,
            "fixed_cost": fixed / n * 1000,
            "net_savings": net / n * 1000,
        },
    }


def assert_terms(found: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every component by hand, to the 6 places evidence keeps money in."""
    for name, value in expected.items():
        if isinstance(value, dict):
            assert found[name].keys() == value.keys(), name
            for part, v in value.items():
                assert found[name][part] == pytest.approx(v, abs=2e-6), (name, part)
        else:
            assert found[name] == pytest.approx(value, abs=2e-6), name


def money_sentence(expected: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """What the explanation must name: the net, the savings, the fixed costs item by item,
    the largest first (money from 1 up to the cent, below it to three significant digits)."""
    largest_first = sorted(FIXED_COSTS, key=lambda k: -FIXED_COSTS[k])
    assert set(found["fixed_costs"]) == set(largest_first)

    def cash(value: float) -> str:
        value = round(value, 6)
        return f"{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"

    items = ", ".join(f"{name} {cash(expected['fixed_costs'][name])}" for name in largest_first)
    return [
        f"net savings {cash(expected['net_savings'])} = savings {cash(expected['savings'])}",
        f"fixed costs {cash(expected['fixed_cost'])} ({items})",
        f"over {expected['results']:,} results",
    ]


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    yield from make_api(pg_url)


def test_net_savings_rolls_back_a_canary_that_costs_more_than_it_saves(api: Api) -> None:
    """Each canary window: 50 results, the edge serving 50 − 5k of them (saving 0.000897
    each against the cloud's 0.0009), the day's fixed costs 400 (0.2778 a window). At the
    second window the span holds two windows, its interval reaches at most about −0.41: the
    canary rolls back. The same config in shadow leaves one notice for the run; a task with
    fixed costs of 1 a day saves and never fires."""
    apply_tasks(
        api.engine,
        [
            config("costly", NET_SAVINGS, fixed_costs=FIXED_COSTS),
            config("costly_shadow", NET_SAVINGS, fixed_costs=FIXED_COSTS),
            config("thrifty", NET_SAVINGS, fixed_costs={"ops": 1.0}),
        ],
        actor="test",
    )
    for name in ("costly", "thrifty"):
        assert promote(api, name).status_code == 200
    start = rewind(api, windows=6, tasks=("costly", "costly_shadow", "thrifty"))
    for name in ("costly", "costly_shadow", "thrifty"):
        stage_from(api, name, start)

    for k in range(4):
        if k < 2:
            post_all(api, results("costly", start, k, 50, edge=50 - 5 * k))
        post_all(api, results("thrifty", start, k, 50, edge=50 - 5 * k))
        post_all(api, results("costly_shadow", start, k, 50, tokens=SHORT + 100 * k))
        close(api, start, k)
        assert stage(api, "costly") == ("canary" if k == 0 else "rolled_back"), k

    promoted, rollback = decisions(api, "costly")
    assert (promoted["action"], rollback["action"], rollback["actor"]) == (
        "promote",
        "rollback",
        "policy",
    )
    assert rollback["rule"] == "net_savings >= 0 over 2m" and rollback["bucket"] == "all"
    evidence = rollback["evidence"]
    assert evidence["how"] == "net_savings"
    expected = net_savings_by_hand(
        all_rows(api, "costly", start, 0, 1), windows=2, fixed_costs=FIXED_COSTS
    )
    assert expected["high"] < 0 < expected["high"] - expected["low"]
    assert_terms(evidence["span"], expected)
    assert evidence["statistic"] == evidence["span"]["high"]
    assert evidence["window_start"] == start.isoformat()
    assert evidence["models"] == ["small@3"] and evidence["examples"] == []
    sentence = evidence["explanation"]
    assert sentence.startswith("costly rolled back: offloading cost more than it saved over")
    for part in money_sentence(expected, evidence["span"]):
        assert part in sentence, (part, sentence)
    assert rollback["reason"] == sentence
    # Money, not inputs: no re-grade is asked.
    assert "task.needs_regrade" not in audit_actions(api, "costly")
    announced = events(api, "costly", "decision")
    assert [e["action"] for e in announced] == ["promote", "rollback"]
    # The webhook carries the same components as the decision.
    assert announced[1]["evidence"]["span"] == evidence["span"]

    # In shadow: one notice for the run of breaches (windows 1, 2 and 3), with the
    # components; a pass judging the same windows again adds none; the task stays.
    notices = events(api, "costly_shadow", "notice")
    assert len(notices) == 1, notices
    [notice] = notices
    assert notice["rule"] == "net_savings >= 0 over 2m"
    assert notice["explanation"].startswith(
        "costly_shadow would roll back in canary (in shadow: notice only): offloading cost "
    )
    shadow_expected = net_savings_by_hand(
        all_rows(api, "costly_shadow", start, 0, 1), windows=2, fixed_costs=FIXED_COSTS
    )
    assert_terms(notice["evidence"], shadow_expected)
    for part in money_sentence(shadow_expected, notice["evidence"]):
        assert part in notice["explanation"], part
    with session_scope(api.engine) as session:
        shadow_id = session.scalar(select(Task.id).where(Task.name == "costly_shadow"))
    assert shadow_id is not None
    close(api, start, 3, retry={shadow_id})
    assert len(events(api, "costly_shadow", "notice")) == 1
    assert stage(api, "costly_shadow") == "shadow" and decisions(api, "costly_shadow") == []

    # Positive net savings: never fires.
    assert stage(api, "thrifty") == "canary"
    assert [d["action"] for d in decisions(api, "thrifty")] == ["promote"]
    assert events(api, "thrifty", "notice") == []


def psi_by_hand(now: list[int], baseline: list[int]) -> float:
    """Σ (p − q) · ln(p / q) over the bins either side holds, 0.5 added to both sides'
    counts there."""
    held = [i for i in range(len(now)) if now[i] or baseline[i]]
    a = [now[i] + 0.5 for i in held]
    b = [baseline[i] + 0.5 for i in held]
    return sum(
        (x / sum(a) - y / sum(b)) * math.log((x / sum(a)) / (y / sum(b)))
        for x, y in zip(a, b, strict=True)
    )


def one_bin(tokens: int, n: int) -> list[int]:
    """A histogram over the 15 octave bins ([0, 16), [16, 32), … [131072, ∞)) holding `n`
    inputs of `tokens` tokens: 300 lie in [256, 512), the sixth bin; 900 in the seventh."""
    counts = [0] * 15
    counts[{SHORT: 5, LONG: 6}[tokens]] = n
    return counts


def test_input_shift_rolls_back_marks_needs_regrade_and_a_grade_since_the_shift_clears_it(
    api: Api,
) -> None:
    """Both tasks: three shadow windows of 20 inputs of 300 tokens (the baseline they are
    promoted on), then canary from window 3 with a 4-minute span. `shifting`'s inputs grow
    to 900 tokens and stay: it rolls back at window 6, the first close at which the stage
    holds a whole span, every quarter of it shifted. `bursty`'s grow for window 4 only: the
    input_shift alert opens, the rule does not fire."""
    apply_tasks(
        api.engine,
        [config(name, INPUT_SHIFT) for name in ("shifting", "bursty")],
        actor="test",
    )
    start = rewind(api, windows=12, tasks=("shifting", "bursty"))
    for k in range(3):
        for name in ("shifting", "bursty"):
            post_all(api, results(name, start, k, 20))
        close(api, start, k)
    for name in ("shifting", "bursty"):
        promoted = promote(api, name)
        assert promoted.status_code == 200, promoted.text
        kept = promoted.json()["evidence"]["input_baseline"]
        assert kept["counts"] == one_bin(SHORT, 60) and kept["n"] == 60
        assert kept["source"] == "the shadow windows it was promoted from"
        stage_from(api, name, start + timedelta(seconds=3 * WINDOW))

    for k in range(3, 8):
        if k <= 6:
            post_all(api, results("shifting", start, k, 20, tokens=LONG))
        post_all(api, results("bursty", start, k, 20, tokens=LONG if k == 4 else SHORT))
        close(api, start, k)
        assert stage(api, "shifting") == ("canary" if k < 6 else "rolled_back"), k
        assert stage(api, "bursty") == "canary", k

    # The rollback, with the index by hand: the whole span and each quarter (a window each).
    promote_decision, rollback, regrade = decisions(api, "shifting")
    assert (rollback["action"], rollback["actor"], rollback["rule"]) == (
        "rollback",
        "policy",
        "input_shift <= 0.25 over 4m",
    )
    evidence = rollback["evidence"]
    assert evidence["how"] == "input_shift"
    span = evidence["span"]
    baseline, now = one_bin(SHORT, 60), one_bin(LONG, 80)
    assert (span["baseline"], span["now"], span["results"], span["span_seconds"]) == (
        baseline,
        now,
        80,
        240,
    )
    assert span["baseline_source"] == "the shadow windows it was promoted from"
    assert span["psi"] == pytest.approx(psi_by_hand(now, baseline), rel=1e-9)
    assert evidence["statistic"] == span["psi"]
    quarter = psi_by_hand(one_bin(LONG, 20), baseline)
    assert [(q["results"], q["psi"]) for q in span["quarters"]] == [
        (20, pytest.approx(quarter, rel=1e-9))
    ] * 4
    assert quarter > 0.25
    assert evidence["window_start"] == (start + timedelta(seconds=3 * WINDOW)).isoformat()
    assert len(evidence["examples"]) == 20 and all(
        e.startswith("shifting-") for e in evidence["examples"]
    )
    assert f"population stability index {span['psi']:.2f}" in evidence["explanation"]
    assert "input lengths shifted over the last 4m" in evidence["explanation"]

    # needs_regrade: a decision of its own, audited and announced with the rollback.
    shifted_at = clock(start, 6)
    assert (regrade["action"], regrade["actor"], regrade["stage_after"]) == (
        "needs_regrade",
        "policy",
        "rolled_back",
    )
    assert regrade["evidence"]["rollback"] == rollback["id"]
    assert regrade["evidence"]["shifted_at"] == shifted_at.isoformat()
    assert audit_actions(api, "shifting")[-2:] == ["task.rollback", "task.needs_regrade"]
    assert [e["action"] for e in events(api, "shifting", "decision")] == [
        "promote",
        "rollback",
        "needs_regrade",
    ]
    assert needs_regrade(api, "shifting") is True
    assert promote_decision["action"] == "promote"

    # A one-window burst: an alert, no rollback.
    alerts = api.client.get(
        "/v1/alerts", params={"task": "bursty"}, headers=api.headers("read")
    ).json()["alerts"]
    opened = [a for a in alerts if a["kind"] == "input_shift"]
    assert opened and all(a["value"] >= 0.1 for a in opened), alerts
    assert [d["action"] for d in decisions(api, "bursty")] == ["promote"]

    # Re-armed, the task is not promoted, forced or not, until a grade since the shift.
    rearmed = api.client.post(
        "/v1/tasks/shifting/rearm", json={"reason": "inputs changed"}, headers=api.headers()
    )
    assert rearmed.status_code == 200, rearmed.text
    refused = promote(api, "shifting")
    assert refused.status_code == 409, refused.text
    assert "needs a re-grade" in refused.json()["detail"]["needs_regrade"]
    assert needs_regrade(api, "shifting") is True

    # Traffic since the shift, graded offload: 300 inputs of 900 tokens, 60 repeat pairs.
    for k in range(8, 11):
        post_all(api, results("shifting", start, k, 100, tokens=LONG, repeats=20))
        close(api, start, k)
    again = promote(api, "shifting")
    assert again.status_code == 200, again.text
    assert again.json()["evidence"]["grade"]["tier"] == "offload"
    assert needs_regrade(api, "shifting") is False
    regraded = decisions(api, "shifting")[-2]
    assert (regraded["action"], regraded["actor"]) == ("regraded", "grading")
    graded = regraded["evidence"]["grade"]
    assert graded["tier"] == "offload"
    assert graded["span"]["since"] == shifted_at.isoformat()
    assert graded["span"]["results"] == 300 and graded["span"]["repeat_pairs"] == 60
    assert audit_actions(api, "shifting")[-2:] == ["task.regraded", "task.promote"]
    assert [e["action"] for e in events(api, "shifting", "decision")][-2:] == [
        "regraded",
        "promote",
    ]
    # The new canary is compared with the inputs it was re-graded on.
    assert again.json()["evidence"]["input_baseline"]["counts"] == one_bin(LONG, 300)
    assert stage(api, "shifting") == "canary"


def needs_regrade(api: Api, task: str) -> bool:
    with session_scope(api.engine) as session:
        return bool(session.scalar(select(Task.needs_regrade).where(Task.name == task)))


def test_the_simulators_scenarios_roll_a_canary_back_end_to_end(api: Api) -> None:
    """The simulator's own traffic (`controlplane.sim`, as `scripts/demo --scenario` posts
    it): three shadow windows of each example task's normal traffic, then in canary
    `longer_inputs` (every input 3x, and it stays) rolls ticket_classify back by
    input_shift and marks it for a re-grade, and `costly_edge` (the edge's cost rising past
    the cloud's) rolls invoice_extract back by net_savings."""
    from controlplane.sim.profiles import generate

    labels = {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]}
    shifting = config("ticket_classify", INPUT_SHIFT, comparator=labels)
    costly = config(
        "invoice_extract",
        {**NET_SAVINGS, "span": "3m"},
        comparator={"kind": "json_fields", "fields": {"amount": "number", "currency": "string"}},
        fixed_costs={"routing": 1.0, "gpu": 2.0},
    )
    apply_tasks(api.engine, [shifting, costly], actor="test")
    start = rewind(api, windows=12, tasks=("ticket_classify", "invoice_extract"))
    plan = {"ticket_classify": "longer_inputs", "invoice_extract": "costly_edge"}

    def window(k: int, scenario: str | None) -> None:
        for task, named in plan.items():
            post_all(
                api,
                generate(
                    task,
                    60,
                    seed=k,
                    now=start + timedelta(seconds=k * WINDOW + 30),
                    span_seconds=30,
                    scenario=named if scenario else "none",
                    edge_serves=scenario is not None,
                ),
            )
        close(api, start, k)

    for k in range(3):
        window(k, None)
    for task in plan:
        assert promote(api, task).status_code == 200
        stage_from(api, task, start + timedelta(seconds=3 * WINDOW))
    for k in range(3, 11):
        window(k, "canary")
        if all(stage(api, task) == "rolled_back" for task in plan):
            break
    made = {
        task: [(d["action"], d["evidence"].get("how")) for d in decisions(api, task)]
        for task in plan
    }
    assert made["ticket_classify"][1:] == [("rollback", "input_shift"), ("needs_regrade", None)]
    assert made["invoice_extract"][1:] == [("rollback", "net_savings")]
    assert needs_regrade(api, "ticket_classify") and not needs_regrade(api, "invoice_extract")
