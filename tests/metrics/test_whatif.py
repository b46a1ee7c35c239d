"""The routing what-if against a pandas replay of the same stored results: the candidate,
today's flag (a canary of 40% of eligible requests, by sticky bucket) and the cost–quality
curve of the cap."""

from __future__ import annotations

import contextlib
import math
import random
import shutil
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from controlplane.catalog.service import apply_config
from controlplane.db import session_scope
from controlplane.metrics.whatif import MAX_POINTS
from controlplane.rollout.actions import promote
from tests.conftest import Api, cloned_database, make_api
from tests.windowdata import METRICS_TASK, T0, WINDOW, generated_result, post_all

BUCKETS = ["0-127", "128-511", "512-2047", "2048+"]
CURRENT_CAP = 1000
CANARY_PERCENT = 40
SPAN = 4 * WINDOW


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)]
)
def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """One app per backend holding the period's results, shared by the module's tests."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            path = tmp_path_factory.mktemp("whatif") / "shadowplane.db"
            shutil.copy(request.getfixturevalue("sqlite_template"), path)
            url = f"sqlite:///{path}"
        else:
            request.getfixturevalue("pg_template")
            url = stack.enter_context(cloned_database())
        yield from _seed(url)


def _seed(url: str) -> Iterator[Api]:
    for api in make_api(url):
        with session_scope(api.engine) as session:
            apply_config(
                session,
                {
                    **METRICS_TASK,
                    "max_input_tokens": CURRENT_CAP,
                    "promotion": {"canary_steps": [CANARY_PERCENT]},
                },
                actor="test",
            )
        # Today's flag: a canary, promoted before any traffic (forced past the empty grade).
        promote(api.engine, "metrics_task", actor="test", reason="canary", veto=0.7, force=True)
        rng = random.Random(11)
        results = []
        for i in range(1200):
            result = generated_result(rng, i, T0, SPAN)
            # Sticky keys for the canary's split; every 13th request has none (the cloud's).
            if i % 13:
                result["session_id"] = f"s-{i % 211}"
            edge = result["edge"]
            if edge is not None and rng.random() < 0.85:
                edge["confidence"] = round(rng.random(), 3)
            results.append(result)
        # Outside the period: must not count.
        late = generated_result(rng, 5000, T0 + timedelta(seconds=SPAN), 1)
        late["ts"] = (T0 + timedelta(seconds=SPAN)).isoformat()
        results.append(late)
        post_all(api, results)
        yield api


def _wilson(k: int, n: int) -> tuple[float | None, float | None]:
    if n == 0:
        return None, None
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def _frame(api: Api) -> pd.DataFrame:
    with api.engine.connect() as conn:
        f = pd.read_sql(
            "SELECT r.* FROM results r JOIN tasks t ON t.id = r.task_id "
            "WHERE t.name = 'metrics_task'",
            conn,
        )
    f["ts"] = pd.to_datetime(f["ts"], utc=True)
    for column in ("edge_ran", "cloud_ran", "degraded"):
        f[column] = f[column].astype(bool)
    f = f[(f["ts"] >= pd.Timestamp(T0)) & (f["ts"] < pd.Timestamp(T0 + timedelta(seconds=SPAN)))]
    return f.copy()


def replayed(
    f: pd.DataFrame,
    boundaries: list[int],
    labels: list[str],
    prices: dict[str, Any],
    cap: int | None,
    min_conf: float | None,
    canary: int | None = None,
) -> pd.DataFrame:
    """The results with the what-if's rule replayed on each row, in pandas: its bucket, and
    whether the edge would serve it (`chosen`), with a pair, an agreement, an edge run, an
    offload failure; its cost under the setting and its cloud-only `baseline`. `canary`: a
    canary's percent (0: the edge serves nothing), only rows whose sticky bucket is below
    it (none without a sticky key)."""
    f = f.copy()
    f["bucket"] = pd.cut(
        f["input_tokens"], [0, *boundaries, np.inf], right=False, labels=labels
    ).astype(str)
    chosen = f["decision"] == "edge"
    if cap is not None:
        chosen &= f["input_tokens"] <= cap
    if min_conf is not None:
        chosen &= ~f["edge_ran"] | (f["edge_confidence"].fillna(-1.0) >= min_conf)
    if canary is not None:
        chosen &= f["sticky_bucket"].fillna(100) < canary
    f["chosen"] = chosen
    f["pair"] = chosen & f["outcome"].isin(["agree", "conflict"])
    f["agree"] = chosen & (f["outcome"] == "agree")
    f["run"] = chosen & f["edge_ran"]
    failed = f["edge_ran"] & (
        f["edge_error"].notna() | (f["edge_valid"] == 0) | (f["outcome"] == "invalid")
    )
    f["fail"] = chosen & failed
    tokens_in = f["edge_input_tokens"].fillna(f["input_tokens"])
    tokens_out = f["edge_output_tokens"].fillna(0)
    priced = (tokens_in * prices["edge"]["in"] + tokens_out * prices["edge"]["out"]) / 1000
    edge_cost = f["edge_cost"].fillna(priced)
    served_out = f["edge_output_tokens"].where(f["served"] == "edge")
    out_tokens = f["cloud_output_tokens"].fillna(served_out).fillna(0)
    baseline = (
        f["input_tokens"] * prices["cloud"]["in"] + out_tokens * prices["cloud"]["out"]
    ) / 1000
    f["baseline"] = baseline
    f["cost"] = baseline.where(~f["run"], edge_cost + baseline.where(f["fail"], 0.0))
    return f


def _reference(
    f: pd.DataFrame, cap: int | None, min_conf: float | None, canary: int | None = None
) -> dict[str, dict[str, Any]]:
    f = replayed(f, [128, 512, 2048], BUCKETS, METRICS_TASK["prices"], cap, min_conf, canary)
    expected: dict[str, dict[str, Any]] = {}
    for bucket in [*BUCKETS, "all"]:
        g = f if bucket == "all" else f[f["bucket"] == bucket]
        row: dict[str, Any] = {"n_results": len(g), "baseline_cost": g["baseline"].sum()}
        for name, (num, den) in {
            "edge_share": ("chosen", None),
            "agreement": ("agree", "pair"),
            "offload_fail_rate": ("fail", "run"),
        }.items():
            k = int(g[num].sum())
            n = len(g) if den is None else int(g[den].sum())
            low, high = _wilson(k, n)
            row[name] = {
                "value": k / n if n else None,
                "num": k,
                "den": n,
                "low": low,
                "high": high,
            }
        row["cost"] = g["cost"].sum()
        row["savings"] = row["baseline_cost"] - row["cost"]
        expected[bucket] = row
    return expected


def _close(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        for key, value in want.items():
            _close(got[key], value, f"{where}.{key}")
    elif want is None:
        assert got is None, f"{where}: {got!r}, expected null"
    elif isinstance(want, int | np.integer):
        assert got == want, f"{where}: {got!r} != {want!r}"
    else:
        assert got == pytest.approx(float(want), rel=1e-9, abs=1e-12), f"{where}: {got} != {want}"


def _get(api: Api, scope: str = "read", **params: Any) -> Any:
    query = {
        "since": T0.isoformat(),
        "until": (T0 + timedelta(seconds=SPAN)).isoformat(),
        **params,
    }
    return api.client.get("/v1/tasks/metrics_task/whatif", params=query, headers=api.headers(scope))


@pytest.mark.parametrize(
    ("cap", "min_conf"), [(None, None), (300, None), (700, 0.5), (None, 0.9), (1, 0.0)]
)
def test_whatif_matches_a_pandas_replay(
    seeded: Api, cap: int | None, min_conf: float | None
) -> None:
    params = {
        k: v for k, v in (("max_input_tokens", cap), ("min_confidence", min_conf)) if v is not None
    }
    response = _get(seeded, **params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["candidate"] == {"max_input_tokens": cap, "min_confidence": min_conf}
    assert body["current"] == {
        "max_input_tokens": CURRENT_CAP,
        "min_confidence": None,
        "stage": "canary",
        "edge_percent": CANARY_PERCENT,
        "killed": False,
    }
    frame = _frame(seeded)
    candidate = _reference(frame, cap, min_conf)
    current = _reference(frame, CURRENT_CAP, None, CANARY_PERCENT)
    got = {row["bucket"]: row for row in body["buckets"]}
    assert list(got) == [*BUCKETS, "all"]
    assert got["all"]["n_results"] == 1200
    for bucket in got:
        for setting, want in (("candidate", candidate[bucket]), ("current", current[bucket])):
            _close(got[bucket]["n_results"], want["n_results"], bucket)
            _close(got[bucket]["baseline_cost"], want["baseline_cost"], bucket)
            for name in ("edge_share", "agreement", "offload_fail_rate", "cost", "savings"):
                _close(got[bucket][setting][name], want[name], f"{bucket}.{setting}.{name}")
    # The data exercises every condition: the settings differ, and the empty bucket is null.
    assert got["all"]["candidate"]["edge_share"]["num"] > 0 or cap == 1
    assert got["2048+"]["current"]["agreement"]["value"] is None
    if min_conf == 0.9:
        assert (
            got["all"]["candidate"]["edge_share"]["num"]
            < _reference(frame, None, None)["all"]["edge_share"]["num"]
        )
    # Today is the canary's share of the eligible requests within the cap, not all of them.
    within_cap = _reference(frame, CURRENT_CAP, None)["all"]["edge_share"]["num"]
    assert 0 < got["all"]["current"]["edge_share"]["num"] < within_cap


def curve_caps(f: pd.DataFrame) -> list[int]:
    """The curve's caps, in pandas, from results `replayed` without a cap: each input
    length the candidate serves a result of, or past MAX_POINTS of them, for
    k = 1..MAX_POINTS the shortest length within which it serves at least k/MAX_POINTS
    of all it serves."""
    served = f[f["chosen"]].groupby("input_tokens").size().sort_index()
    if len(served) <= MAX_POINTS:
        return [int(length) for length in served.index]
    reached = served.cumsum() * MAX_POINTS
    total = int(served.sum())
    return sorted({int(reached.index[reached >= k * total][0]) for k in range(1, MAX_POINTS + 1)})


def _rate(k: int, n: int) -> dict[str, Any]:
    low, high = _wilson(k, n)
    return {"value": k / n if n else None, "num": k, "den": n, "low": low, "high": high}


def curve_point(f: pd.DataFrame, cap: int) -> dict[str, Any]:
    """The candidate's figures over all of `f` (results `replayed` without a cap) when the
    edge serves only inputs within `cap`: what it serves beyond the cap costs the baseline."""
    g = f[f["input_tokens"] <= cap]
    cost = f["baseline"].sum() + (g["cost"] - g["baseline"]).sum()
    return {
        "edge_share": _rate(int(g["chosen"].sum()), len(f)),
        "agreement": _rate(int(g["agree"].sum()), int(g["pair"].sum())),
        "offload_fail_rate": _rate(int(g["fail"].sum()), int(g["run"].sum())),
        "cost": cost,
        "savings": f["baseline"].sum() - cost,
    }


@pytest.mark.parametrize("min_conf", [None, 0.5])
def test_the_curve_matches_a_pandas_replay_at_each_cap(seeded: Api, min_conf: float | None) -> None:
    params = {} if min_conf is None else {"min_confidence": min_conf}
    response = _get(seeded, max_input_tokens=300, **params)
    assert response.status_code == 200, response.text
    points = response.json()["curve"]
    frame = replayed(
        _frame(seeded), [128, 512, 2048], BUCKETS, METRICS_TASK["prices"], None, min_conf
    )
    caps = curve_caps(frame)
    # Far more input lengths than points: the caps are thinned, and end at the longest.
    assert len(caps) == len(points) <= MAX_POINTS < frame["input_tokens"].nunique()
    assert [p["max_input_tokens"] for p in points] == caps
    for point in points:
        want = curve_point(frame, point["max_input_tokens"])
        for name, value in want.items():
            _close(point[name], value, f"cap {point['max_input_tokens']}.{name}")
    # The last point is no cap at all (as a replay with no cap); the edge's share grows at
    # every point.
    no_cap = _reference(_frame(seeded), None, min_conf)["all"]
    for name in ("edge_share", "agreement", "cost"):
        _close(points[-1][name], no_cap[name], f"the last point.{name}")
    shares = [p["edge_share"]["num"] for p in points]
    assert shares == sorted(shares) and len(set(shares)) == len(shares)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"max_input_tokens": 0}, "max_input_tokens"),
        ({"max_input_tokens": 2**31}, "max_input_tokens"),
        ({"min_confidence": 1.5}, "min_confidence"),
        ({"min_confidence": -0.1}, "min_confidence"),
        ({"min_confidence": "nan"}, "min_confidence"),
        ({"until": "1700000000"}, "until"),
    ],
)
def test_whatif_refuses_bad_parameters_naming_the_field(
    seeded: Api, params: dict[str, Any], field: str
) -> None:
    response = _get(seeded, **params)
    assert response.status_code == 422, response.text
    assert field in str(response.json()["detail"])


def test_the_period_is_at_most_31_days_and_may_be_empty(seeded: Api) -> None:
    """Any two date-times are a period the document allows: one longer than 31 days is read
    from 31 days before `until` (the answer says so), one that does not run forward is empty."""
    until = T0 + timedelta(seconds=SPAN)
    long = _get(seeded, since=(until - timedelta(days=40)).isoformat())
    assert long.status_code == 200, long.text
    assert long.json()["since"] == (until - timedelta(days=31)).isoformat()
    everything = _get(seeded).json()["buckets"]
    # T0 lies within the 31 days: the same results as the period from T0.
    assert long.json()["buckets"] == everything
    assert [b["n_results"] for b in everything][-1] > 0
    empty = _get(seeded, since=until.isoformat(), until=T0.isoformat())
    assert empty.status_code == 200, empty.text
    assert [b["n_results"] for b in empty.json()["buckets"]] == [0] * len(everything)
    assert empty.json()["curve"] == []


def test_whatif_needs_read_scope_and_a_known_task(seeded: Api) -> None:
    assert _get(seeded, scope="ingest").status_code == 403
    assert seeded.client.get("/v1/tasks/metrics_task/whatif").status_code == 401
    response = seeded.client.get("/v1/tasks/nope/whatif", headers=seeded.headers("read"))
    assert response.status_code == 404 and "task" in response.json()["detail"]
    assert _get(seeded, scope="admin").status_code == 200
