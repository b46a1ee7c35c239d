"""The adversary (issue 26, "Blind everywhere"): given everything a `review` key reads of
about 1,000 simulated items — the items the review queue hands out, and the blind export of
the eval sets their labels became — a simple classifier (logistic regression on length,
case, whitespace, punctuation and position features) guesses which answer is the edge's no
better than 55% of the time on held-out items. The same classifier on the answers as the
two models sent them does beat 55%: the test can fail.

The traffic is the simulator's (controlplane.sim.profiles.generate, the three example
tasks), ingested through the API, sampled by the real sampler, claimed and labelled through
the review endpoints with a review key, backfilled and read back blind. Every result's
payload is kept and the quota is above the traffic, so every result is sampled: the
agreeing pairs are where a model's formatting showed (" Refund " beside "refund"), the
conflicts and the rewrites where its wording would."""

from __future__ import annotations

import json
import random
import shutil
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.evalsets import items as evalitems
from controlplane.models import ReviewItem
from controlplane.review import sampler
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from controlplane.sim import profiles
from tests.conftest import Api, make_api
from tests.review.blind_leaks import BLIND_KEYS
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
WINDOW, LATENESS = 60, 30
# Results per task: about 1,000 review items in all.
PER_TASK = 340
# The three example tasks, every result's payload kept so that any may be sampled; the
# reply rewriter's text masked, so placeholders are renumbered in the view and the export.
TASKS: dict[str, dict[str, Any]] = {
    "ticket_classify": {"kind": "label", "labels": profiles.LABELS},
    "invoice_extract": {
        "kind": "json_fields",
        "fields": {
            "amount": "number",
            "currency": "string",
            "invoice_id": "string",
            "note": "string",
        },
        "required": ["amount", "currency"],
    },
    "reply_rewrite": {"kind": "text_conservation", "length_ratio": [0.7, 1.4]},
}
POLICY = {"ticket_classify": "full", "invoice_extract": "full", "reply_rewrite": "redacted"}
CHANCE_CEILING = 0.55
HIDDEN_ORDER_SEED = 0


@dataclass(frozen=True)
class Seen:
    """One pair as a review key read it, and what only the server knows of it."""

    id: int
    task: str
    position: int  # the order the queue handed it out in
    a: Any
    b: Any
    a_is_edge: bool
    raw_a: Any  # the same answers as the models sent them
    raw_b: Any
    eval_id: str  # the id of the eval item its input becomes


@dataclass(frozen=True)
class Read:
    """Everything the review key read: the pairs the queue handed out, and the blind
    export's lines of every layer (by eval item id)."""

    pairs: list[Seen]
    exported: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Read]:
    """One app on SQLite: the simulated traffic of one window per task, every sampled item
    claimed and labelled with a review key; the pairs as the key read them."""
    path = tmp_path_factory.mktemp("adversary") / "shadowplane.db"
    shutil.copy(sqlite_template, path)
    for api in make_api(f"sqlite:///{path}", rate_review_per_second=1e6, rate_review_burst=10**6):
        with session_scope(api.engine) as session:
            for task, comparator in TASKS.items():
                apply_config(
                    session,
                    {
                        "task": task,
                        "comparator": comparator,
                        "window_seconds": WINDOW,
                        "allowed_lateness_seconds": LATENESS,
                        "payload_policy": POLICY[task],
                        "keep_agreeing_rate": 1.0,
                        "review": {"quota_per_window": 2 * PER_TASK},
                    },
                    actor="test",
                )
        for k, task in enumerate(TASKS):
            post_all(
                api,
                profiles.generate(
                    task, PER_TASK, seed=k, now=T0 + timedelta(seconds=55), span_seconds=50
                ),
            )
        # The hidden order is the sampler's coin, drawn here from a seeded generator: the
        # figure is then the same on every run. Drawn from `secrets` as in service, the
        # held-out accuracy of the same data varies by about 0.017 from draw to draw
        # around 0.517 (the simulator's two sides word their rewrites a little
        # differently, which no shown form may hide), so about one run in 40 would cross
        # 0.55 by chance alone.
        with pytest.MonkeyPatch.context() as patch:
            coin = random.Random(HIDDEN_ORDER_SEED)
            patch.setattr(sampler, "secrets", SimpleNamespace(randbits=coin.getrandbits))
            report = run_pass(api.engine, T0 + timedelta(seconds=WINDOW + LATENESS + 1))
        assert report.failed == []
        pairs = review_all(api)
        yield Read(pairs, exported(api))


def exported(api: Api) -> dict[str, dict[str, Any]]:
    """Backfill what the review key labelled, and read every layer back with the same key
    (the blind NDJSON export): lines by eval item id."""
    headers = api.headers("review")
    assert api.client.post("/v1/evalsets/backfill", headers=headers).status_code == 200
    lines: dict[str, dict[str, Any]] = {}
    for row in api.client.get("/v1/evalsets", headers=headers).json()["sets"]:
        answer = api.client.get(
            f"/v1/evalsets/{row['task']}/{row['layer']}",
            headers={**headers, "Accept": "application/x-ndjson"},
        )
        assert answer.status_code == 200, answer.text
        lines.update((x["id"], x) for x in map(json.loads, answer.text.splitlines()))
    return lines


def review_all(api: Api) -> list[Seen]:
    """Claim every item with a review key and label it as a reviewer could (both right when
    the two answers read the same, else A or B by the item's id, which says nothing of the
    sides); the pairs as shown."""
    headers = api.headers("review")
    shown: list[dict[str, Any]] = []
    while (answer := api.client.get("/v1/review/next", headers=headers)).status_code == 200:
        item = answer.json()["item"]
        shown.append(item)
        if item["kind"] == "single":
            verdict = "correct"
        elif item["a"] == item["b"]:
            verdict = "both_correct"
        else:
            verdict = ("a_correct", "b_correct")[item["id"] % 2]
        done = api.client.post(
            f"/v1/review/{item['id']}/label", json={"verdict": verdict}, headers=headers
        )
        if done.status_code != 200:
            skip = api.client.post(
                f"/v1/review/{item['id']}/release", json={"skip": True}, headers=headers
            )
            assert skip.status_code == 200, skip.text
    assert answer.status_code == 204, answer.text
    with session_scope(api.engine) as session:
        stored = {i.id: i for i in session.scalars(select(ReviewItem))}
        assert set(stored) == {x["id"] for x in shown}
        seen = []
        for position, x in enumerate(shown):
            item = stored[x["id"]]
            if item.kind != "pair":
                continue
            sides = (item.edge_output, item.cloud_output)
            raw_a, raw_b = sides if item.a_is_edge else sides[::-1]
            eval_id = evalitems.item_id(x["task"], item.input)
            seen.append(
                Seen(
                    x["id"],
                    x["task"],
                    position,
                    x["a"],
                    x["b"],
                    item.a_is_edge,
                    raw_a,
                    raw_b,
                    eval_id,
                )
            )
    return seen


# --- the classifier ------------------------------------------------------------------------


def text(value: Any) -> str:
    """An answer as a person reads it: text as it is, anything else as its JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def first(s: str, kind: Callable[[str], bool]) -> float:
    """Where the first character of a kind stands in the text (0 to 1; 1 when none does)."""
    return next((i / len(s) for i, c in enumerate(s) if kind(c)), 1.0)


def punctuation(c: str) -> bool:
    return unicodedata.category(c).startswith("P")


def traits(value: Any) -> list[float]:
    """Length, case, whitespace, punctuation of one answer, and where each first shows
    (a JSON object's key order moves its first digit, say)."""
    s = text(value)
    n = max(len(s), 1)
    upper = sum(c.isupper() for c in s)
    space = sum(c.isspace() for c in s)
    punct = sum(punctuation(c) for c in s)
    return [
        first(s, str.isdigit),
        first(s, str.isupper),
        first(s, str.isspace),
        first(s, punctuation),
        np.log1p(len(s)),
        upper,
        upper / n,
        float(s[:1].isupper()),
        space,
        space / n,
        float(s != s.strip()),
        float("  " in s or "\n" in s),
        punct,
        punct / n,
        float(s.rstrip()[-1:] in ".!?。！？"),
        sum(c.isdigit() for c in s),
    ]


def features(pairs: Sequence[tuple[str, Any, Any, int, int]]) -> np.ndarray:
    """One row per (task, A, B, position, id): A's traits less B's (a trait that marks the
    edge's answer marks A or B alike), the position in the queue and the id's parity, with
    an intercept (A is the edge's more often than not) — each per task."""
    tasks = list(TASKS)
    n = len(pairs)
    rows = []
    for task, a, b, position, item_id in pairs:
        own = [1.0, *np.subtract(traits(a), traits(b)), position / n, float(item_id % 2)]
        row = np.zeros(len(own) * len(tasks))
        k = tasks.index(task)
        row[k * len(own) : (k + 1) * len(own)] = own
        rows.append(row)
    return np.array(rows)


def fit(x: np.ndarray, y: np.ndarray, ridge: float = 1e-2, steps: int = 30) -> np.ndarray:
    """Logistic regression by Newton's method (IRLS) with a small ridge, which keeps it
    finite on separable data. Written here rather than adding scikit-learn to the test
    dependencies for fifteen lines."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        gradient = x.T @ (p - y) + ridge * w
        hessian = (x.T * (p * (1 - p))) @ x + ridge * np.eye(x.shape[1])
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def held_out_accuracy(x: np.ndarray, y: np.ndarray, folds: int = 5) -> float:
    """Accuracy on held-out items over k-fold cross-validation (a fixed shuffle), columns
    standardised on each training fold."""
    order = np.random.default_rng(0).permutation(len(y))
    right = 0
    for fold in np.array_split(order, folds):
        train = np.setdiff1d(order, fold)
        mean, sd = x[train].mean(axis=0), x[train].std(axis=0)
        sd[sd == 0] = 1.0
        scaled = (x - mean) / sd
        # The intercepts (per task: a column that is 1 or 0) keep their scale meaning.
        w = fit(scaled[train], y[train])
        right += int(((scaled[fold] @ w > 0) == (y[fold] == 1)).sum())
    return right / len(y)


def guess_rate(seen: Sequence[Seen], *, raw: bool) -> float:
    pairs = [
        (s.task, s.raw_a if raw else s.a, s.raw_b if raw else s.b, s.position, s.id) for s in seen
    ]
    y = np.array([float(s.a_is_edge) for s in seen])
    return held_out_accuracy(features(pairs), y)


def test_a_classifier_guesses_the_edge_s_answer_no_better_than_chance(reviewed: Read) -> None:
    seen = reviewed.pairs
    assert len(seen) >= 900, len(seen)
    assert {s.task for s in seen} == set(TASKS)
    blind = guess_rate(seen, raw=False)
    # The control: the answers as the models sent them (the edge's " Refund ", its keys in
    # another order) give the edge away to the same classifier.
    control = guess_rate(seen, raw=True)
    assert control > CHANCE_CEILING, control
    assert blind <= CHANCE_CEILING, (blind, control)


def test_the_blind_export_shows_each_pair_as_the_queue_did(reviewed: Read) -> None:
    """The export a review key downloads holds the same A and B as the item it labelled (so
    the classifier's figure above holds for it too), and nothing else that could tell."""
    lines = reviewed.exported
    by_input: dict[str, list[Seen]] = {}
    for s in reviewed.pairs:
        by_input.setdefault(s.eval_id, []).append(s)
    compared = 0
    for eval_id, line in lines.items():
        found = by_input.get(eval_id, [])
        if len(found) != 1:
            continue  # an input sampled twice: which item the line came from is not said
        assert (line["a"], line["b"]) == (found[0].a, found[0].b), line
        compared += 1
    assert compared >= 0.8 * len(lines) and compared > 600, (compared, len(lines))
    assert {k for line in lines.values() for k in line} == BLIND_KEYS
