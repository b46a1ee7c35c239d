"""The scan (issue 26, "Blind everywhere"): every endpoint the API describes, called with a
`review` key on a database that holds a rollback, a blocked edge model, review items and
eval items of every layer — in every way a reviewer can call it (each task and layer, JSON
and NDJSON and CSV, each item claimed, labelled, refused, skipped) — answers nothing that
names a model, a side, what was served or the router's decision: neither in what it shows
nor in the errors it gives. Endpoints the key may not call answer 403 (scanned too)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.db import make_engine, session_scope
from controlplane.models import Result, ReviewItem
from controlplane.models.rollout import BlockedModel
from controlplane.sim.evalset_example import seed
from tests.conftest import Api, make_api
from tests.review.blind_leaks import model_leaks, text_leaks

LAYERS = ("boundary", "anomaly", "regression")
ACCEPTS = ("application/json", "application/x-ndjson", "text/csv")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Api]:
    """The simulated long-ticket rollout (controlplane.sim.evalset_example): ticket_classify
    rolled back and small-int4@3 blocked, review items of every reason and layer, the first
    ones labelled and backfilled into eval items; keys of every scope; rates off."""
    path = tmp_path_factory.mktemp("scan") / "shadowplane.db"
    shutil.copy(sqlite_template, path)
    engine = make_engine(f"sqlite:///{path}")
    try:
        assert seed(engine, labelled=40) == 40
    finally:
        engine.dispose()
    rates = {f"rate_{s}_per_second": 0 for s in ("ingest", "flags", "read", "review", "admin")}
    yield from make_api(f"sqlite:///{path}", auth_failures_per_minute=0, **rates)


def models_of(api: Api) -> set[str]:
    """Every model name the database knows: the results' and the blocked ones."""
    with session_scope(api.engine) as session:
        names = set(session.scalars(select(Result.edge_model)))
        names |= set(session.scalars(select(Result.cloud_model)))
        names |= set(session.scalars(select(BlockedModel.model)))
    return {n for n in names if n}


class Scan:
    """Calls made with the review key and what each answer leaked."""

    def __init__(self, api: Api, models: set[str]) -> None:
        self.api, self.models = api, models
        self.headers = api.headers("review")
        self.leaks: dict[str, list[str]] = {}
        self.statuses: dict[str, int] = {}

    def call(self, method: str, url: str, *, accept: str | None = None, **kw: Any) -> Any:
        headers = {**self.headers, **({"Accept": accept} if accept else {})}
        answer = self.api.client.request(method, url, headers=headers, **kw)
        name = f"{method} {url} {accept or ''} {kw.get('json', '')}"
        self.statuses[name] = answer.status_code
        # The metrics (open to any key) are the system's own telemetry, per task and
        # bucket, named after its two sides (`edge_share`); they must name no model.
        check = model_leaks if url == "/metrics" else text_leaks
        if found := check(answer.text, self.models):
            self.leaks[name] = found[:5]
        return answer


def operations(api: Api) -> list[tuple[str, str, dict[str, Any]]]:
    """Every operation the API describes: (METHOD, path template, its OpenAPI entry)."""
    document = api.client.get("/openapi.json").json()
    return [
        (method.upper(), path, op)
        for path, ops in document["paths"].items()
        for method, op in ops.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]


def urls(path: str, values: dict[str, list[str]]) -> list[str]:
    """The path with each of its parameters filled in every way `values` gives."""
    out = [path]
    for name, choices in values.items():
        if "{" + name + "}" in path:
            out = [u.replace("{" + name + "}", c) for u in out for c in choices]
    return out


def test_nothing_a_review_key_reaches_names_a_model_a_side_or_what_was_served(
    seeded: Api,
) -> None:
    api = seeded
    models = models_of(api)
    assert {"small-int4@3", "large@7"} <= models
    with session_scope(api.engine) as session:
        items = list(session.scalars(select(ReviewItem).order_by(ReviewItem.id)))
        blocked = list(session.scalars(select(BlockedModel.model)))
        request_id = session.scalars(select(Result.request_id)).first()
    assert blocked == ["small-int4@3"]
    assert {i.layer for i in items} == set(LAYERS)
    scan = Scan(api, models)

    # The queue: claim items (regression ones come first), and give each an answer a
    # reviewer may give, then ones the server refuses.
    refusals = [
        {"verdict": "a_correct", "corrected": "refund"},
        {"verdict": "both_correct"},
        {"verdict": "correct"},
        {"verdict": "a_correct", "failure_class": "Not A Class"},
        {"verdict": "both_wrong", "corrected": {"nested": "not a label"}},
        {"verdict": "maybe"},
    ]
    handled = []
    for k in range(24):
        answer = scan.call("GET", "/v1/review/next")
        if answer.status_code != 200:
            break
        item = answer.json()["item"]
        handled.append(item)
        for body in refusals if k < 4 else ():
            scan.call("POST", f"/v1/review/{item['id']}/label", json=body)
        if k % 3 == 2:
            scan.call("POST", f"/v1/review/{item['id']}/release", json={"skip": True})
        else:
            verdict = "correct" if item["kind"] == "single" else ("a_correct", "b_correct")[k % 2]
            scan.call("POST", f"/v1/review/{item['id']}/label", json={"verdict": verdict})
    assert len(handled) >= 10
    # A label on an item the key no longer holds, a correction of its own label, an item
    # that does not exist, one someone else labelled.
    scan.call("POST", f"/v1/review/{handled[2]['id']}/label", json={"verdict": "a_correct"})
    scan.call("POST", f"/v1/review/{handled[0]['id']}/label", json={"verdict": "unclear"})
    scan.call("POST", "/v1/review/999999/label", json={"verdict": "a_correct"})
    scan.call("POST", f"/v1/review/{items[0].id}/release", json={})
    scan.call("POST", "/v1/evalsets/backfill", json={})

    # Every operation the API describes, every way a reviewer can fill it in.
    values = {
        "task": ["ticket_classify", "invoice_extract", "nope"],
        "layer": [*LAYERS, "gold"],
        "item_id": [str(handled[-1]["id"]), str(items[0].id)],
        "request_id": [request_id or "r-1"],
        "alert_id": ["1"],
        "key": ["ticket_classify"],
    }
    reached = set()
    for method, path, op in operations(api):
        takes_task = any(p.get("name") == "task" for p in op.get("parameters", []))
        for url in urls(path, values):
            queries = [{}, {"task": "ticket_classify"}] if takes_task else [{}]
            for query in queries:
                for accept in ACCEPTS if method == "GET" else (None,):
                    body = {} if method != "GET" else None
                    answer = scan.call(method, url, accept=accept, params=query, json=body)
                    if answer.status_code not in (401, 403):
                        reached.add((method, path))
    # Nothing the key reached (nor any refusal) named a model, a side, what was served or
    # the router's decision; and it reached the queue, the eval sets and the metrics.
    assert scan.leaks == {}
    assert len(scan.statuses) > 200
    assert {
        ("GET", "/v1/review/next"),
        ("GET", "/v1/review/queue"),
        ("GET", "/v1/evalsets"),
        ("GET", "/v1/evalsets/{task}/{layer}"),
        ("POST", "/v1/evalsets/backfill"),
        ("GET", "/metrics"),
    } <= reached, reached
    assert ("GET", "/v1/evalsets/{task}/runs") not in reached
