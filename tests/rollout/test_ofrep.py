"""OFREP through the app: every reason and variant, the metadata, every error code with the
field and the reason, the bulk answer with its ETag, and authentication (Bearer or X-API-Key,
scope, 429 with a Retry-After date)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from controlplane.api import create_app
from controlplane.client.sticky import sticky_bucket
from controlplane.models import FlagState
from controlplane.rollout.ofrep import Context, evaluate_flag, metadata, read_context
from controlplane.settings import Settings
from tests.conftest import Api, make_api
from tests.drills.servers import PgServer

ONE = "/ofrep/v1/evaluate/flags/{}"
BULK = "/ofrep/v1/evaluate/flags"
LABELS = {"kind": "label", "labels": ["refund", "exchange"]}
CAP = 512


def task(name: str, **overrides: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": LABELS,
        "max_input_tokens": CAP,
        "promotion": {"canary_steps": [50]},
        **overrides,
    }


def keys(name: str, edge: bool, n: int = 2) -> list[str]:
    """Session ids whose sticky bucket for `name` is under 50 (edge) or not."""
    found = (f"s-{i}" for i in range(10_000))
    return [k for k in found if ((sticky_bucket(name, k) or 0) < 50) == edge][:n]


def wait_until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """The flag copy follows changes within about a second: look again until it has."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the flag copy did not follow the change"
        time.sleep(0.05)


def settled(api: Api, client: TestClient | None = None) -> None:
    """Wait until the app's flag copy holds the database's current revision."""
    with api.engine.connect() as conn:
        revision = conn.scalar(select(FlagState.revision).where(FlagState.id == 1))
    app = (client or api.client).app
    wait_until(lambda: app.state.flag_copy.snapshot().revision == revision)  # type: ignore[attr-defined]


def admin(api: Api, path: str, **body: Any) -> None:
    response = api.client.post(path, json=body, headers=api.headers())
    assert response.status_code in (200, 201), response.text


@pytest.fixture
def stages(api: Api) -> Api:
    """One task in every stage: shadow, shadow without shadow traffic, cloud, canary at 50%
    (by session and by user), full, rolled back."""
    for config in (
        task("t_shadow", shadow_rate=0.5),
        task("t_quiet", shadow_rate=0.0),
        task("t_cloud", stage="cloud"),
        task("t_canary"),
        task("t_user", sticky_by="user"),
        task("t_full"),
        task("t_rolled"),
    ):
        admin(api, "/v1/tasks", **config)
    go = {"reason": "test", "force": True}
    for name in ("t_canary", "t_user", "t_full", "t_rolled"):
        admin(api, f"/v1/tasks/{name}/promote", **go)
    admin(api, "/v1/tasks/t_full/promote", **go)
    admin(api, "/v1/tasks/t_rolled/rollback", reason="test")
    settled(api)
    return api


def ofrep(api: Api, name: str, context: Any = None, scope: str = "flags:read", **kw: Any) -> Any:
    body = {} if context is None else {"context": context}
    return api.client.post(ONE.format(name), json=body, headers=api.headers(scope), **kw)


def routed(api: Api, name: str, context: Any) -> tuple[str, str, str]:
    response = ofrep(api, name, context)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["key"] == name and body["cacheable"] is False
    return body["value"], body["variant"], body["reason"]


def test_every_stage_gives_its_value_variant_and_reason(stages: Api) -> None:
    api = stages
    edge, cloud = keys("t_canary", True)[0], keys("t_canary", False)[0]
    within = {"input_tokens": 100}
    cases = {
        # shadow: the cloud serves, the edge runs beside it (or nothing, at shadow_rate 0)
        ("t_shadow", None): ("cloud", "shadow", "STATIC"),
        ("t_shadow", edge): ("cloud", "shadow", "STATIC"),
        ("t_quiet", edge): ("cloud", "cloud", "STATIC"),
        # cloud and rolled back: disabled; a rolled-back task keeps its shadow traffic
        ("t_cloud", edge): ("cloud", "cloud", "DISABLED"),
        ("t_rolled", edge): ("cloud", "shadow", "DISABLED"),
        # canary: the sticky bucket splits
        ("t_canary", edge): ("edge", "edge", "SPLIT"),
        ("t_canary", cloud): ("cloud", "shadow", "SPLIT"),
        # full: the edge serves, no key needed
        ("t_full", None): ("edge", "edge", "STATIC"),
    }
    for (name, key), expected in cases.items():
        context = {**within, **({"targetingKey": key} if key else {})}
        assert routed(api, name, context) == expected, (name, key)

    # The session id stands in for a missing targetingKey; sticky_by user reads the user id.
    assert routed(api, "t_canary", {**within, "session_id": edge})[0] == "edge"
    user_edge, user_cloud = keys("t_user", True)[0], keys("t_user", False)[0]
    assert (
        routed(api, "t_user", {**within, "user_id": user_edge, "session_id": user_cloud})[0]
        == "edge"
    )
    assert (
        routed(api, "t_user", {**within, "user_id": user_cloud, "session_id": user_edge})[0]
        == "cloud"
    )
    # targetingKey wins over both ids.
    assert (
        routed(api, "t_user", {**within, "targetingKey": user_edge, "user_id": user_cloud})[0]
        == "edge"
    )


def test_tokens_missing_or_over_the_cap_and_ineligible_requests_go_to_the_cloud(
    stages: Api,
) -> None:
    api = stages
    edge = keys("t_canary", True)[0]
    targeting = ("cloud", "shadow", "TARGETING_MATCH")
    for name in ("t_canary", "t_full"):
        assert routed(api, name, {"targetingKey": edge}) == targeting, name
        assert routed(api, name, {"targetingKey": edge, "input_tokens": CAP + 1}) == targeting
        assert routed(api, name, {"targetingKey": edge, "input_tokens": CAP})[0] == "edge"
        assert routed(api, name, {"targetingKey": edge, "input_tokens": 9.0})[0] == "edge"
        # The router's own verdict: either form saying no keeps the request on the cloud.
        for verdict in ({"eligible": False}, {"decision": "cloud"}):
            context = {"targetingKey": edge, "input_tokens": 10, **verdict}
            assert routed(api, name, context) == targeting, verdict
        assert (
            routed(api, name, {"targetingKey": edge, "input_tokens": 10, "decision": "edge"})[0]
            == "edge"
        )
    # Unknown attributes are the router's business.
    assert routed(api, "t_full", {"input_tokens": 10, "plan": "pro", "n": [1]})[0] == "edge"


def test_the_kill_switch_sends_every_task_to_the_cloud_without_a_key(stages: Api) -> None:
    api = stages
    admin(api, "/v1/kill", reason="test")
    settled(api)
    for name in ("t_shadow", "t_cloud", "t_canary", "t_user", "t_full", "t_rolled"):
        # A canary needs no key while killed: nothing is split.
        assert routed(api, name, {"input_tokens": 10}) == ("cloud", "cloud", "DISABLED"), name
        assert routed(api, name, {"targetingKey": keys(name, True)[0], "input_tokens": 10}) == (
            "cloud",
            "cloud",
            "DISABLED",
        )


def test_metadata_is_the_flag_in_booleans_numbers_and_strings(stages: Api) -> None:
    api = stages
    flag = api.client.get("/v1/flags/t_canary", headers=api.headers("flags:read")).json()
    body = ofrep(api, "t_canary", {"targetingKey": "s-1", "input_tokens": 1}).json()
    assert body["metadata"] == flag
    assert body["metadata"]["version"] == flag["version"] == 2
    assert (body["metadata"]["stage"], body["metadata"]["edge_percent"]) == ("canary", 50)
    # No cap: the field is left out (OFREP metadata holds no null).
    admin(api, "/v1/tasks", **{**task("t_canary"), "max_input_tokens": None})
    settled(api)
    body = ofrep(api, "t_canary", {"targetingKey": "s-1", "input_tokens": 10**9}).json()
    assert "max_input_tokens" not in body["metadata"] and body["metadata"]["version"] == 3
    assert all(isinstance(v, bool | int | float | str) for v in body["metadata"].values())
    # Without a cap, any token count may take the edge.
    assert body["reason"] == "SPLIT"
    # Nested or listed values (none today) are flattened or written as JSON text.
    assert metadata({"a": {"b": 1, "c": None}, "d": [1, 2], "e": None, "f": 1.5}) == {
        "a.b": 1,
        "d": "[1,2]",
        "f": 1.5,
    }


def test_an_unreadable_flag_is_cloud_with_reason_error() -> None:
    broken = {"task": "x", "version": 4, "stage": "canary", "edge_percent": "many"}
    answer = evaluate_flag("x", broken, Context(targeting_key="s-1", input_tokens=1))
    assert (answer["value"], answer["variant"], answer["reason"]) == ("cloud", "cloud", "ERROR")


def test_unknown_task_is_flag_not_found(stages: Api) -> None:
    response = ofrep(stages, "nope", {"targetingKey": "s-1", "input_tokens": 1})
    assert response.status_code == 404
    body = response.json()
    assert (body["key"], body["errorCode"]) == ("nope", "FLAG_NOT_FOUND")
    assert "'nope'" in body["errorDetails"] and "cloud" in body["errorDetails"]


def test_a_canary_without_a_sticky_key_is_targeting_key_missing(stages: Api) -> None:
    for name, by in (("t_canary", "session"), ("t_user", "user")):
        for context in ({"input_tokens": 10}, {"input_tokens": 10, "targetingKey": ""}):
            response = ofrep(stages, name, context)
            assert response.status_code == 400, response.text
            body = response.json()
            assert (body["key"], body["errorCode"]) == (name, "TARGETING_KEY_MISSING")
            assert body["errorDetails"].startswith("context.targetingKey: missing")
            assert f"{by} id" in body["errorDetails"] and "edge_percent 50" in body["errorDetails"]
    # The user id does not stand in for a session-sticky canary's key.
    response = ofrep(stages, "t_canary", {"input_tokens": 10, "user_id": "u-1"})
    assert response.json()["errorCode"] == "TARGETING_KEY_MISSING"
    # Where the stage needs no key, no key is fine; the cap is checked before the key.
    for name in ("t_shadow", "t_cloud", "t_full", "t_rolled"):
        assert ofrep(stages, name, {"input_tokens": 10}).status_code == 200, name
    assert routed(stages, "t_canary", {"input_tokens": CAP + 1})[2] == "TARGETING_MATCH"
    assert routed(stages, "t_canary", {})[2] == "TARGETING_MATCH"


INVALID = [
    ({"targetingKey": 42}, "context.targetingKey: must be a string (got 42)"),
    ({"session_id": ["s"]}, "context.session_id: must be a string"),
    ({"user_id": {"id": 1}}, "context.user_id: must be a string"),
    (
        {"input_tokens": "812"},
        'context.input_tokens: must be a whole number of tokens, 0 or more (got "812")',
    ),
    ({"input_tokens": -1}, "context.input_tokens: must be a whole number"),
    ({"input_tokens": 1.5}, "(got 1.5)"),
    ({"input_tokens": True}, "(got true)"),
    ({"eligible": "yes"}, 'context.eligible: must be true or false (got "yes")'),
    ({"decision": "maybe"}, "context.decision: must be 'edge' or 'cloud' (got \"maybe\")"),
]


def test_unreadable_context_values_are_invalid_context_naming_the_field(stages: Api) -> None:
    for context, words in INVALID:
        for name in ("t_full", "nope"):
            response = ofrep(stages, name, {"targetingKey": "s-1", **context})
            assert response.status_code == 400, (context, response.text)
            body = response.json()
            assert (body["key"], body["errorCode"]) == (name, "INVALID_CONTEXT")
            assert words in body["errorDetails"], body
    # Every problem at once, each named.
    both = ofrep(stages, "t_full", {"targetingKey": 1, "input_tokens": "x"}).json()
    assert "context.targetingKey" in both["errorDetails"]
    assert "context.input_tokens" in both["errorDetails"]
    not_object = ofrep(stages, "t_full", ["s-1"]).json()
    assert not_object["errorCode"] == "INVALID_CONTEXT"
    assert not_object["errorDetails"] == 'context: must be an object (got ["s-1"])'


def test_an_unreadable_body_is_parse_error(stages: Api) -> None:
    read = stages.headers("flags:read")
    for body, words in (
        (b"{not json", "body: not valid JSON"),
        (b"[1, 2]", "body: must be a JSON object with an optional 'context' object (got [1,2])"),
        (b'"context"', "body: must be a JSON object"),
    ):
        response = stages.client.post(
            ONE.format("t_full"), content=body, headers={**read, "Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text
        assert response.json()["errorCode"] == "PARSE_ERROR"
        assert response.json()["errorDetails"].startswith(words), response.json()
    # Bytes that are not UTF-8 under another content type reach the parser too.
    odd = stages.client.post(
        ONE.format("t_full"), content=b"\xff\xfe", headers={**read, "Content-Type": "text/plain"}
    )
    assert odd.status_code == 400 and odd.json()["errorCode"] == "PARSE_ERROR"
    # No body, or no context: an empty context (a full task needs nothing but the tokens).
    empty = stages.client.post(ONE.format("t_full"), headers=read)
    assert empty.status_code == 200 and empty.json()["reason"] == "TARGETING_MATCH"
    assert routed(stages, "t_full", None)[2] == "TARGETING_MATCH"
    # The body guard stays in front: too deep, or over the size limit.
    deep = stages.client.post(
        ONE.format("t_full"),
        content=b'{"context": ' + b"[" * 100 + b"]" * 100 + b"}",
        headers={**read, "Content-Type": "application/json"},
    )
    assert deep.status_code == 422 and "nested deeper" in deep.text


def test_read_context_alone() -> None:
    assert read_context(b"") == Context()
    assert read_context(b'{"context": null}') == Context()
    assert read_context(
        b'{"context": {"targetingKey": "k", "input_tokens": 3, "decision": "edge", "x": 1}}'
    ) == Context(targeting_key="k", input_tokens=3)
    assert read_context(b'{"context": {"eligible": false, "decision": "edge"}}').eligible is False


def test_bulk_answers_every_task_with_per_flag_errors_and_an_etag(stages: Api) -> None:
    api = stages
    read = api.headers("flags:read")
    edge = keys("t_canary", True)[0]
    first = api.client.post(BULK, json={"context": {"input_tokens": 10}}, headers=read)
    assert first.status_code == 200, first.text
    flags = first.json()["flags"]
    names = [f["key"] for f in flags]
    assert names == sorted(names) and {"t_canary", "t_full", "ticket_classify"} <= set(names)
    by_key = {f["key"]: f for f in flags}
    # A canary without a key fails alone, inside the 200; the others are evaluated.
    assert by_key["t_canary"]["errorCode"] == "TARGETING_KEY_MISSING"
    assert "context.targetingKey" in by_key["t_canary"]["errorDetails"]
    assert (by_key["t_full"]["value"], by_key["t_full"]["reason"]) == ("edge", "STATIC")
    # Each flag answers as the single evaluation does.
    for name in ("t_full", "t_shadow", "t_rolled"):
        assert by_key[name] == ofrep(api, name, {"input_tokens": 10}).json()

    tag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    again = {"context": {"input_tokens": 10}}
    for header in (tag, f"W/{tag}", f'"other", {tag}', "*"):
        unchanged = api.client.post(BULK, json=again, headers={**read, "If-None-Match": header})
        assert unchanged.status_code == 304 and unchanged.content == b"", header
        assert unchanged.headers["etag"] == tag
    # Another context is another answer.
    other = api.client.post(
        BULK, json={"context": {"input_tokens": 10, "targetingKey": edge}}, headers=read
    )
    assert other.headers["etag"] != tag
    assert {f["key"]: f for f in other.json()["flags"]}["t_canary"]["value"] == "edge"
    # Any flag change is a new ETag.
    admin(api, "/v1/tasks/t_canary/rollback", reason="test")
    settled(api)
    changed = api.client.post(BULK, json=again, headers={**read, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert {f["key"]: f for f in changed.json()["flags"]}["t_canary"]["reason"] == "DISABLED"


def test_bulk_refuses_an_unreadable_body_or_context_whole(stages: Api) -> None:
    read = stages.headers("flags:read")
    bad = stages.client.post(BULK, json={"context": {"input_tokens": "many"}}, headers=read)
    assert bad.status_code == 400
    assert bad.json() == {
        "errorCode": "INVALID_CONTEXT",
        "errorDetails": 'context.input_tokens: must be a whole number of tokens, 0 or more (got "many")',
    }
    parse = stages.client.post(
        BULK, content=b"nope", headers={**read, "Content-Type": "application/json"}
    )
    assert parse.status_code == 400 and parse.json()["errorCode"] == "PARSE_ERROR"
    assert "key" not in parse.json()


@pytest.fixture
def replicas(sqlite_url: str) -> Iterator[tuple[Api, TestClient]]:
    for api in make_api(sqlite_url):
        other = create_app(Settings(database_url=sqlite_url, tick_seconds=0))
        with TestClient(other) as client:
            yield api, client


def test_bulk_etag_is_identical_on_two_replicas(replicas: tuple[Api, TestClient]) -> None:
    api, other = replicas
    admin(api, "/v1/tasks/ticket_classify/promote", reason="test", force=True)
    settled(api)
    settled(api, other)
    read = api.headers("flags:read")
    context = {"context": {"targetingKey": "s-7", "input_tokens": 50}}
    one = api.client.post(BULK, json=context, headers=read)
    two = other.post(BULK, json=context, headers=read)
    assert one.status_code == two.status_code == 200
    assert one.headers["etag"] == two.headers["etag"] and one.content == two.content
    # The other replica answers 304 to the first one's ETag.
    tag = {"If-None-Match": one.headers["etag"]}
    assert other.post(BULK, json=context, headers={**read, **tag}).status_code == 304


def test_keys_by_bearer_or_x_api_key_with_the_flags_scope(stages: Api) -> None:
    api = stages
    body = {"context": {"input_tokens": 10}}
    for path in (ONE.format("t_full"), BULK):
        missing = api.client.post(path, json=body)
        assert missing.status_code == 401 and "'X-API-Key: <key>'" in missing.json()["detail"]
        assert (
            api.client.post(path, json=body, headers={"X-API-Key": "sp_made_up"}).status_code == 401
        )
        assert (
            api.client.post(
                path, json=body, headers={"X-API-Key": api.keys["flags:read"]}
            ).status_code
            == 200
        )
        assert (
            api.client.post(path, json=body, headers=api.headers("flags:read")).status_code == 200
        )
        assert api.client.post(path, json=body, headers=api.headers("admin")).status_code == 200
        wrong = api.client.post(path, json=body, headers={"X-API-Key": api.keys["ingest"]})
        assert wrong.status_code == 403 and "'flags:read'" in wrong.json()["detail"]
        # Authentication comes before the body is read.
        assert api.client.post(path, content=b"{bad").status_code == 401


def test_past_the_rate_429_says_when_to_retry_as_a_date(sqlite_url: str) -> None:
    tiny = {"rate_flags_per_second": 0.01, "rate_flags_burst": 3}
    for api in make_api(sqlite_url, **tiny):
        headers = {"X-API-Key": api.keys["flags:read"]}
        answers = [
            api.client.post(path, json={}, headers=headers)
            for path in (BULK, ONE.format("ticket_classify"), BULK, ONE.format("ticket_classify"))
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 429]
        refused = answers[-1]
        assert "SHADOWPLANE_RATE_FLAGS_PER_SECOND" in refused.json()["detail"]
        at = parsedate_to_datetime(refused.headers["Retry-After"])
        # (1 token) / (0.01 per second): about 100 s from now, as an HTTP-date in GMT.
        wait = (at - datetime.now(UTC)).total_seconds()
        assert refused.headers["Retry-After"].endswith(" GMT") and 60 < wait <= 101, wait
        assert api.client.post(BULK, json={}, headers=headers).status_code == 429


@pytest.fixture
def watchful_api(own_pg: PgServer) -> Iterator[Api]:
    # The copy checks storage five times a second: an outage shows within moments.
    yield from make_api(own_pg.url, flag_check_seconds=0.2)


@pytest.mark.integration
def test_with_storage_down_the_last_copy_answers_marked_stale(
    watchful_api: Api, own_pg: PgServer
) -> None:
    api = watchful_api
    admin(api, "/v1/tasks/ticket_classify/promote", reason="test", force=True)
    settled(api)
    read = api.headers("flags:read")
    context = {"targetingKey": "s-1", "input_tokens": 10}

    def bulk(**headers: str) -> Any:
        return api.client.post(BULK, json={"context": context}, headers={**read, **headers})

    def stale() -> bool:
        return "x-shadowplane-stale" in bulk().headers

    fresh = bulk()
    one = ofrep(api, "ticket_classify", context).json()
    assert fresh.status_code == 200 and not stale()
    own_pg.stop()
    try:
        wait_until(stale)
        # The same answer and the same ETag: only the header says how old the copy is.
        during = bulk()
        assert during.status_code == 200 and during.content == fresh.content
        assert during.headers["etag"] == fresh.headers["etag"]
        assert int(during.headers["x-shadowplane-stale"]) >= 0
        unchanged = bulk(**{"If-None-Match": fresh.headers["etag"]})
        assert unchanged.status_code == 304 and "x-shadowplane-stale" in unchanged.headers
        single = ofrep(api, "ticket_classify", context)
        assert single.status_code == 200 and single.json() == one
        assert "x-shadowplane-stale" in single.headers
        missing = ofrep(api, "nope", context)
        assert missing.status_code == 404 and "x-shadowplane-stale" in missing.headers
    finally:
        own_pg.start()
    wait_until(lambda: not stale())
