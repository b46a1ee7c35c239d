"""Every metric of every bucket, against a reference computed here with pandas from the posted
JSON alone (outcome, bucket, window and every count derived here, none read back from the
stored rows)."""

from __future__ import annotations

import math
import random
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from controlplane.scheduler import run_pass
from tests.conftest import Api
from tests.windowdata import LATENESS, METRICS_TASK, T0, WINDOW, generated_result, post_all

BUCKETS = ["0-127", "128-511", "512-2047", "2048+"]  # 2048+ stays empty
RATES = {
    "agreement": ("agree", "pair"),
    "conflict_rate": ("conflict", "pair"),
    "edge_error_rate": ("edge_error", "edge_ran"),
    "edge_fail_rate": ("edge_failed", "edge_ran"),
    "offload_fail_rate": ("offload_fail", "attempt"),
    "degrade_rate": ("degraded_attempt", "attempt"),
    "edge_share": ("served_edge", "one"),
}


def _wilson(k: int, n: int) -> tuple[float, float] | tuple[None, None]:
    if n == 0:
        return None, None
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


LABELS = frozenset(METRICS_TASK["comparator"]["labels"])
SIDE_COLUMNS = ("latency_ms", "ttfb_ms", "input_tokens", "output_tokens", "cost")


def _label(value: Any) -> str | None:
    """The label comparator's reading of an output: a non-empty string, case- and
    space-normalised (docs/evidence.md, "Comparators")."""
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split()).casefold()


def _outcome(result: dict[str, Any]) -> str | None:
    """The comparison outcome, written out from the posted JSON: only a pair is compared
    (both sides ran, neither errored, both answered, the edge not `valid: false`); the edge
    label outside `labels` is invalid, the cloud's is a conflict, equal labels agree."""
    edge, cloud = result.get("edge"), result.get("cloud")
    if edge is None or cloud is None:
        return None
    if edge.get("error") is not None or cloud.get("error") is not None:
        return None
    if edge.get("output") is None or cloud.get("output") is None or edge.get("valid") is False:
        return None
    e, c = _label(edge["output"]), _label(cloud["output"])
    if e is None or e not in LABELS:
        return "invalid"
    if c is None or c not in LABELS:
        return "conflict"
    return "agree" if e == c else "conflict"


def _posted(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per posted result, every column read from the JSON as it was posted (none
    from what ingest stored), so a wrong ingest computation shows as a mismatch."""
    rows = []
    for r in results:
        edge, cloud = r.get("edge"), r.get("cloud")
        row: dict[str, Any] = {
            "ts": r["ts"],
            "input_tokens": r["input_tokens"],
            "served": r["served"],
            "degraded": bool(r.get("degraded", False)),
            "outcome": _outcome(r),
            "edge_ran": edge is not None,
            "cloud_ran": cloud is not None,
            "edge_error": edge.get("error") if edge else None,
            "edge_valid": edge.get("valid") if edge else None,
        }
        for name, side in (("edge", edge), ("cloud", cloud)):
            for column in SIDE_COLUMNS:
                value = side.get(column) if side else None
                row[f"{name}_{column}"] = np.nan if value is None else float(value)
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["ts"] = pd.to_datetime(frame["ts"], utc=True, format="ISO8601")
    return frame


def _reference(frame: pd.DataFrame) -> dict[tuple[Any, str], dict[str, Any]]:
    prices = METRICS_TASK["prices"]
    f = frame.copy()
    f["window_start"] = f["ts"].dt.floor(f"{WINDOW}s")
    f["bucket"] = pd.cut(
        f["input_tokens"], [0, 128, 512, 2048, np.inf], right=False, labels=BUCKETS
    ).astype(str)
    f["one"] = True
    f["pair"] = f["outcome"].isin(["agree", "conflict"])
    f["agree"] = f["outcome"] == "agree"
    f["conflict"] = f["outcome"] == "conflict"
    f["edge_error"] = f["edge_ran"] & f["edge_error"].notna()
    f["edge_failed"] = f["edge_ran"] & (
        # only a posted `valid: false` is a failure (true and absent are not)
        f["edge_error"] | f["edge_valid"].map(lambda v: v is False) | (f["outcome"] == "invalid")
    )
    f["attempt"] = (f["served"] == "edge") | f["degraded"]
    f["offload_fail"] = f["attempt"] & f["edge_failed"]
    f["degraded_attempt"] = f["attempt"] & f["degraded"]
    f["served_edge"] = f["served"] == "edge"

    def side_cost(side: str) -> pd.Series:
        tokens_in = f[f"{side}_input_tokens"].fillna(f["input_tokens"])
        tokens_out = f[f"{side}_output_tokens"].fillna(0)
        priced = (tokens_in * prices[side]["in"] + tokens_out * prices[side]["out"]) / 1000
        return f[f"{side}_cost"].fillna(priced).where(f[f"{side}_ran"], 0.0)

    f["edge_cost_row"] = side_cost("edge")
    f["cloud_cost_row"] = side_cost("cloud")
    served_out = f["edge_output_tokens"].where(f["served"] == "edge")
    out_tokens = f["cloud_output_tokens"].fillna(served_out).fillna(0)
    f["baseline_row"] = (
        f["input_tokens"] * prices["cloud"]["in"] + out_tokens * prices["cloud"]["out"]
    ) / 1000

    expected: dict[tuple[Any, str], dict[str, Any]] = {}
    for start, in_window in f.groupby("window_start"):
        for bucket in [*BUCKETS, "all"]:
            g = in_window if bucket == "all" else in_window[in_window["bucket"] == bucket]
            row: dict[str, Any] = {
                "n_results": len(g),
                "n_pairs": int(g["pair"].sum()),
                "n_edge_runs": int(g["edge_ran"].sum()),
                "n_edge_attempts": int(g["attempt"].sum()),
                "n_late": 0,
            }
            for name, (num, den) in RATES.items():
                k, n = int(g[num].sum()), int(g[den].sum())
                low, high = _wilson(k, n)
                row.update(
                    {
                        name: k / n if n else None,
                        f"{name}_num": k,
                        f"{name}_den": n,
                        f"{name}_low": low,
                        f"{name}_high": high,
                    }
                )
            for column, qs in {
                "edge_latency_ms": (50, 95, 99),
                "edge_ttfb_ms": (50, 95, 99),
                "cloud_latency_ms": (50, 95, 99),
                "cloud_ttfb_ms": (50, 95, 99),
                "input_tokens": (50, 95),
            }.items():
                values = g[column].dropna().astype(float)
                for q in qs:
                    row[f"{column}_p{q}"] = values.quantile(q / 100) if len(values) else None
            edge_cost, cloud_cost = g["edge_cost_row"].sum(), g["cloud_cost_row"].sum()
            total, baseline = edge_cost + cloud_cost, g["baseline_row"].sum()
            row.update(
                {
                    "edge_cost": edge_cost,
                    "cloud_cost": cloud_cost,
                    "total_cost": total,
                    "baseline_cost": baseline,
                    "cost_per_1k": total / len(g) * 1000 if len(g) else None,
                    "baseline_cost_per_1k": baseline / len(g) * 1000 if len(g) else None,
                    "savings": baseline - total,
                    "net_savings": (
                        baseline - total - METRICS_TASK["fixed_cost_per_day"] * WINDOW / 86400
                        if bucket == "all"
                        else None
                    ),
                }
            )
            expected[(start.to_pydatetime(), bucket)] = row
    return expected


def _assert_same(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    for name, value in want.items():
        if value is None:
            assert got[name] is None, f"{where} {name}: {got[name]!r}, expected null"
        elif isinstance(value, int | np.integer) and not isinstance(value, bool):
            assert got[name] == value, f"{where} {name}: {got[name]!r} != {value!r}"
        else:
            assert got[name] == pytest.approx(float(value), rel=1e-9, abs=1e-12), (
                f"{where} {name}: {got[name]!r} != {value!r}"
            )


def test_every_metric_of_every_bucket_matches_a_pandas_reference(metrics_api: Api) -> None:
    rng = random.Random(7)
    results = [generated_result(rng, i, T0, 2 * WINDOW) for i in range(1500)]
    # Results with no latency, no tokens and no cost at all, on the edge only.
    results += [
        {
            "request_id": f"bare-{i}",
            "task": "metrics_task",
            "ts": (T0 + timedelta(seconds=5 + i)).isoformat(),
            "input_tokens": 600 + i,
            "decision": "edge",
            "served": "edge",
            "edge": {"output": "refund"},
        }
        for i in range(5)
    ]
    post_all(metrics_api, results)

    report = run_pass(metrics_api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS))
    assert report.failed == []
    response = metrics_api.client.get(
        "/v1/tasks/metrics_task/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()},
        headers=metrics_api.headers("read"),
    )
    assert response.status_code == 200, response.text
    rows = response.json()["windows"]
    expected = _reference(_posted(results))
    assert len(expected) == 2 * 5
    got = {(pd.Timestamp(r["window_start"]).to_pydatetime(), r["bucket"]): r for r in rows}
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key]["closed"] is True
        _assert_same(got[key], want, f"window {key[0]:%H:%M} bucket {key[1]}")
    empty = got[(T0, "2048+")]
    assert empty["n_results"] == 0 and empty["agreement"] is None and empty["agreement_low"] is None
    assert empty["cost_per_1k"] is None and empty["edge_latency_ms_p50"] is None
