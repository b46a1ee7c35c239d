"""`shadowplane tick` over simulated traffic fills the windows API with every field (SQLite, no servers)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from controlplane.metrics.fields import FIELDS
from controlplane.sim.profiles import generate
from tests.conftest import Api, make_api
from tests.liveapi import run_cli
from tests.windowdata import LATENESS, T0, WINDOW, post_all

# Fields that are null by definition in these rows: no edge attempt in shadow traffic, and
# net savings exist on `all` only.
NULL_IN_SHADOW = {
    f"{rate}{suffix}"
    for rate in ("offload_fail_rate", "degrade_rate")
    for suffix in ("", "_low", "_high")
}

# Null in a row without repeat pairs (the cloud's self-agreement, and its per-field counts).
NULL_WITHOUT_REPEATS = {
    *(f"self_agreement{suffix}" for suffix in ("", "_low", "_high")),
    "repeat_diffs",
}


def assert_every_field(rows: list[dict[str, Any]]) -> None:
    """Every metric field (docs/evidence.md) present by name; numbers wherever the bucket had
    traffic."""
    assert rows
    for row in rows:
        assert tuple(row) == FIELDS
        if row["n_results"] == 0:
            continue
        for name in FIELDS:
            if name in NULL_IN_SHADOW or (name == "net_savings" and row["bucket"] != "all"):
                assert row[name] is None, (name, row)
            elif name in NULL_WITHOUT_REPEATS and row["n_repeat_pairs"] == 0:
                assert row[name] is None, (name, row)
            elif name == "repeat_diffs":
                continue  # per field or check: a list only json_fields/text_conservation give
            else:
                assert row[name] is not None, (name, row["bucket"], row["window_start"])


def test_tick_command_computes_and_closes_windows_over_simulated_traffic(
    sqlite_url: str, tmp_path: Path
) -> None:
    for api in make_api(sqlite_url):
        post_all(
            api,
            generate(
                "ticket_classify",
                400,
                seed=2,
                now=T0 + timedelta(seconds=2 * WINDOW),
                span_seconds=2 * WINDOW,
            ),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
        env["SHADOWPLANE_DATABASE_URL"] = sqlite_url
        now = T0 + timedelta(seconds=2 * WINDOW + LATENESS + 300)
        # `shadowplane tick` as a process of its own (forked from one that imported the app).
        done = run_cli(["tick", "--now", now.isoformat()], env, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "closed now" in done.stdout
        rows = windows_of(api)
        assert {r["bucket"] for r in rows} == {"0-127", "128-511", "512-2047", "2048+", "all"}
        assert all(r["closed"] for r in rows)
        assert sum(r["n_results"] for r in rows if r["bucket"] == "all") == 400
        assert_every_field(rows)


def windows_of(api: Api) -> list[dict[str, Any]]:
    response = api.client.get(
        "/v1/tasks/ticket_classify/windows",
        params={"since": T0.isoformat(), "until": (T0 + timedelta(hours=1)).isoformat()},
        headers=api.headers("read"),
    )
    assert response.status_code == 200, response.text
    return list(response.json()["windows"])


def test_tick_refuses_a_time_that_is_not_iso(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    done = run_cli(["tick", "--now", "tomorrow"], env, tmp_path)
    assert done.returncode == 1 and "now: 'tomorrow' is not an ISO 8601 time" in done.stderr
