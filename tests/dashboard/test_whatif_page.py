"""The task page's routing what-if against an independent pandas replay of the same stored
results (the approach of tests/metrics/test_whatif.py, with the seeded task's buckets and
prices): the numbers in its table and in its text are the replay's."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import text
from streamlit.testing.v1 import AppTest

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.ingest.buckets import bucket_labels
from controlplane.sim.evalset_example import END, START
from tests.dashboard.conftest import Seeded, open_page, page_text
from tests.metrics.test_whatif import _wilson, replayed

pytestmark = pytest.mark.integration

TASK = "ticket_classify"
TASK_PAGE = "app_pages/task.py"


def results_frame(seeded: Seeded, since: dt.datetime, until: dt.datetime) -> pd.DataFrame:
    with seeded.engine.connect() as conn:
        f = pd.read_sql(
            text("SELECT r.* FROM results r JOIN tasks t ON t.id = r.task_id WHERE t.name = :task"),
            conn,
            params={"task": TASK},
        )
    f["ts"] = pd.to_datetime(f["ts"], utc=True)
    for column in ("edge_ran", "cloud_ran", "degraded"):
        f[column] = f[column].astype(bool)
    return f[(f["ts"] >= pd.Timestamp(since)) & (f["ts"] < pd.Timestamp(until))].copy()


def replay(
    f: pd.DataFrame,
    boundaries: list[int],
    prices: dict[str, Any],
    cap: int | None,
    min_conf: float | None,
) -> dict[str, dict[str, Any]]:
    """The what-if's figures per bucket and `all`, computed in pandas."""
    labels = bucket_labels(boundaries)
    f = replayed(f, boundaries, labels, prices, cap, min_conf)
    out: dict[str, dict[str, Any]] = {}
    for bucket in [*labels, "all"]:
        g = f if bucket == "all" else f[f["bucket"] == bucket]
        row: dict[str, Any] = {"results": len(g), "cloud-only cost": g["baseline"].sum()}
        row["edge served"] = int(g["chosen"].sum())
        row["edge share"] = row["edge served"] / len(g) if len(g) else None
        agree, pairs = int(g["agree"].sum()), int(g["pair"].sum())
        low, high = _wilson(agree, pairs)
        row.update(
            {
                "pairs": pairs,
                "agreement": agree / pairs if pairs else None,
                "agreement low": low,
                "agreement high": high,
            }
        )
        fails, runs = int(g["fail"].sum()), int(g["run"].sum())
        row.update(
            {
                "edge runs": runs,
                "offload failures": fails,
                "offload-failure rate": fails / runs if runs else None,
            }
        )
        row["cost"] = g["cost"].sum()
        row["savings"] = row["cloud-only cost"] - row["cost"]
        out[bucket] = row
    return out


def set_whatif(
    at: AppTest, cap: int | None, min_conf: float | None, first: dt.date, last: dt.date
) -> None:
    """As a person would: tick the boxes first (a slider is disabled while its box says
    no cap / no minimum), then move the sliders and pick the days."""
    at.checkbox(key="whatif_no_cap").set_value(cap is None)
    at.checkbox(key="whatif_use_confidence").set_value(min_conf is not None)
    at.run()
    if cap is not None:
        at.slider(key="whatif_cap").set_value(cap)
    if min_conf is not None:
        at.slider(key="whatif_confidence").set_value(min_conf)
    at.date_input(key="whatif_from").set_value(first)
    at.date_input(key="whatif_to").set_value(last)
    at.run()
    assert not at.exception, at.exception
    # A replay runs when asked (a period without results says so, with nothing to ask).
    replay = [b for b in at.button if b.key == "whatif_replay"]
    if replay:
        replay[0].click().run()
        assert not at.exception, at.exception


def page_table(at: AppTest) -> pd.DataFrame:
    return next(df.value for df in at.dataframe if "setting" in df.value and "pairs" in df.value)


def same(got: Any, want: Any, where: str) -> None:
    if want is None or (isinstance(got, float) and np.isnan(got)):
        assert want is None and (got is None or np.isnan(got)), f"{where}: {got!r} != {want!r}"
    elif isinstance(want, int):
        assert int(got) == want, f"{where}: {got!r} != {want!r}"
    else:
        assert float(got) == pytest.approx(float(want), rel=1e-9, abs=1e-12), where


@pytest.mark.parametrize(("cap", "min_conf"), [(2047, 0.5), (None, None), (600, 0.9)])
def test_whatif_numbers_equal_a_pandas_replay(
    seeded: Seeded, cap: int | None, min_conf: float | None
) -> None:
    at = open_page(seeded, "read", TASK_PAGE, task=TASK)
    first, last = START.date(), (END - dt.timedelta(seconds=1)).date()
    set_whatif(at, cap, min_conf, first, last)

    with session_scope(seeded.engine) as session:
        config = task_runtimes(session, {TASK})[TASK].config
    since = dt.datetime.combine(first, dt.time(), dt.UTC)
    until = dt.datetime.combine(last, dt.time(), dt.UTC) + dt.timedelta(days=1)
    frame = results_frame(seeded, since, until)
    prices = config.prices.model_dump()
    candidate = replay(frame, config.length_buckets, prices, cap, min_conf)
    today = replay(frame, config.length_buckets, prices, config.max_input_tokens, None)
    assert candidate["all"]["results"] == len(frame) > 0

    table = page_table(at)
    assert list(table["bucket"].unique()) == [*bucket_labels(config.length_buckets), "all"]
    for row in table.to_dict("records"):
        want = (candidate if row["setting"] == "candidate" else today)[row["bucket"]]
        for name, value in want.items():
            same(row[name], value, f"{row['bucket']} {row['setting']} {name}")

    # The key numbers are written as text too, beside today's setting.
    text = page_text(at)
    for bucket in (*bucket_labels(config.length_buckets), "all"):
        for figures in (candidate[bucket], today[bucket]):
            assert f"edge serves {figures['edge served']} of {figures['results']}" in text, bucket
            assert (
                f"offload failures {figures['offload failures']} of {figures['edge runs']} "
                "edge runs" in text
            ), bucket
    # The candidate differs from today's setting where it should (so the check can fail).
    if cap is not None:
        assert candidate["all"]["edge served"] < today["all"]["edge served"]


def test_a_period_without_results_says_so(seeded: Seeded) -> None:
    at = open_page(seeded, "read", TASK_PAGE, task=TASK)
    empty_day = START.date() - dt.timedelta(days=3)
    set_whatif(at, 2047, None, empty_day, empty_day)
    assert any("No results stored from" in i.value for i in at.info)
    assert not any("setting" in df.value for df in at.dataframe)


def test_a_period_ending_before_it_starts_is_a_sentence(seeded: Seeded) -> None:
    at = open_page(seeded, "read", TASK_PAGE, task=TASK)
    day = START.date()
    set_whatif(at, 2047, None, day, day - dt.timedelta(days=1))
    assert any("The period ends before it starts" in w.value for w in at.warning)


def test_the_whatif_runs_when_asked_and_is_kept_for_its_setting(seeded: Seeded) -> None:
    at = open_page(seeded, "read", TASK_PAGE, task=TASK)
    day = START.date()
    at.checkbox(key="whatif_no_cap").set_value(False)
    at.run()
    at.slider(key="whatif_cap").set_value(2047)
    at.date_input(key="whatif_from").set_value(day)
    at.date_input(key="whatif_to").set_value((END - dt.timedelta(seconds=1)).date())
    at.run()
    # Nothing replayed yet: a button asks for it.
    assert not any("setting" in df.value for df in at.dataframe)
    at.button(key="whatif_replay").click().run()
    assert not at.exception, at.exception
    assert any("setting" in df.value for df in at.dataframe)
    # Kept while the setting stays (another control on the page moved)...
    at.selectbox(key="detail_bucket").set_value("all").run()
    assert any("setting" in df.value for df in at.dataframe)
    assert not [b for b in at.button if b.key == "whatif_replay"]
    # ...asked again once it changes, and kept for the first when it comes back.
    at.slider(key="whatif_cap").set_value(600).run()
    assert not any("setting" in df.value for df in at.dataframe)
    assert [b for b in at.button if b.key == "whatif_replay"]
    at.slider(key="whatif_cap").set_value(2047).run()
    assert any("setting" in df.value for df in at.dataframe)
