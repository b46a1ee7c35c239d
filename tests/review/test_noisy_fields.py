"""A review item whose differences all lie on fields (checks) the task's reference changes
between two runs on the same input carries a note saying so; any other difference, or no
measured noise, gives none; the note stays blind.

End to end on a real database: results with `cloud_repeat` posted over HTTP, a pass
computing and closing their window (its per-field repeat differences) and sampling the
review queue, the items claimed blind. What is noisy, and which items should carry a note,
is computed here from the posted JSON, independently of the code under test."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from controlplane.catalog import service as catalog
from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.models import Task, TaskConfigVersion
from controlplane.review import actions
from controlplane.review.schemas import NextOut
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import make_api
from tests.review.queuedata import T0
from tests.review.test_blind import FORBIDDEN
from tests.windowdata import post_all

WINDOW, LATENESS = 300, 60
N = 100
RATE = 0.05  # grading.noisy_field_rate
CLOSED = T0 + timedelta(seconds=WINDOW + LATENESS + 1)
PAGE = "app_pages/review.py"
EDGE_MODEL, CLOUD_MODEL = "petite-q4@2", "grand-70b@5"

JSON_SPEC: dict[str, Any] = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "note": "string"},
    "required": ["amount", "currency"],
}
TEXT_SPEC: dict[str, Any] = {"kind": "text_conservation", "length_ratio": [0.7, 1.4]}


def _config(task: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "task": task,
        "comparator": spec,
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "keep_agreeing_rate": 1.0,
        "review": {"quota_per_window": 1000},
        "grading": {"noisy_field_rate": RATE},
    }


def _invoice(i: int) -> tuple[Any, Any, Any]:
    """(edge, cloud, cloud_repeat) outputs of result i: the reference rewords its note on
    every fifth repeat (20%: noisy) and changes the currency on two of the hundred (2%: not
    noisy); the edge differs on the note alone, on note and amount, or on the amount."""
    cloud: dict[str, Any] = {
        "amount": 100 + i,
        "currency": "EUR",
        "note": "Payment due within 30 days.",
    }
    repeat = dict(cloud)
    if i % 5 == 0:
        repeat["note"] = "Please pay within 30 days."
    if i % 50 == 1:
        repeat["currency"] = "USD"
    edge = dict(cloud)
    if i % 4 in (1, 2):
        edge["note"] = "Due in 30 days."
    if i % 4 in (2, 3):
        edge["amount"] = cloud["amount"] * 10
    return edge, cloud, repeat


def _reply(i: int) -> tuple[Any, Any, Any]:
    """The same for a rewrite: the reference adds a courtesy sentence on every fifth repeat
    (sentences noisy); the edge adds one, changes the number, or both."""
    cloud = f"Your refund of {100 + i} dollars was sent today. We will write when it arrives."
    repeat = cloud + " Thank you." if i % 5 == 0 else cloud
    edge = cloud
    if i % 4 in (2, 3):
        edge = edge.replace(str(100 + i), str(200 + i))
    if i % 4 in (1, 3):
        edge += " Thanks a lot."
    return edge, cloud, repeat


Make = Callable[[int], tuple[Any, Any, Any]]
TASKS: dict[str, tuple[dict[str, Any], Make]] = {
    "noisy_invoice": (JSON_SPEC, _invoice),
    "noisy_reply": (TEXT_SPEC, _reply),
}


def _register(
    engine: Any, config: dict[str, Any], made: datetime = T0 - timedelta(hours=1)
) -> None:
    """Apply the config, made (as the results' fixed clocks have it) an hour before T0: a
    grade reads only the windows since its task's current config version was made."""
    with session_scope(engine) as session:
        apply_config(session, config, actor="test")
        session.execute(
            update(TaskConfigVersion)
            .where(TaskConfigVersion.task_id == Task.id, Task.name == config["task"])
            .values(created_at=made)
        )


def _results(task: str, start: datetime = T0) -> list[dict[str, Any]]:
    _, make = TASKS[task]
    out = []
    for i in range(N):
        edge, cloud, repeat = make(i)
        out.append(
            {
                "request_id": f"{task}-{i}",
                "task": task,
                "ts": (start + timedelta(seconds=i)).isoformat(),
                "session_id": f"s-{i}",
                "input_tokens": 300,
                "decision": "edge",
                "served": "cloud",
                "input": {"text": f"{task} input {i}"},
                "edge": {"output": edge, "confidence": 0.9, "model": EDGE_MODEL},
                "cloud": {"output": cloud, "model": CLOUD_MODEL},
                "cloud_repeat": {"output": repeat, "model": CLOUD_MODEL},
            }
        )
    return out


def _names(diff: Any) -> set[str]:
    return set(diff.get("fields") or diff.get("failed") or ()) if diff else set()


def _noisy(task: str, results: list[dict[str, Any]]) -> dict[str, float]:
    """Per field or check, the share of repeat pairs differing on it, over the noisy rate."""
    spec, _ = TASKS[task]
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(_names(compare(spec, r["cloud_repeat"]["output"], r["cloud"]["output"]).diff))
    return {name: n / len(results) for name, n in counts.items() if n / len(results) > RATE}


def _claim_all(engine: Any, task: str, now: Any) -> list[dict[str, Any]]:
    seen = []
    while (item := actions.claim(engine, task, "ann", now, lease_seconds=600.0)) is not None:
        seen.append(item)
        verdict = "unclear" if item["kind"] == "pair" else "correct"
        actions.label(engine, item["id"], "ann", verdict=verdict, now=now)
    return seen


def _clean(view: dict[str, Any]) -> list[str]:
    low = json.dumps(view, ensure_ascii=False).lower()
    return [w for w in (*FORBIDDEN, EDGE_MODEL, CLOUD_MODEL) if w.lower() in low]


def test_items_differing_only_on_noisy_fields_carry_a_blind_note(db_url: str) -> None:
    for api in make_api(db_url, rate_review_per_second=1e6, rate_review_burst=10**6):
        for task, (spec, _) in TASKS.items():
            _register(api.engine, _config(task, spec))
        sent = {task: _results(task) for task in TASKS}
        for results in sent.values():
            post_all(api, results)
        report = run_pass(api.engine, CLOSED)
        assert report.failed == []
        for task, results in sent.items():
            spec, _ = TASKS[task]
            noisy = _noisy(task, results)
            assert set(noisy) == {"note" if task == "noisy_invoice" else "sentences"}
            by_input = {r["input"]["text"]: r for r in results}
            items = _claim_all(api.engine, task, CLOSED + timedelta(minutes=1))
            pairs = [v for v in items if v["kind"] == "pair" and v["diff"]]
            assert len(pairs) >= N // 2, len(pairs)
            noted = 0
            for view in items:
                NextOut.model_validate({"item": view})  # the API's answer carries it
                assert _clean(view) == [], view
                r = by_input[view["input"]["text"]]
                names = _names(compare(spec, r["edge"]["output"], r["cloud"]["output"]).diff)
                if view["kind"] == "pair" and names and names <= set(noisy):
                    (name,) = names
                    assert view["note"] == (
                        f"These answers differ only on {name}, which varies between two runs "
                        f"of the same model on the same input in {noisy[name]:.0%} of repeats."
                    )
                    noted += 1
                else:
                    assert view["note"] is None, (names, view)
            # Each kind of item came: noise only, noise and a real difference, real only.
            kinds = Counter(
                frozenset(
                    _names(
                        compare(
                            spec,
                            by_input[v["input"]["text"]]["edge"]["output"],
                            by_input[v["input"]["text"]]["cloud"]["output"],
                        ).diff
                    )
                )
                for v in pairs
            )
            assert (
                len(kinds) == 3 and noted == sum(n for k, n in kinds.items() if k <= set(noisy)) > 0
            ), kinds


def _noise_only(view: dict[str, Any], by_input: dict[str, Any]) -> bool:
    r = by_input[view["input"]["text"]]
    names = _names(compare(JSON_SPEC, r["edge"]["output"], r["cloud"]["output"]).diff)
    return view["kind"] == "pair" and names == {"note"}


@pytest.mark.parametrize("change", ["span_passed", "new_config_version"])
def test_no_note_once_the_noise_is_outside_the_grading_span(
    db_url: str, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items of the same traffic claimed after the windows fell out of the task's grading
    span (7 days by default), or after a new config version: the noise no longer counts."""
    for api in make_api(db_url, rate_review_per_second=1e6, rate_review_burst=10**6):
        _register(api.engine, _config("noisy_invoice", JSON_SPEC))
        results = _results("noisy_invoice")
        by_input = {r["input"]["text"]: r for r in results}
        post_all(api, results)
        assert run_pass(api.engine, CLOSED).failed == []
        now = CLOSED + timedelta(minutes=1)
        # First, while the noise counts: claimed until a noise-only item shows its note.
        while True:
            item = actions.claim(api.engine, "noisy_invoice", "ann", now, lease_seconds=600.0)
            assert item is not None, "no noise-only item came with its note"
            actions.label(api.engine, item["id"], "ann", verdict="unclear", now=now)
            if _noise_only(item, by_input):
                assert item["note"] is not None and "differ only on note" in item["note"]
                break
        if change == "span_passed":
            now += timedelta(days=8)
        else:
            _register(
                api.engine, {**_config("noisy_invoice", JSON_SPEC), "keep_agreeing_rate": 0.5}
            )
            # A process that has not read the task since: this one re-reads which version is
            # current only after a second.
            monkeypatch.setattr(catalog, "_runtimes", {})
        rest = _claim_all(api.engine, "noisy_invoice", now)
        assert sum(_noise_only(v, by_input) for v in rest) > 0
        assert all(v["note"] is None for v in rest)


def test_the_review_page_shows_the_note(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard's review page, claiming at the wall clock: traffic of the last minutes,
    every edge answer differing from the reference only on its note."""
    from tests.dashboard.conftest import Seeded, open_page, page_text, shown

    now = datetime.now(UTC)
    for api in make_api(sqlite_url):
        _register(api.engine, _config("noisy_invoice", JSON_SPEC), made=now - timedelta(hours=1))
        results = _results("noisy_invoice", start=now - timedelta(minutes=10))
        for r in results:
            r["edge"]["output"] = {**r["cloud"]["output"], "note": "Due in 30 days."}
        post_all(api, results)
        assert run_pass(api.engine, now + timedelta(seconds=2 * WINDOW + LATENESS)).failed == []
        monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", sqlite_url)
        at = open_page(Seeded(sqlite_url, {"review": api.keys["review"]}), "review", PAGE)
        assert not at.exception, at.exception
        notes = [shown(str(e.value)) for e in at.info]
        assert notes == [
            "These answers differ only on note, which varies between two runs of the same "
            "model on the same input in 20% of repeats."
        ], page_text(at)
