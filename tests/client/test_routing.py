"""The routing rule against the shared vectors file, through `evaluate`, `route` and a
`FlagClient` reading its copy from a cache file; and its law: raising `edge_percent` only
moves keys from the cloud to the edge."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import controlplane.client
from controlplane.client import FlagClient, evaluate, route

VECTORS = Path(controlplane.client.__file__).parent / "routing_vectors.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]


def test_the_vectors_cover_every_stage_reason_and_variant() -> None:
    expected = [c["expected"] for c in CASES]
    stages = {c["flag"].get("stage") for c in CASES if isinstance(c["flag"], dict)}
    assert {"cloud", "shadow", "canary", "full", "rolled_back"} <= stages
    assert {e["reason"] for e in expected} == {
        "DISABLED",
        "TARGETING_MATCH",
        "SPLIT",
        "STATIC",
        "ERROR",
        "UNKNOWN",
    }
    assert {e["variant"] for e in expected} == {"edge", "cloud", "shadow"}
    assert any(e["key_missing"] for e in expected)
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_evaluate_matches_every_vector(case: dict[str, Any]) -> None:
    got = evaluate(case["flag"], case["task"], **case["request"])
    assert {
        "served": got.served,
        "other_rate": got.other_rate,
        "variant": got.variant,
        "reason": got.reason,
        "flag_version": got.flag_version,
        "key_missing": got.key_missing,
    } == case["expected"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_route_runs_the_other_side_exactly_when_the_draw_is_under_its_rate(
    case: dict[str, Any],
) -> None:
    request = {k: v for k, v in case["request"].items() if k != "key"}
    if "key" in case["request"]:
        pytest.skip("route() keys on sticky_by; an explicit key is an OFREP context")
    rate = case["expected"]["other_rate"]
    for draw in (0.0, 0.2499, 0.25, 0.5, 0.999999):
        got = route(case["flag"], case["task"], draw=draw, **request)
        assert got.served == case["expected"]["served"]
        assert got.flag_version == case["expected"]["flag_version"]
        assert got.reason == case["expected"]["reason"]
        assert got.variant == case["expected"]["variant"]
        assert got.run_other == (draw < rate)


def _cache(path: Path, flags: dict[str, Any], age: float = 0.0) -> Path:
    document = {
        "format": 1,
        "confirmed_at": time.time() - age,
        "revision": 3,
        "etag": None,
        "flags": flags,
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_flag_client_routes_every_vector_like_the_rule(tmp_path: Path) -> None:
    # Not started: it answers from the copy its cache file gave it; the network is never used.
    for i, case in enumerate(CASES):
        request = {k: v for k, v in case["request"].items() if k != "key"}
        if "key" in case["request"] or not isinstance(case["flag"], dict | None):
            continue
        flags = {} if case["flag"] is None else {case["task"]: case["flag"]}
        cache = _cache(tmp_path / f"flags-{i}.json", flags)
        client = FlagClient("http://127.0.0.1:9", "sp_none", cache_path=cache, rng=random.Random(i))
        try:
            for _ in range(20):
                got = client.route(case["task"], **request)
                assert (got.served, got.reason, got.flag_version, got.variant) == (
                    case["expected"]["served"],
                    case["expected"]["reason"],
                    case["expected"]["flag_version"],
                    case["expected"]["variant"],
                ), case["name"]
                if case["expected"]["other_rate"] in (0.0, 1.0):
                    assert got.run_other == (case["expected"]["other_rate"] == 1.0)
        finally:
            client.close()


def test_a_flag_client_routes_a_stale_cache_to_the_cloud(tmp_path: Path) -> None:
    full = {**CASES[0]["flag"], "stage": "full", "edge_percent": 100}
    fresh = FlagClient(
        "http://127.0.0.1:9", "k", cache_path=_cache(tmp_path / "a.json", {"t": full}, 5)
    )
    old = FlagClient(
        "http://127.0.0.1:9",
        "k",
        max_staleness=600,
        cache_path=_cache(tmp_path / "b.json", {"t": full}, 601),
    )
    try:
        assert fresh.route("t", session_id="s", input_tokens=10).served == "edge"
        assert fresh.status().source == "cache" and fresh.status().state == "ok"
        stale = old.route("t", session_id="s", input_tokens=10)
        assert (stale.served, stale.run_other, stale.reason, stale.flag_version) == (
            "cloud",
            False,
            "STALE",
            None,
        )
        assert old.flag("t") is None and old.status().state == "stale"
        assert old.status().age_seconds is not None and old.status().age_seconds >= 601
    finally:
        fresh.close()
        old.close()


CANARY = {
    "task": "t",
    "version": 1,
    "stage": "canary",
    "sticky_by": "session",
    "killed": False,
    "default_route": "cloud",
}


@given(
    task=st.text(min_size=1, max_size=20),
    keys=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=30),
    percents=st.tuples(st.integers(0, 100), st.integers(0, 100)),
    tokens=st.one_of(st.none(), st.integers(0, 5000)),
    cap=st.one_of(st.none(), st.integers(0, 5000)),
    rate=st.floats(0, 1),
    sticky_by=st.sampled_from(["session", "user"]),
)
def test_raising_edge_percent_only_moves_keys_from_cloud_to_edge(
    task: str,
    keys: list[str],
    percents: tuple[int, int],
    tokens: int | None,
    cap: int | None,
    rate: float,
    sticky_by: str,
) -> None:
    low, high = sorted(percents)

    def edge_keys(percent: int) -> set[str]:
        flag = {
            **CANARY,
            "edge_percent": percent,
            "max_input_tokens": cap,
            "shadow_rate": rate,
            "sticky_by": sticky_by,
        }
        return {
            k
            for k in keys
            if evaluate(flag, task, session_id=k, user_id=k, input_tokens=tokens).served == "edge"
        }

    before, after = edge_keys(low), edge_keys(high)
    assert before <= after
    if low == 0:
        assert before == set()
    if high == 100 and tokens is not None and (cap is None or tokens <= cap):
        assert after == set(keys)


def test_the_longest_sticky_key_is_the_longest_id_ingest_stores() -> None:
    from controlplane.client.routing import MAX_KEY_LENGTH
    from controlplane.ingest.schemas import MAX_ID_LENGTH

    assert MAX_KEY_LENGTH == MAX_ID_LENGTH
