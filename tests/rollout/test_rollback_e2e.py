"""End to end on PostgreSQL: generated results → windows → verdicts → one rollback, with evidence."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.grading_support import give_offload_grade
from tests.windowdata import post_all

pytestmark = pytest.mark.integration
WINDOW, LATENESS = 60, 30
HIGH = 150  # results per bucket and window at high traffic
BUCKET_TOKENS = {"0-127": 60, "128-511": 300, "512-2047": 1000, "2048+": 3000}


def config(name: str, **overrides: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "rollback": {
            "min_samples": 50,
            "rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"}],
        },
        "promotion": {"canary_steps": [50]},
        **overrides,
    }


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    for api in make_api(pg_url):
        with session_scope(api.engine) as session:
            for name in ("canary_task", "noisy_task", "quiet_task"):
                apply_config(session, config(name), actor="test")
            apply_config(session, config("risky_task", error_cost=0.8), actor="test")
        yield api


def promote(api: Api, task: str, force: bool = True) -> Any:
    return api.client.post(
        f"/v1/tasks/{task}/promote",
        json={"reason": "test canary", "force": force},
        headers=api.headers(),
    )


def window_results(
    task: str, start: datetime, k: int, bad: dict[str, float], per_bucket: int = 60
) -> list[dict[str, Any]]:
    out = []
    for bucket, tokens in BUCKET_TOKENS.items():
        conflicts = round(per_bucket * bad.get(bucket, 0.02))
        for i in range(per_bucket):
            out.append(
                make_result(
                    request_id=f"{task}-{k}-{bucket}-{i}",
                    task=task,
                    ts=(start + timedelta(seconds=k * WINDOW + i * 30 / per_bucket)).isoformat(),
                    input_tokens=tokens,
                    edge={"output": "exchange" if i < conflicts else "refund", "model": "small@3"},
                )
            )
    return out


def rewind(api: Api, windows: int = 8, tasks: tuple[str, ...] | None = None) -> datetime:
    """The start of a window `windows` windows ago, with the creation and stage change of
    `tasks` (every task when None) moved an hour before it: results may lie at most 5
    minutes ahead of the clock, so the test's windows lie in the past and its passes run at
    past clocks. A task left out keeps its creation time, later than every clock a pass
    runs at here, so no pass computes its empty windows."""
    from sqlalchemy import update

    from controlplane.models import Task

    now = datetime.now(UTC)
    start = now - timedelta(seconds=now.timestamp() % WINDOW) - timedelta(seconds=windows * WINDOW)
    moved = update(Task) if tasks is None else update(Task).where(Task.name.in_(tasks))
    with session_scope(api.engine) as session:
        earlier = start - timedelta(hours=1)
        session.execute(moved.values(created_at=earlier, stage_changed_at=earlier))
    return start


def close(api: Api, start: datetime, k: int) -> Any:
    return run_pass(api.engine, start + timedelta(seconds=(k + 1) * WINDOW + LATENESS))


def name_detector(api: Api, detector: str, tasks: tuple[str, ...]) -> None:
    """Apply each task's config again, naming `detector` for the whole policy."""
    with session_scope(api.engine) as session:
        for name in tasks:
            named = config(name)
            named["rollback"] = {**named["rollback"], "detector": detector}
            apply_config(session, named, actor="test")


@pytest.mark.parametrize("detector", [None, "consecutive"])
def test_only_the_long_bucket_degrades_and_the_canary_rolls_back_after_exactly_three_windows(
    api: Api, detector: str | None
) -> None:
    """At high traffic (150 results per bucket and window, three times `min_samples`; one
    such window alone would reach h under a plain CUSUM): the default `capped_cusum` and a
    named `consecutive` both roll back at the 3rd breaching window; neither touches the task
    whose every bucket had one bad window (a spike)."""
    if detector is not None:
        name_detector(api, detector, ("canary_task", "noisy_task", "quiet_task"))
    for task in ("canary_task", "noisy_task", "quiet_task"):
        assert promote(api, task).status_code == 200
    start = rewind(api, tasks=("canary_task", "noisy_task", "quiet_task"))
    flags_before = api.client.get("/v1/flags/canary_task", headers=api.headers("flags:read")).json()
    assert (flags_before["stage"], flags_before["edge_percent"]) == ("canary", 50)

    decisions = []
    for k in range(6):
        post_all(api, window_results("canary_task", start, k, {"2048+": 0.4}, HIGH))
        # One bad window in every bucket, then healthy ones.
        post_all(
            api,
            window_results(
                "noisy_task", start, k, {b: 0.5 for b in BUCKET_TOKENS} if k == 0 else {}, HIGH
            ),
        )
        # Low traffic, healthy but close to the threshold: 11 of 12 agree (0.917 >= 0.9).
        post_all(
            api,
            window_results(
                "quiet_task", start, k, {b: 1 / 12 for b in BUCKET_TOKENS}, per_bucket=12
            ),
        )
        report = close(api, start, k)
        decisions += report.decisions
        stage = api.client.get("/v1/tasks/canary_task", headers=api.headers("read")).json()["stage"]
        assert stage == ("canary" if k < 2 else "rolled_back"), k

    assert [d["task"] for d in decisions] == ["canary_task"]
    decision = decisions[0]
    assert decision["action"] == "rollback" and decision["actor"] == "policy"
    assert decision["bucket"] == "2048+" and decision["rule"] == "agreement >= 0.9 per bucket"
    evidence = decision["evidence"]
    if detector == "consecutive":
        windows = evidence["windows"]
        assert [(w["num"], w["den"], w["verdict"]) for w in windows] == [(90, 150, "breach")] * 3
        assert all(w["bound"] < 0.9 and w["estimate"] == 0.6 for w in windows)
        assert "in 3 consecutive windows (last: 90/150 = 60.0%" in decision["reason"]
    else:
        # Each window: 90 x ln(0.85/0.9) + 60 x ln(0.15/0.1) = 19.184, counted as 2.
        assert (evidence["detector"], evidence["h"], evidence["cap"]) == ("capped_cusum", 5, 2)
        steps = evidence["steps"]
        assert [(s["num"], s["den"], s["counted"], s["sum"]) for s in steps] == [
            (90, 150, 2, 2),
            (90, 150, 2, 4),
            (90, 150, 2, 6),
        ]
        assert all(s["contribution"] == pytest.approx(19.1836, abs=1e-3) for s in steps)
        assert [s["window_start"] for s in steps] == [
            (start + timedelta(seconds=k * WINDOW)).isoformat() for k in range(3)
        ]
        assert decision["reason"] == (
            "canary_task rolled back: agreement on inputs of 2048+ tokens: evidence 6.0 ≥ 5 "
            "over 3 windows (each window counts at most 2): 60%, 60%, 60% vs 0.90."
        )
    assert decision["evidence"]["models"] == ["small@3"]
    examples = decision["evidence"]["examples"]
    assert 0 < len(examples) <= 20 and all("-2048+-" in e for e in examples)
    assert decision["flag_version_after"] == decision["flag_version_before"] + 1

    flag = api.client.get("/v1/flags/canary_task", headers=api.headers("flags:read")).json()
    assert (flag["stage"], flag["edge_percent"]) == ("rolled_back", 0)
    for task in ("noisy_task", "quiet_task"):
        assert (
            api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"]
            == "canary"
        )

    # Evaluating again, and later, makes no second decision.
    close(api, start, 6)
    close(api, start, 6)
    listed = api.client.get(
        "/v1/decisions", params={"task": "canary_task"}, headers=api.headers("read")
    ).json()
    assert [d["action"] for d in listed["decisions"]] == ["rollback", "promote"]

    # Only a person re-arms; the model stays blocked until a person lifts it.
    assert promote(api, "canary_task").status_code == 409
    assert (
        api.client.post(
            "/v1/tasks/canary_task/rearm", json={"reason": "fixed"}, headers=api.headers()
        ).status_code
        == 200
    )
    # Unblocking needs a passing run on the regression eval set; forcing it is audited.
    refused = api.client.post(
        "/v1/tasks/canary_task/unblock",
        json={"model": "small@3", "reason": "retrained"},
        headers=api.headers(),
    )
    assert refused.status_code == 409 and "regression" in refused.json()["detail"]
    lifted = api.client.post(
        "/v1/tasks/canary_task/unblock",
        json={"model": "small@3", "reason": "retrained", "force": True},
        headers=api.headers(),
    )
    assert lifted.status_code == 200 and lifted.json()["blocked"] == []


def test_a_forced_promote_is_audited_and_the_veto_cannot_be_forced(api: Api) -> None:
    blocked = promote(api, "canary_task", force=False)
    assert blocked.status_code == 409 and blocked.json()["detail"]["gate"]["passed"] is False
    forced = promote(api, "canary_task", force=True)
    assert forced.status_code == 200 and forced.json()["evidence"]["forced"] is True
    audit = api.client.get(
        "/v1/audit", params={"task": "canary_task"}, headers=api.headers()
    ).json()["entries"]
    promoted = [e for e in audit if e["action"] == "task.promote"]
    assert (
        promoted
        and promoted[0]["details"]["forced"] is True
        and promoted[0]["actor"] == "admin-key"
    )

    vetoed = promote(api, "risky_task", force=True)
    assert vetoed.status_code == 409 and "error-cost veto" in vetoed.json()["detail"]["veto"]
    assert (
        api.client.get("/v1/tasks/risky_task", headers=api.headers("read")).json()["stage"]
        == "shadow"
    )


def test_kill_and_lift_bump_every_flag_and_keep_stages(api: Api) -> None:
    promote(api, "canary_task")
    before = api.client.get("/v1/flags", headers=api.headers("flags:read")).json()
    assert (
        api.client.post(
            "/v1/kill", json={"reason": "incident 42"}, headers=api.headers()
        ).status_code
        == 200
    )
    killed = api.client.get("/v1/flags", headers=api.headers("flags:read")).json()
    assert killed["revision"] > before["revision"]
    for name, flag in killed["flags"].items():
        assert flag["killed"] is True and flag["edge_percent"] == 0 and flag["shadow_rate"] == 0
        assert flag["version"] == before["flags"][name]["version"] + 1
    assert killed["flags"]["canary_task"]["stage"] == "canary"
    assert (
        api.client.post("/v1/kill", json={"reason": "again"}, headers=api.headers()).status_code
        == 409
    )
    assert (
        api.client.post("/v1/kill/lift", json={"reason": "over"}, headers=api.headers()).status_code
        == 200
    )
    lifted = api.client.get("/v1/flags/canary_task", headers=api.headers("flags:read")).json()
    assert (lifted["killed"], lifted["edge_percent"]) == (False, 50)
    actions = [
        d["action"]
        for d in api.client.get("/v1/decisions", headers=api.headers("read")).json()["decisions"]
    ]
    assert actions[:2] == ["lift", "kill"]


def test_auto_promote_moves_on_when_the_gate_passes_unless_the_model_is_blocked(api: Api) -> None:
    gentle = {
        "min_windows": 2,
        "min_samples_per_bucket": 50,
        "agreement_lower_bound": 0.8,
        "auto_promote": True,
    }
    for name in ("eager_task", "blocked_task"):
        created = api.client.post(
            "/v1/tasks",
            json=config(name, promotion={**gentle, "canary_steps": [50]}),
            headers=api.headers(),
        )
        assert created.status_code == 201
    from controlplane.models import Task
    from controlplane.rollout.repository import block

    with session_scope(api.engine) as session:
        task = session.query(Task).filter(Task.name == "blocked_task").one()
        block(session, task, "small@3", None)
    # Both grade `offload` (leaving shadow needs it): only the block tells them apart.
    for name in ("eager_task", "blocked_task"):
        give_offload_grade(api.url, name)
    start = rewind(api, tasks=("eager_task", "blocked_task"))
    promoted = []
    for k in range(3):
        for name in ("eager_task", "blocked_task"):
            post_all(api, window_results(name, start, k, {}))
        promoted += [d for d in close(api, start, k).decisions if d["action"] == "promote"]
    assert [(d["task"], d["actor"], d["stage_after"]) for d in promoted] == [
        ("eager_task", "policy", "canary")
    ]
    assert promoted[0]["reason"] == "promoted to canary at 50%: gate passed"
    gate = api.client.get("/v1/tasks/blocked_task/gate", headers=api.headers("read")).json()
    assert gate["passed"] is True and gate["buckets"]["2048+"]["verdict"] == "pass"
    assert (
        api.client.get("/v1/tasks/blocked_task", headers=api.headers("read")).json()["stage"]
        == "shadow"
    )


def test_an_evaluation_reads_only_the_most_recent_windows(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlplane.catalog.schemas import parse_config
    from controlplane.models import Task
    from controlplane.rollout import repository

    start = rewind(api, tasks=("quiet_task",))
    for k in range(4):
        post_all(api, window_results("quiet_task", start, k, {}, per_bucket=3))
    close(api, start, 3)
    monkeypatch.setattr(repository, "evaluation_windows", lambda config: 2)
    with session_scope(api.engine) as session:
        task = session.query(Task).filter(Task.name == "quiet_task").one()
        windows = repository.stage_windows(session, task, parse_config(config("quiet_task")))
    first = int(start.timestamp()) // WINDOW
    assert [number for number, _ in windows] == [first + 2, first + 3]
    assert all(rows["all"]["n_results"] == 12 for _, rows in windows)


def test_leaving_shadow_keeps_the_shadow_windows_input_lengths_as_the_baseline(api: Api) -> None:
    """Forced past its grade (none yet), a task leaving shadow is compared from then on with
    the input lengths of the shadow windows it was promoted from: kept on the task and in
    the promotion's evidence, bin by bin as the windows counted them."""
    from controlplane.metrics import lengths
    from controlplane.models import Decision, Task

    start = rewind(api, tasks=("noisy_task",))
    for k in range(3):
        post_all(api, window_results("noisy_task", start, k, {}, per_bucket=10))
        close(api, start, k)
    with session_scope(api.engine) as session:
        assert session.query(Task).filter(Task.name == "noisy_task").one().input_baseline is None
    assert promote(api, "noisy_task").status_code == 200
    with session_scope(api.engine) as session:
        task = session.query(Task).filter(Task.name == "noisy_task").one()
        promoted = session.query(Decision).filter(Decision.task_id == task.id).one()
        kept, said = task.input_baseline, promoted.evidence["input_baseline"]
    expected = lengths.histogram([t for t in BUCKET_TOKENS.values() for _ in range(30)])
    assert kept is not None and kept["counts"] == expected and kept["n"] == 120
    assert kept["source"] == "the shadow windows it was promoted from"
    assert said == kept and task.stage == "canary"


def single_bucket(
    task: str, start: datetime, k: int, agree: int, n: int, tokens: int = 60
) -> list[dict[str, Any]]:
    """`n` results of one bucket in window `k`, the first `agree` of them agreeing."""
    return [
        make_result(
            request_id=f"{task}-{k}-{i}",
            task=task,
            ts=(start + timedelta(seconds=k * WINDOW + i * 0.5)).isoformat(),
            input_tokens=tokens,
            edge={"output": "refund" if i < agree else "exchange", "model": "small@3"},
        )
        for i in range(n)
    ]


def stage(api: Api, task: str) -> str:
    return api.client.get(f"/v1/tasks/{task}", headers=api.headers("read")).json()["stage"]


def test_a_sparse_canary_whose_agreement_drops_to_70_percent_is_rolled_back_within_8_windows(
    api: Api,
) -> None:
    """30 results per window, agreement drawn at 0.97 and then at 0.70 (seeded), under the
    default policy (min_samples 200): the default detector rolls the canary back within 8
    windows of the drop, and not before it."""
    import random

    rng = random.Random(20261201)
    sparse = config("sparse_task")
    sparse["rollback"] = {"rules": sparse["rollback"]["rules"]}
    with session_scope(api.engine) as session:
        apply_config(session, sparse, actor="test")
    assert promote(api, "sparse_task").status_code == 200
    start = rewind(api, windows=16, tasks=("sparse_task",))
    healthy, bad = 4, 8
    fired_at = None
    for k in range(healthy + bad):
        p = 0.97 if k < healthy else 0.70
        agree = sum(rng.random() < p for _ in range(30))
        post_all(api, single_bucket("sparse_task", start, k, agree, 30))
        decisions = [d for d in close(api, start, k).decisions if d["task"] == "sparse_task"]
        if decisions:
            assert [d["action"] for d in decisions] == ["rollback"]
            fired_at = k
            break
        assert stage(api, "sparse_task") == "canary", k
    assert fired_at is not None and healthy <= fired_at < healthy + bad, fired_at
    assert stage(api, "sparse_task") == "rolled_back"
    evidence = decisions[0]["evidence"]
    assert evidence["detector"] == "capped_cusum" and evidence["steps"][-1]["sum"] >= 5
    assert all(s["den"] == 30 for s in evidence["steps"])


def test_the_evidence_restarts_at_a_stage_change(api: Api) -> None:
    """Two bad windows in canary build 4 of the 5 needed; a promotion to full starts the
    sum again, so the next bad window does not fire: three in the new stage do."""
    from sqlalchemy import update

    from controlplane.models import Task

    assert promote(api, "canary_task").status_code == 200
    start = rewind(api, tasks=("canary_task",))
    for k in range(2):
        post_all(api, single_bucket("canary_task", start, k, 36, 60, tokens=3000))
        assert not close(api, start, k).decisions
    assert promote(api, "canary_task").status_code == 200
    with session_scope(api.engine) as session:
        session.execute(
            update(Task)
            .where(Task.name == "canary_task")
            .values(stage_changed_at=start + timedelta(seconds=2 * WINDOW))
        )
    assert stage(api, "canary_task") == "full"
    for k in range(2, 5):
        post_all(api, single_bucket("canary_task", start, k, 36, 60, tokens=3000))
        decisions = close(api, start, k).decisions
        assert bool(decisions) == (k == 4), k
    assert stage(api, "canary_task") == "rolled_back"
    steps = decisions[0]["evidence"]["steps"]
    assert [s["window_start"] for s in steps] == [
        (start + timedelta(seconds=k * WINDOW)).isoformat() for k in (2, 3, 4)
    ]
