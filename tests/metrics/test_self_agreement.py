"""The cloud's noise floor in windows, end to end on SQLite and PostgreSQL: results posted
with `cloud_repeat` answers, windows computed by the pass, and `self_agreement` (value,
numerator, denominator, Wilson bounds), `n_repeat_pairs` and, for a `json_fields` task,
`repeat_diffs` of every bucket and `all` checked against a pandas reference computed here
from the posted JSON alone (each repeat pair's outcome and differing fields written out
below, none read back from what ingest stored). Twin tasks get the same results without
their repeats: every other field is the same, the edge pairs (`n_pairs`, `agreement`)
included, and `cloud_cost` differs by exactly the repeats' cost.

The results carry no `input`, so no free repeat pair (an earlier answer to the same input)
can enter the figures: every repeat pair here is an asked one.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections import Counter
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from controlplane.db import session_scope
from controlplane.metrics.fields import FIELDS
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api
from tests.windowdata import LATENESS, METRICS_TASK, T0, WINDOW, generated_result, post_all

BUCKETS = ["0-127", "128-511", "512-2047", "2048+"]  # 2048+ stays empty
LABELS = frozenset(METRICS_TASK["comparator"]["labels"])
CLOUD_PRICES = METRICS_TASK["prices"]["cloud"]
JSON_FIELDS = {"amount": "number", "currency": "string", "invoice_id": "string"}
JSON_REQUIRED = ("amount", "currency")
JSON_TASK: dict[str, Any] = {
    **{k: v for k, v in METRICS_TASK.items() if k != "comparator"},
    "task": "repeat_invoices",
    "comparator": {"kind": "json_fields", "fields": JSON_FIELDS, "required": list(JSON_REQUIRED)},
}
# What repeats change: the reference computes everything else from these.
REPEAT_FIELDS = {
    "self_agreement",
    "self_agreement_num",
    "self_agreement_den",
    "self_agreement_low",
    "self_agreement_high",
    "n_repeat_pairs",
    "repeat_diffs",
}
# Cost fields that follow cloud_cost.
COST_FOLLOWERS = {"cloud_cost", "total_cost", "cost_per_1k", "savings", "net_savings"}


def _wilson(k: int, n: int) -> tuple[float, float] | tuple[None, None]:
    if n == 0:
        return None, None
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def _answered(side: dict[str, Any] | None) -> bool:
    return side is not None and side.get("error") is None and side.get("output") is not None


def _label(value: Any) -> str | None:
    """The label comparator's reading: a non-empty string, case- and space-normalised."""
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split()).casefold()


def _label_repeat(cloud: Any, repeat: Any) -> tuple[str, list[str]]:
    """A repeat pair of the label task: invalid when either answer is not one of the
    labels, else agree on equal labels."""
    c, r = _label(cloud), _label(repeat)
    if c not in LABELS or r not in LABELS:
        return "invalid", []
    return ("agree" if c == r else "conflict"), []


def _object(value: Any) -> dict[str, Any] | None:
    """A JSON object, or JSON text holding one, inside the task's schema; else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    if any(value.get(name) is None for name in JSON_REQUIRED):
        return None
    for name, kind in JSON_FIELDS.items():
        v = value.get(name)
        if v is None:
            continue
        if kind == "string" and not isinstance(v, str):
            return None
        if kind == "number" and (isinstance(v, bool) or not isinstance(v, int | float)):
            return None
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return " ".join(a.split()) == " ".join(b.split())
    if isinstance(a, str) or isinstance(b, str):
        return False
    return bool(a == b)  # numbers (12 equals 12.0) or both absent


def _json_repeat(cloud: Any, repeat: Any) -> tuple[str, list[str]]:
    """A repeat pair of the json_fields task: invalid when either answer is outside the
    schema, else the fields whose values differ (strings compared space-normalised)."""
    c, r = _object(cloud), _object(repeat)
    if c is None or r is None:
        return "invalid", []
    names = sorted(name for name in JSON_FIELDS if not _same(c.get(name), r.get(name)))
    return ("conflict" if names else "agree"), names


def _repeat_cost(result: dict[str, Any]) -> float:
    """What the repeat cost: its reported cost, else its tokens at the cloud prices."""
    repeat = result.get("cloud_repeat")
    if repeat is None:
        return 0.0
    if repeat.get("cost") is not None:
        return float(repeat["cost"])
    tokens_in = repeat.get("input_tokens")
    tokens_in = result["input_tokens"] if tokens_in is None else tokens_in
    tokens_out = repeat.get("output_tokens") or 0
    return (tokens_in * CLOUD_PRICES["in"] + tokens_out * CLOUD_PRICES["out"]) / 1000


def _posted(results: list[dict[str, Any]], pair: Any) -> pd.DataFrame:
    """One row per posted result: its window, bucket, repeat outcome, differing fields and
    repeat cost, from the JSON as posted."""
    rows = []
    for r in results:
        cloud, repeat = r.get("cloud"), r.get("cloud_repeat")
        outcome, diff = None, None
        if repeat is not None and _answered(cloud) and _answered(repeat):
            assert cloud is not None and repeat is not None
            outcome, diff = pair(cloud["output"], repeat["output"])
        rows.append(
            {
                "ts": r["ts"],
                "input_tokens": r["input_tokens"],
                "repeat_outcome": outcome,
                "repeat_diff": diff,
                "repeat_cost": _repeat_cost(r),
            }
        )
    frame = pd.DataFrame(rows)
    frame["ts"] = pd.to_datetime(frame["ts"], utc=True, format="ISO8601")
    frame["window_start"] = frame["ts"].dt.floor(f"{WINDOW}s")
    frame["bucket"] = pd.cut(
        frame["input_tokens"], [0, 128, 512, 2048, np.inf], right=False, labels=BUCKETS
    ).astype(str)
    return frame


def _reference(frame: pd.DataFrame) -> dict[tuple[Any, str], dict[str, Any]]:
    expected = {}
    for start, in_window in frame.groupby("window_start"):
        for bucket in [*BUCKETS, "all"]:
            g = in_window if bucket == "all" else in_window[in_window["bucket"] == bucket]
            pairs = g[g["repeat_outcome"].notna()]
            n, k = len(pairs), int((pairs["repeat_outcome"] == "agree").sum())
            low, high = _wilson(k, n)
            diffs: Counter[str] = Counter()
            for names in pairs["repeat_diff"]:
                diffs.update(names)
            expected[(start.to_pydatetime(), bucket)] = {
                "n_repeat_pairs": n,
                "self_agreement": k / n if n else None,
                "self_agreement_num": k,
                "self_agreement_den": n,
                "self_agreement_low": low,
                "self_agreement_high": high,
                "repeat_diffs": dict(diffs) if n else None,
                "repeat_cost": float(g["repeat_cost"].sum()),
            }
    return expected


def _label_repeat_side(rng: random.Random, cloud: dict[str, Any]) -> dict[str, Any]:
    """A second cloud answer to a label result: mostly the same label (sometimes spelled
    differently), sometimes another, one outside the labels, or an error."""
    shape = rng.random()
    if shape < 0.05:
        side: dict[str, Any] = {"error": "timeout", "output": None}
    elif shape < 0.6:
        side = {"output": cloud["output"]}
    elif shape < 0.7:
        side = {"output": f"  {str(cloud['output']).upper()} "}
    elif shape < 0.92:
        side = {"output": rng.choice(sorted(LABELS))}
    else:
        side = {"output": "unsure"}
    _tokens_and_cost(rng, side)
    return {**side, "model": "large@7"}


def _tokens_and_cost(rng: random.Random, side: dict[str, Any]) -> None:
    if rng.random() < 0.5:
        side["input_tokens"] = rng.randrange(1, 3000)
    if rng.random() < 0.5:
        side["output_tokens"] = rng.randrange(1, 40)
    if rng.random() < 0.3:
        side["cost"] = round(rng.uniform(0, 0.01), 6)
    if rng.random() < 0.8:
        side["latency_ms"] = round(rng.uniform(200, 900), 1)


def _with_label_repeats(rng: random.Random, n: int) -> list[dict[str, Any]]:
    results = []
    for i in range(n):
        result = generated_result(rng, i, T0, 2 * WINDOW)
        if result["cloud"] is not None and rng.random() < 0.35:
            result["cloud_repeat"] = _label_repeat_side(rng, result["cloud"])
        results.append(result)
    return results


def _invoice(rng: random.Random) -> dict[str, Any]:
    amount: float = rng.choice([rng.randrange(5, 500), round(rng.uniform(5, 500), 2)])
    return {
        "amount": amount,
        "currency": rng.choice(["EUR", "USD", "GBP"]),
        "invoice_id": f"INV-{rng.randrange(10_000)}",
    }


def _json_repeat_side(rng: random.Random, cloud: dict[str, Any]) -> dict[str, Any]:
    """A second answer to an invoice: each field kept, respelled the same (an integral
    amount as a float, the currency padded with spaces) or changed; invoice_id the noisiest;
    some answers outside the schema, some errors, some sent as JSON text."""
    original = json.loads(cloud["output"]) if isinstance(cloud["output"], str) else cloud["output"]
    out = dict(original)
    shape = rng.random()
    if shape < 0.04:
        side: dict[str, Any] = {"error": "timeout", "output": None}
        _tokens_and_cost(rng, side)
        return side
    if shape < 0.09:
        out.pop("currency")  # a required field missing: invalid
    elif shape < 0.12:
        out["amount"] = str(out["amount"])  # wrong type: invalid
    else:
        if rng.random() < 0.1:
            out["amount"] = round(float(out["amount"]) + rng.uniform(1, 9), 2)
        elif float(out["amount"]).is_integer() and rng.random() < 0.5:
            out["amount"] = float(out["amount"])
        if rng.random() < 0.04:
            out["currency"] = "CHF" if out["currency"] != "CHF" else "EUR"
        elif rng.random() < 0.3:
            out["currency"] = f" {out['currency']}  "
        if rng.random() < 0.3:
            out["invoice_id"] = f"INV-{rng.randrange(10_000)}"
        elif rng.random() < 0.1:
            out.pop("invoice_id")  # optional: absent differs from present
    side = {"output": json.dumps(out) if rng.random() < 0.2 else out, "model": "large@7"}
    _tokens_and_cost(rng, side)
    return side


def _with_json_repeats(rng: random.Random, n: int) -> list[dict[str, Any]]:
    results = []
    for i in range(n):
        tokens = rng.choice(
            [rng.randrange(1, 128), rng.randrange(128, 512), rng.randrange(512, 2048)]
        )
        truth = _invoice(rng)
        edge = {"output": {**truth, "invoice_id": "x"} if rng.random() < 0.3 else truth}
        cloud: dict[str, Any] = {
            "output": json.dumps(truth) if rng.random() < 0.2 else truth,
            "model": "large@7",
        }
        if rng.random() < 0.03:
            cloud = {"error": "timeout", "output": None}
        result: dict[str, Any] = {
            "request_id": f"inv-{i}",
            "task": JSON_TASK["task"],
            "ts": (T0 + timedelta(seconds=rng.uniform(0, 2 * WINDOW))).isoformat(),
            "input_tokens": tokens,
            "decision": "edge",
            "served": "cloud",
            "edge": edge,
            "cloud": cloud,
        }
        if rng.random() < 0.4:
            result["cloud_repeat"] = _json_repeat_side(
                rng, cloud if _answered(cloud) else result["edge"]
            )
        results.append(result)
    return results


def _twin(results: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    """The same results, for task `task`, without their repeats."""
    return [{**{k: v for k, v in r.items() if k != "cloud_repeat"}, "task": task} for r in results]


def _windows(api: Api, task: str) -> dict[tuple[Any, str], dict[str, Any]]:
    response = api.client.get(
        f"/v1/tasks/{task}/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()},
        headers=api.headers("read"),
    )
    assert response.status_code == 200, response.text
    return {
        (pd.Timestamp(r["window_start"]).to_pydatetime(), r["bucket"]): r
        for r in response.json()["windows"]
    }


def _assert_close(got: Any, want: Any, where: str) -> None:
    if want is None:
        assert got is None, f"{where}: {got!r}, expected null"
    elif isinstance(want, dict):
        assert got == want, f"{where}: {got!r} != {want!r}"
    elif isinstance(want, int | np.integer):
        assert got == want, f"{where}: {got!r} != {want!r}"
    else:
        assert got == pytest.approx(float(want), rel=1e-9, abs=1e-12), (
            f"{where}: {got!r} != {want!r}"
        )


def _check(api: Api, task: str, twin: str, posted: list[dict[str, Any]], pair: Any) -> None:
    expected = _reference(_posted(posted, pair))
    got, without = _windows(api, task), _windows(api, twin)
    assert set(got) == set(expected) == set(without) and len(expected) == 2 * 5
    for key, want in expected.items():
        where = f"{task} window {key[0]:%H:%M} bucket {key[1]}"
        row = got[key]
        assert row["closed"] is True, where
        for name in REPEAT_FIELDS:
            _assert_close(row[name], want[name], f"{where} {name}")
        # The repeats change nothing else: not the edge pairs, not any other count or rate.
        bare = without[key]
        assert bare["n_repeat_pairs"] == 0 and bare["self_agreement"] is None, where
        assert bare["repeat_diffs"] is None, where
        for name in FIELDS:
            if name in REPEAT_FIELDS | COST_FOLLOWERS | {"window_start", "window_end"}:
                continue
            if isinstance(bare[name], float):  # sums, in whatever order the database adds
                _assert_close(row[name], bare[name], f"{where} {name}")
            else:
                assert row[name] == bare[name], f"{where} {name}: {row[name]!r} != {bare[name]!r}"
        # ... but the cloud's cost: a repeat is a paid cloud call.
        _assert_close(
            row["cloud_cost"] - bare["cloud_cost"], want["repeat_cost"], f"{where} cloud_cost"
        )
        _assert_close(row["savings"], bare["savings"] - want["repeat_cost"], f"{where} savings")
    # The mix reaches every figure: agreement, conflicts and invalid answers in each window.
    for (_, bucket), want in expected.items():
        if bucket == "all":
            assert 0 < want["self_agreement_num"] < want["n_repeat_pairs"], want


@pytest.fixture
def repeat_api(metrics_api: Api) -> Api:
    with session_scope(metrics_api.engine) as session:
        apply_config(session, {**METRICS_TASK, "task": "metrics_twin"}, actor="test")
        apply_config(session, JSON_TASK, actor="test")
        apply_config(session, {**JSON_TASK, "task": "repeat_invoices_twin"}, actor="test")
    return metrics_api


def test_self_agreement_and_repeat_diffs_match_a_pandas_reference(repeat_api: Api) -> None:
    rng = random.Random(11)
    labels = _with_label_repeats(rng, 1200)
    invoices = _with_json_repeats(rng, 1200)
    assert sum("cloud_repeat" in r for r in labels) > 300
    post_all(repeat_api, labels)
    post_all(repeat_api, _twin(labels, "metrics_twin"))
    post_all(repeat_api, invoices)
    post_all(repeat_api, _twin(invoices, "repeat_invoices_twin"))

    report = run_pass(repeat_api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS))
    assert report.failed == []

    _check(repeat_api, "metrics_task", "metrics_twin", labels, _label_repeat)
    _check(repeat_api, JSON_TASK["task"], "repeat_invoices_twin", invoices, _json_repeat)
    # The invoice task's noisiest field is the one the repeats change most.
    reference = _reference(_posted(invoices, _json_repeat))
    every = [v["repeat_diffs"] for (_, b), v in reference.items() if b == "all"]
    assert all(d and max(d, key=d.__getitem__) == "invoice_id" for d in every), every


def test_csv_and_prometheus_give_self_agreement_like_every_rate(repeat_api: Api) -> None:
    rng = random.Random(5)
    labels = _with_label_repeats(rng, 400)
    invoices = _with_json_repeats(rng, 400)
    post_all(repeat_api, labels)
    post_all(repeat_api, invoices)
    assert run_pass(repeat_api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS)).failed == []

    task = JSON_TASK["task"]
    rows = _windows(repeat_api, task)
    response = repeat_api.client.get(
        f"/v1/tasks/{task}/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()},
        headers={**repeat_api.headers("read"), "Accept": "text/csv"},
    )
    assert response.status_code == 200
    table = list(csv.DictReader(io.StringIO(response.text)))
    assert tuple(table[0]) == FIELDS and len(table) == len(rows)
    for line in table:
        want = rows[(pd.Timestamp(line["window_start"]).to_pydatetime(), line["bucket"])]
        for name in ("self_agreement", "self_agreement_low", "self_agreement_high"):
            assert (line[name] == "") == (want[name] is None)
            if want[name] is not None:
                assert float(line[name]) == want[name]
        assert int(line["n_repeat_pairs"]) == want["n_repeat_pairs"]
        assert int(line["self_agreement_num"]) == want["self_agreement_num"]
        cell = line["repeat_diffs"]
        assert (json.loads(cell) if cell else None) == want["repeat_diffs"]
        assert float(line["input_tokens_sum"]) == want["input_tokens_sum"]

    # /metrics: the latest closed window (the second), its `all` row, as every rate.
    latest = max(start for start, _ in rows)
    want = rows[(latest, "all")]
    assert want["self_agreement"] is not None
    text = repeat_api.client.get("/metrics", headers=repeat_api.headers("read")).text
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    labels_of = f'{{bucket="all",task="{task}"}}'
    for name in (
        "self_agreement",
        "self_agreement_num",
        "self_agreement_den",
        "self_agreement_low",
        "self_agreement_high",
        "n_repeat_pairs",
    ):
        assert samples[f"shadowplane_window_{name}{labels_of}"] == pytest.approx(want[name]), name


def test_input_tokens_sum_is_the_sum_of_posted_input_tokens(repeat_api: Api) -> None:
    rng = random.Random(3)
    invoices = _with_json_repeats(rng, 300)
    post_all(repeat_api, invoices)
    assert run_pass(repeat_api.engine, T0 + timedelta(seconds=2 * WINDOW + LATENESS)).failed == []
    frame = _posted(invoices, _json_repeat)
    rows = _windows(repeat_api, JSON_TASK["task"])
    for (start, bucket), row in rows.items():
        in_window = frame[frame["window_start"] == pd.Timestamp(start)]
        g = in_window if bucket == "all" else in_window[in_window["bucket"] == bucket]
        assert row["input_tokens_sum"] == pytest.approx(float(g["input_tokens"].sum()))
        assert row["n_results"] == len(g)
