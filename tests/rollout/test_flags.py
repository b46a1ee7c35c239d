"""Routing flags: derived from stage and config, versioned per task, one global revision, ETag."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controlplane.catalog.schemas import parse_config
from controlplane.rollout.flags import derive
from tests.conftest import INVOICE_TASK, TICKET_TASK, Api

CONFIG = parse_config({**TICKET_TASK, "shadow_rate": 0.5, "max_input_tokens": 512})


def test_the_flag_follows_the_stage_table() -> None:
    assert derive("cloud", 0, CONFIG, False) == {
        "stage": "cloud",
        "edge_percent": 0,
        "sticky_by": "session",
        "max_input_tokens": 512,
        "shadow_rate": 0.0,
        "killed": False,
        "default_route": "cloud",
        "repeat_rate": 0.01,
    }
    assert (
        derive("shadow", 0, CONFIG, False)["edge_percent"],
        derive("shadow", 0, CONFIG, False)["shadow_rate"],
    ) == (0, 0.5)
    assert derive("canary", 0, CONFIG, False)["edge_percent"] == 5
    assert derive("canary", 1, CONFIG, False)["edge_percent"] == 25
    assert derive("full", 0, CONFIG, False)["edge_percent"] == 100
    assert derive("rolled_back", 0, CONFIG, False)["edge_percent"] == 0
    killed = derive("full", 0, CONFIG, True)
    assert (killed["killed"], killed["edge_percent"], killed["shadow_rate"], killed["stage"]) == (
        True,
        0,
        0.0,
        "full",
    )


def test_flags_are_published_with_versions_a_revision_and_an_etag(api: Api) -> None:
    read = api.headers("flags:read")
    first = api.client.get("/v1/flags", headers=read)
    assert first.status_code == 200
    body = first.json()
    assert body["revision"] == 2 and set(body["flags"]) == {"ticket_classify", "invoice_extract"}
    flag = body["flags"]["ticket_classify"]
    assert flag["version"] == 1 and flag["stage"] == "shadow" and flag["edge_percent"] == 0
    assert (
        flag["shadow_rate"] == 1.0 and flag["default_route"] == "cloud" and flag["killed"] is False
    )
    assert flag["reason"] == "task created in shadow"
    tag = first.headers["etag"]
    assert api.client.get("/v1/flags", headers={**read, "If-None-Match": tag}).status_code == 304

    # A config change that leaves routing alone leaves the flag alone...
    assert (
        api.client.post(
            "/v1/tasks", json={**TICKET_TASK, "window_seconds": 60}, headers=api.headers()
        ).status_code
        == 201
    )
    assert api.client.get("/v1/flags", headers={**read, "If-None-Match": tag}).status_code == 304
    # ...one that changes it is a new version, a new revision and a new ETag.
    assert (
        api.client.post(
            "/v1/tasks",
            json={**TICKET_TASK, "window_seconds": 60, "shadow_rate": 0.25},
            headers=api.headers(),
        ).status_code
        == 201
    )
    changed = api.client.get("/v1/flags", headers={**read, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["revision"] == 3
    one = api.client.get("/v1/flags/ticket_classify", headers=read).json()
    assert (one["version"], one["shadow_rate"], one["reason"]) == (2, 0.25, "config version 3")


def test_flag_reads_need_the_flags_scope_and_a_known_task(api: Api) -> None:
    assert api.client.get("/v1/flags").status_code == 401
    assert api.client.get("/v1/flags", headers=api.headers("ingest")).status_code == 403
    assert api.client.get("/v1/flags", headers=api.headers("admin")).status_code == 200
    missing = api.client.get("/v1/flags/nope", headers=api.headers("flags:read"))
    assert missing.status_code == 404 and "route to the cloud" in missing.text


def test_a_task_created_in_cloud_runs_nothing_beside_it(api: Api) -> None:
    api.client.post(
        "/v1/tasks", json={**INVOICE_TASK, "task": "cold", "stage": "cloud"}, headers=api.headers()
    )
    flag = api.client.get("/v1/flags/cold", headers=api.headers("flags:read")).json()
    assert (flag["stage"], flag["edge_percent"], flag["shadow_rate"]) == ("cloud", 0, 0.0)


def test_a_task_shows_its_flag_and_latest_closed_window(metrics_api: Api) -> None:
    from datetime import timedelta

    from controlplane.scheduler import run_pass
    from tests.conftest import make_result
    from tests.windowdata import LATENESS, T0, WINDOW, post_all

    post_all(metrics_api, [make_result(request_id=f"v-{i}", task="metrics_task") for i in range(4)])
    before = metrics_api.client.get(
        "/v1/tasks/metrics_task", headers=metrics_api.headers("read")
    ).json()
    assert before["flag"]["stage"] == "shadow" and before["latest_window"] is None
    run_pass(metrics_api.engine, T0 + timedelta(seconds=WINDOW + LATENESS))
    after = metrics_api.client.get(
        "/v1/tasks/metrics_task", headers=metrics_api.headers("read")
    ).json()
    assert after["latest_window"]["n_results"] == 4 and after["latest_window"]["agreement"] == 1.0


def _tags(api: Api) -> tuple[str, str]:
    read = api.headers("flags:read")
    every = api.client.get("/v1/flags", headers=read)
    one = api.client.get("/v1/flags/ticket_classify", headers=read)
    assert every.status_code == one.status_code == 200
    return every.headers["etag"], one.headers["etag"]


def test_any_change_is_a_new_etag_and_no_change_answers_304(api: Api) -> None:
    read, admin = api.headers("flags:read"), api.headers()
    changes = [
        ("/v1/tasks/ticket_classify/promote", {"reason": "gate passed", "force": True}),
        ("/v1/tasks", {**TICKET_TASK, "shadow_rate": 0.5}),
        ("/v1/tasks/ticket_classify/rollback", {"reason": "agreement fell"}),
        ("/v1/kill", {"reason": "incident"}),
        ("/v1/kill/lift", {"reason": "over"}),
    ]
    seen = [_tags(api)]
    for path, body in changes:
        unchanged = seen[-1]
        for url, tag in zip(("/v1/flags", "/v1/flags/ticket_classify"), unchanged, strict=True):
            again = api.client.get(url, headers={**read, "If-None-Match": tag})
            assert again.status_code == 304 and again.content == b""
            assert again.headers["etag"] == tag and "x-shadowplane-stale" not in again.headers
        assert api.client.post(path, json=body, headers=admin).status_code in (200, 201)
        seen.append(_tags(api))
        for url, tag in zip(("/v1/flags", "/v1/flags/ticket_classify"), unchanged, strict=True):
            # The change is answered at once, in full, to a poll holding the old tag.
            moved = api.client.get(url, headers={**read, "If-None-Match": tag})
            assert moved.status_code == 200 and moved.headers["etag"] != tag
    assert len({every for every, _ in seen}) == len({one for _, one in seen}) == len(seen)


def test_if_none_match_takes_lists_weak_tags_and_a_star(api: Api) -> None:
    read = api.headers("flags:read")
    tag, one_tag = _tags(api)
    for header in (
        tag,
        f'"nope", {tag}',
        f"W/{tag}",
        f'W/"nope",W/{tag}',
        "*",
    ):
        assert (
            api.client.get("/v1/flags", headers={**read, "If-None-Match": header}).status_code
            == 304
        ), header
    for header in ('"nope"', tag.strip('"'), f"{tag}x", ""):
        assert (
            api.client.get("/v1/flags", headers={**read, "If-None-Match": header}).status_code
            == 200
        ), header
    assert (
        api.client.get(
            "/v1/flags/ticket_classify", headers={**read, "If-None-Match": f"W/{one_tag}"}
        ).status_code
        == 304
    )
    # A tag of the whole document is not the tag of one flag.
    assert (
        api.client.get(
            "/v1/flags/ticket_classify", headers={**read, "If-None-Match": tag}
        ).status_code
        == 200
    )


def test_bodies_are_canonical_and_the_etag_hashes_the_body_alone(api: Api) -> None:
    import hashlib
    import json

    from controlplane.compare.jsonutil import dumps

    read = api.headers("flags:read")
    every = api.client.get("/v1/flags", headers=read)
    assert every.content == dumps(json.loads(every.content), sort_keys=True)
    assert every.content.startswith(b'{"flags":{"invoice_extract":{"default_route":"cloud"')
    assert every.headers["etag"] == f'"{hashlib.sha256(every.content).hexdigest()[:32]}"'
    one = api.client.get("/v1/flags/ticket_classify", headers=read)
    assert one.content == dumps(
        json.loads(every.content)["flags"]["ticket_classify"], sort_keys=True
    )
    assert one.headers["etag"] == f'"{hashlib.sha256(one.content).hexdigest()[:32]}"'


def test_a_process_that_never_loaded_the_flags_answers_503(api: Api) -> None:
    from controlplane.rollout.flagcopy import FlagCopy

    app = api.client.app
    loaded = app.state.flag_copy  # type: ignore[attr-defined]
    # As if storage had been down since this process started: no copy was ever loaded.
    app.state.flag_copy = FlagCopy(api.engine)  # type: ignore[attr-defined]
    try:
        read = api.headers("flags:read")
        for url in ("/v1/flags", "/v1/flags/ticket_classify", "/v1/flags/stream"):
            response = api.client.get(url, headers=read)
            assert response.status_code == 503, url
            assert response.headers["Retry-After"] == "5"
            assert "has not loaded the flags yet" in response.json()["detail"]
    finally:
        app.state.flag_copy = loaded  # type: ignore[attr-defined]


class _TornDownRedis:
    """A Redis client whose every call fails the way redis-py does when a connection is
    torn down under it (an AttributeError from inside the client, not a RedisError)."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise AttributeError("'NoneType' object has no attribute 'readline'")

        if name == "pubsub":
            return lambda: self
        return fail


def test_a_redis_client_failing_with_any_error_never_stops_the_copy_following(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in CI: redis-py raised AttributeError from `subscribe`, the follower thread died,
    and the copy would never have followed the database again. Any client error is a
    Redis failure: the copy keeps following the database."""
    import redis
    from sqlalchemy import update

    from controlplane.models import FlagState
    from controlplane.rollout.flagcopy import FlagCopy

    monkeypatch.setattr(redis.Redis, "from_url", classmethod(lambda cls, *a, **k: _TornDownRedis()))
    copy = FlagCopy(api.engine, redis_url="redis://127.0.0.1:1/0", check_seconds=0.05)
    copy.start()
    try:
        before = copy.snapshot().revision
        with api.engine.begin() as conn:  # a change no process announced
            conn.execute(update(FlagState).values(revision=FlagState.revision + 1))
        deadline = time.monotonic() + 30
        while copy.snapshot().revision == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert copy.snapshot().revision == before + 1
        assert copy._thread is not None and copy._thread.is_alive()
    finally:
        copy.stop()
