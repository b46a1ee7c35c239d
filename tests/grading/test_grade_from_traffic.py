"""The grade from simulated traffic, end to end: results posted over HTTP (with
`cloud_repeat` on a share of them), windows computed by the scheduler's pass, and the
grade read back from GET /v1/grades — on SQLite and PostgreSQL, with the default grading
settings. Five tasks, each a profile of the issue's list: short, deterministic, cheap and
frequent → offload; the same with a long tail → shadow naming input length; error cost
0.8 → keep_cloud whatever else; a cloud that disagrees with itself on 30% of repeats →
determinism signalled; too little traffic → insufficient.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from controlplane.db import session_scope
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api
from tests.windowdata import post_all

LABELS = ["refund", "exchange", "complaint", "inquiry"]
HOURS = 20
WINDOW = 3600


def config(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": LABELS},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": 60,
        **extra,
    }


def traffic(
    name: str,
    n: int,
    *,
    now: datetime,
    seed: int,
    hours: float = HOURS,
    long_tail: bool = False,
    self_disagree: float = 0.0,
    repeat_share: float = 0.15,
) -> list[dict[str, Any]]:
    """`n` shadow results of `name` over the `hours` before `now`: short inputs (median 120
    tokens), or with a long tail (a fifth of them around 3,000); the cloud asked again on
    `repeat_share` of them, answering differently on `self_disagree` of those."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if long_tail and rng.random() < 0.2:
            tokens = int(rng.lognormvariate(math.log(3000), 0.2))
        else:
            tokens = max(1, int(rng.lognormvariate(math.log(120), 0.3)))
        label = rng.choice(LABELS)
        result: dict[str, Any] = {
            "request_id": f"{name}-{i}",
            "task": name,
            "ts": (now - timedelta(seconds=hours * 3600 * (n - i) / n)).isoformat(),
            "session_id": f"s-{i % 50}",
            "input_tokens": tokens,
            "decision": "edge",
            "served": "cloud",
            "input": {"text": f"{name} ticket {i}"},
            "edge": {"output": label, "latency_ms": 40.0},
            "cloud": {"output": label, "latency_ms": 380.0},
        }
        if rng.random() < repeat_share:
            other = rng.choice([x for x in LABELS if x != label])
            again = other if rng.random() < self_disagree else label
            result["cloud_repeat"] = {"output": again, "latency_ms": 390.0}
        out.append(result)
    return out


def test_grades_from_simulated_traffic(api: Api) -> None:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    profiles = {
        "grade_fit": ({}, {}),
        "grade_tail": ({}, {"long_tail": True}),
        "grade_costly": ({"error_cost": 0.8}, {}),
        "grade_noisy": ({}, {"self_disagree": 0.3}),
        "grade_sparse": ({}, {}),
    }
    with session_scope(api.engine) as session:
        for name, (extra, _) in profiles.items():
            apply_config(session, config(name, **extra), actor="test")
        # The tasks were registered two days ago: their traffic is the current version's.
        session.execute(
            text("UPDATE task_config_versions SET created_at = :t"),
            {"t": now - timedelta(days=2)},
        )
    for seed, (name, (_, shape)) in enumerate(profiles.items()):
        post_all(
            api, traffic(name, 300 if name == "grade_sparse" else 1500, now=now, seed=seed, **shape)
        )
    assert run_pass(api.engine, now + timedelta(seconds=120)).failed == []

    answer = api.client.get("/v1/grades", headers=api.headers("read"))
    assert answer.status_code == 200, answer.text
    grades = {g["task"]: g for g in answer.json()["grades"]}

    fit = grades["grade_fit"]
    assert fit["tier"] == "offload", fit
    assert not any(d["signal"] for d in fit["dimensions"].values()), fit["dimensions"]
    assert fit["span"]["results"] == 1500 and fit["span"]["repeat_pairs"] > 100

    tail = grades["grade_tail"]
    assert tail["tier"] == "shadow", tail
    assert tail["dimensions"]["input_length"]["signal"] is True
    assert tail["reasons"][0].startswith("input length:"), tail["reasons"]

    costly = grades["grade_costly"]
    assert costly["tier"] == "keep_cloud" and costly["score"] is None, costly
    assert costly["dimensions"]["error_cost"]["veto"] is True
    # Whatever else: its traffic is as fit as grade_fit's.
    assert costly["dimensions"]["input_length"]["score"] == 1.0

    noisy = grades["grade_noisy"]
    determinism = noisy["dimensions"]["determinism"]
    assert determinism["signal"] is True, determinism
    assert 0.6 < determinism["value"]["self_agreement"] < 0.8
    assert noisy["tier"] != "offload"
    assert any(r.startswith("determinism:") for r in noisy["reasons"]), noisy["reasons"]

    sparse = grades["grade_sparse"]
    assert sparse["tier"] == "insufficient" and sparse["score"] is None, sparse
    assert any(m.startswith("results: 300 of the 1,000") for m in sparse["missing"]), sparse


def test_a_task_registered_now_grades_the_traffic_of_its_first_window(api: Api) -> None:
    """The span starts at the window the config version was made in, not at the moment:
    a task registered mid-window counts that window's results."""
    now = datetime.now(UTC)
    with session_scope(api.engine) as session:
        apply_config(session, config("grade_young"), actor="test")
    # Results from the start of the current hour's window (or the last 10 seconds, just
    # after the hour) up to the registration: all of them in the window it was made in.
    into = max((now - now.replace(minute=0, second=0, microsecond=0)).total_seconds(), 10)
    post_all(api, traffic("grade_young", 200, now=now, seed=9, hours=(into - 1) / 3600))
    assert run_pass(api.engine, now + timedelta(seconds=1)).failed == []
    answer = api.client.get("/v1/tasks/grade_young/grade", headers=api.headers("read"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["span"]["results"] == 200, answer.json()["span"]


def test_a_rewriting_cloud_shows_its_noisy_check_in_windows_and_grade(api: Api) -> None:
    """text_conservation: a cloud that adds a sentence on a fifth of its repeats. The
    windows count that check per repeat pair (repeat_diffs), and the grade lists it as
    noisy (over grading.noisy_field_rate), with its rate computed here from what was sent."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    name = "grade_rewrite"
    with session_scope(api.engine) as session:
        apply_config(
            session,
            {**config(name), "comparator": {"kind": "text_conservation"}},
            actor="test",
        )
        session.execute(
            text("UPDATE task_config_versions SET created_at = :t"),
            {"t": now - timedelta(days=2)},
        )
    rng = random.Random(5)
    results, pairs, added = [], 0, 0
    for i in range(400):
        reply = f"Dear customer {i}, your parcel left on Monday. It arrives in 3 days."
        result: dict[str, Any] = {
            "request_id": f"{name}-{i}",
            "task": name,
            "ts": (now - timedelta(seconds=HOURS * 3600 * (400 - i) / 400)).isoformat(),
            "input_tokens": 60,
            "decision": "edge",
            "served": "cloud",
            "input": {"text": f"rewrite reply {i}"},
            "edge": {"output": reply, "latency_ms": 40.0},
            "cloud": {"output": reply, "latency_ms": 380.0},
        }
        if i % 2 == 0:
            pairs += 1
            again = reply
            if rng.random() < 0.2:
                added += 1
                again = reply + " Thank you for your patience."
            result["cloud_repeat"] = {"output": again, "latency_ms": 390.0}
        results.append(result)
    post_all(api, results)
    assert run_pass(api.engine, now + timedelta(seconds=120)).failed == []

    windows = api.client.get(
        f"/v1/tasks/{name}/windows",
        params={"since": (now - timedelta(days=1)).isoformat(), "bucket": "all"},
        headers=api.headers("read"),
    ).json()["windows"]
    counted: dict[str, int] = {}
    for w in windows:
        for check, n in (w["repeat_diffs"] or {}).items():
            counted[check] = counted.get(check, 0) + n
    assert sum(w["n_repeat_pairs"] for w in windows) == pairs
    assert counted.get("sentences") == added, counted

    grade = api.client.get(f"/v1/tasks/{name}/grade", headers=api.headers("read")).json()
    noisy = {n["name"]: n for n in grade["noisy"]}
    assert noisy["sentences"]["count"] == added and noisy["sentences"]["pairs"] == pairs
    assert math.isclose(noisy["sentences"]["rate"], added / pairs, rel_tol=1e-3)
