"""The Task page's routing what-if against an independent pandas replay of the same stored
results (the approach of tests/metrics/test_whatif.py, with the seeded task's buckets and
prices): the curve drawn, the table and the text are the replay's, in percent; today is
what the flag does now (the seeded ticket_classify is rolled back: the edge serves none);
the cap and the confidence floor are number inputs."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy import text
from streamlit.testing.v1 import AppTest

from controlplane.catalog.schemas import INT32_MAX
from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.ingest.buckets import bucket_labels
from controlplane.sim.evalset_example import END, START
from shadowplane_dashboard import formats
from shadowplane_dashboard.task import whatif
from shadowplane_dashboard.task.whatif import AGREEMENT_TITLE, COST_TITLE
from tests.dashboard.conftest import Seeded, open_page, page_text
from tests.dashboard.vega import schema_problems
from tests.metrics.test_whatif import _wilson, curve_caps, curve_point, replayed

pytestmark = pytest.mark.integration

TASK = "ticket_classify"
TASK_PAGE = "app_pages/task.py"
CAP, FLOOR = 2047, 0.5
FIRST, LAST = START.date(), (END - dt.timedelta(seconds=1)).date()
SINCE = dt.datetime.combine(FIRST, dt.time(), dt.UTC)
UNTIL = dt.datetime.combine(LAST, dt.time(), dt.UTC) + dt.timedelta(days=1)


def results_frame(seeded: Seeded) -> pd.DataFrame:
    """The task's stored results of the period, read with SQL."""
    with seeded.engine.connect() as conn:
        f = pd.read_sql(
            text(
                "SELECT r.* FROM results r JOIN tasks t ON t.id = r.task_id "
                "WHERE t.name = :task AND r.ts >= :since AND r.ts < :until"
            ),
            conn,
            params={"task": TASK, "since": SINCE, "until": UNTIL},
        )
    for column in ("edge_ran", "cloud_ran", "degraded"):
        f[column] = f[column].astype(bool)
    return f


def replay(
    f: pd.DataFrame,
    boundaries: list[int],
    prices: dict[str, Any],
    cap: int | None,
    min_conf: float | None,
    canary: int | None = None,
) -> dict[str, dict[str, Any]]:
    """The what-if's figures per bucket and `all`, computed in pandas."""
    labels = bucket_labels(boundaries)
    f = replayed(f, boundaries, labels, prices, cap, min_conf, canary)
    out: dict[str, dict[str, Any]] = {}
    for bucket in [*labels, "all"]:
        g = f if bucket == "all" else f[f["bucket"] == bucket]
        served, agree, pairs = int(g["chosen"].sum()), int(g["agree"].sum()), int(g["pair"].sum())
        fails, runs = int(g["fail"].sum()), int(g["run"].sum())
        out[bucket] = {
            "results": len(g),
            "edge served": served,
            "edge share": served / len(g) if len(g) else None,
            "pairs": pairs,
            "agreement": agree / pairs if pairs else None,
            "interval": _wilson(agree, pairs),
            "edge runs": runs,
            "offload failures": fails,
            "offload-failure rate": fails / runs if runs else None,
            "cost": g["cost"].sum(),
            "cloud-only cost": g["baseline"].sum(),
        }
    return out


def set_whatif(
    at: AppTest, cap: int | None, min_conf: float | None, first: dt.date, last: dt.date
) -> None:
    """As a person would: pick the days, type the cap and the floor (empty: none), and
    ask for the replay when the page offers it."""
    at.date_input(key="whatif_from").set_value(first)
    at.date_input(key="whatif_to").set_value(last)
    at.run()
    at.number_input(key="whatif_cap").set_value(cap)
    floors = [n for n in at.number_input if n.key == "whatif_confidence"]
    if floors:
        floors[0].set_value(min_conf)
    at.run()
    assert not at.exception, at.exception
    # A replay runs when asked (a period without results says so, with nothing to ask).
    asked = [b for b in at.button if b.key == "whatif_replay"]
    if asked:
        asked[0].click().run()
        assert not at.exception, at.exception


def charts_on(at: AppTest) -> dict[str, tuple[dict[str, Any], list[pd.DataFrame]]]:
    """The what-if's two charts, by title: each one's spec and each layer's data."""
    out = {}
    for element in at.get("vega_lite_chart"):
        proto: Any = element.proto
        spec = json.loads(proto.spec)
        if spec.get("title") not in (AGREEMENT_TITLE, COST_TITLE):
            continue
        data = {d.name: pa.ipc.open_stream(d.data.data).read_pandas() for d in proto.datasets}
        out[spec.get("title")] = (spec, [data[layer["data"]["name"]] for layer in spec["layer"]])
    return out


def layer(chart: tuple[dict[str, Any], list[pd.DataFrame]], mark: str) -> pd.DataFrame:
    spec, data = chart
    found = [d for lay, d in zip(spec["layer"], data, strict=True) if lay["mark"]["type"] == mark]
    assert len(found) == 1, f"{len(found)} layers of {mark}"
    return found[0]


@pytest.fixture(scope="module")
def page(seeded_once: Seeded) -> Iterator[tuple[AppTest, pd.DataFrame, Any]]:
    """The page replayed once at CAP and FLOOR over the seeded period, the period's stored
    results, and the task's config."""
    at = open_page(seeded_once, "read", TASK_PAGE, task=TASK)
    set_whatif(at, CAP, FLOOR, FIRST, LAST)
    with session_scope(seeded_once.engine) as session:
        config = task_runtimes(session, {TASK})[TASK].config
    frame = results_frame(seeded_once)
    assert len(frame) > 0
    yield at, frame, config


def test_the_cap_and_the_floor_are_number_inputs(page: tuple[AppTest, pd.DataFrame, Any]) -> None:
    at, _, _ = page
    assert not [s for s in at.slider if str(s.key).startswith("whatif")]
    cap, floor = at.number_input(key="whatif_cap"), at.number_input(key="whatif_confidence")
    # Whole tokens, exactly as typed, up to the API's bound (the old slider stopped at 4096).
    assert (cap.value, cap.min, cap.max, cap.step) == (CAP, 1, INT32_MAX, 1)
    assert (floor.value, floor.min, floor.max) == (FLOOR, 0.0, 1.0)
    assert "**Candidate** (cap 2,047 tokens, edge confidence at least 0.5):" in page_text(at)


def test_the_curve_equals_a_pandas_computation(page: tuple[AppTest, pd.DataFrame, Any]) -> None:
    at, frame, config = page
    prices = config.prices.model_dump()
    labels = bucket_labels(config.length_buckets)
    chosen = replayed(frame, config.length_buckets, labels, prices, None, FLOOR)
    caps = curve_caps(chosen)
    # The seeded period has more input lengths than points: thinned, up to the longest.
    assert 1 < len(caps) < chosen.loc[chosen["chosen"], "input_tokens"].nunique()

    charts = charts_on(at)
    agreement = layer(charts[AGREEMENT_TITLE], "line")
    cost = layer(charts[COST_TITLE], "line")
    # The cost curve starts where the edge serves nothing: the cloud-only cost.
    assert (cost["edge_share"].iloc[0], cost["cap"].iloc[0]) == (0.0, "below every input")
    assert cost["cost"].iloc[0] == pytest.approx(chosen["baseline"].sum(), rel=1e-9)
    assert list(cost["cap"].iloc[1:]) == [f"≤ {c:,} tokens" for c in caps]
    wanted = [curve_point(chosen, c) for c in caps]
    for want, got in zip(wanted, cost.iloc[1:].to_dict("records"), strict=True):
        assert got["edge_share"] == pytest.approx(want["edge_share"]["value"], rel=1e-12)
        assert got["cost"] == pytest.approx(want["cost"], rel=1e-9)
    # A point without pairs has no agreement: it is left out of that line, not drawn as 0.
    with_pairs = [
        (c, w["agreement"]) for c, w in zip(caps, wanted, strict=True) if w["agreement"]["den"]
    ]
    assert list(agreement["cap"]) == [f"≤ {c:,} tokens" for c, _ in with_pairs]
    band = layer(charts[AGREEMENT_TITLE], "area")
    for (_, want), got, interval in zip(
        with_pairs, agreement.to_dict("records"), band.to_dict("records"), strict=True
    ):
        assert got["agreement"] == pytest.approx(want["value"], rel=1e-12)
        # The band is the agreement's 95% interval.
        assert interval["agreement_low"] == pytest.approx(want["low"], rel=1e-9)
        assert interval["agreement_high"] == pytest.approx(want["high"], rel=1e-9)


def test_today_is_the_rolled_back_flag_no_edge_at_all(
    page: tuple[AppTest, pd.DataFrame, Any],
) -> None:
    at, frame, config = page
    prices = config.prices.model_dump()
    charts = charts_on(at)
    for title in (AGREEMENT_TITLE, COST_TITLE):
        rules = layer(charts[title], "rule").set_index("setting")
        assert rules.loc["today", "edge_share"] == 0.0
        candidate = replay(frame, config.length_buckets, prices, CAP, FLOOR)["all"]
        assert rules.loc["your setting", "edge_share"] == pytest.approx(candidate["edge share"])
    # No agreement today (nothing served by the edge): no today point on that chart; its
    # cost is the cloud-only cost.
    assert "today" not in set(layer(charts[AGREEMENT_TITLE], "point")["setting"])
    points = layer(charts[COST_TITLE], "point").set_index("setting")
    everything = replay(frame, config.length_buckets, prices, None, None, canary=0)["all"]
    assert points.loc["today", "cost"] == pytest.approx(everything["cloud-only cost"], rel=1e-9)
    shown = page_text(at)
    assert (
        "**Today** (rolled back: every request goes to the cloud): "
        f"edge serves 0 of {len(frame)} (0.0%)"
    ) in "\n".join(m.value for m in at.markdown)
    assert "Today (rolled back: every request goes to the cloud) the edge serves 0.0%." in shown
    table = page_table(at)
    assert set(table.loc[table["setting"] == "today", "edge share"]) == {"0.0%"}


def page_table(at: AppTest) -> pd.DataFrame:
    return next(df.value for df in at.dataframe if "setting" in df.value and "pairs" in df.value)


def test_the_table_and_the_text_are_the_replay_in_percent(
    page: tuple[AppTest, pd.DataFrame, Any],
) -> None:
    at, frame, config = page
    prices = config.prices.model_dump()
    candidate = replay(frame, config.length_buckets, prices, CAP, FLOOR)
    today = replay(frame, config.length_buckets, prices, None, None, canary=0)
    table = page_table(at)
    assert list(table["bucket"].unique()) == [*bucket_labels(config.length_buckets), "all"]
    for row in table.to_dict("records"):
        want = (candidate if row["setting"] == "candidate" else today)[row["bucket"]]
        where = f"{row['bucket']} {row['setting']}"
        for name in ("results", "edge served", "pairs", "offload failures"):
            assert row[name] == want[name], f"{where} {name}"
        for name in ("edge share", "offload-failure rate"):
            assert row[name] == formats.percent(want[name]), f"{where} {name}"
            assert row[name] == "—" or row[name].endswith("%"), f"{where} {name}"
        agreement = formats.estimate(want["agreement"], *want["interval"])
        assert row["agreement (95% interval)"] == agreement, where
        assert row["cost"] == formats.money(want["cost"]), where
        # Rounded past the float noise of two sums of the same costs (no saving is 0).
        savings = round(want["cloud-only cost"] - want["cost"], 12)
        assert row["savings"] == formats.money(savings), where
    # The candidate serves some of the edge's share, and never a raw fraction is shown.
    assert candidate["all"]["edge served"] > 0
    shown = page_text(at)
    assert "0.98" not in table.to_string() and "edge share" in table
    for bucket in (*bucket_labels(config.length_buckets), "all"):
        for figures in (candidate[bucket], today[bucket]):
            assert (
                f"edge serves {figures['edge served']} of {figures['results']} "
                f"({formats.percent(figures['edge share'])})" in shown
            ), bucket


def test_the_charts_draw_no_empty_column_and_one_legend(
    page: tuple[AppTest, pd.DataFrame, Any],
) -> None:
    """What Vega warns about in the browser: a layer's column with no value at all
    (an infinite extent), and layers disagreeing on a legend."""
    charts = charts_on(page[0])
    assert set(charts) == {AGREEMENT_TITLE, COST_TITLE}
    for title, (spec, data) in charts.items():
        for lay, frame in zip(spec["layer"], data, strict=True):
            assert not frame.empty, f"{title}: an empty {lay['mark']['type']} layer"
            empty = [c for c in frame.columns if frame[c].isna().all()]
            assert not empty, f"{title}: {lay['mark']['type']} has all-null {empty}"
        colours = {json.dumps(lay["encoding"]["color"], sort_keys=True) for lay in spec["layer"]}
        assert len(colours) == 1, f"{title}: layers disagree on the colour legend"
        # As Vega-Lite's schema allows (the page no longer validates its charts).
        named = {lay["data"]["name"]: frame for lay, frame in zip(spec["layer"], data, strict=True)}
        assert schema_problems(spec, named) == [], title


def test_a_period_without_results_or_backwards_is_a_sentence(seeded_once: Seeded) -> None:
    at = open_page(seeded_once, "read", TASK_PAGE, task=TASK)
    empty_day = START.date() - dt.timedelta(days=3)
    set_whatif(at, CAP, None, empty_day, empty_day)
    assert any("No results stored from" in i.value for i in at.info)
    assert not any("setting" in df.value for df in at.dataframe)
    # Without results there is no confidence reported, so no floor to set.
    assert not [n for n in at.number_input if n.key == "whatif_confidence"]
    at.date_input(key="whatif_to").set_value(empty_day - dt.timedelta(days=1)).run()
    assert any("The period ends before it starts" in w.value for w in at.warning)


def test_the_whatif_runs_when_asked_and_is_kept_for_its_setting(seeded_once: Seeded) -> None:
    at = open_page(seeded_once, "read", TASK_PAGE, task=TASK)
    at.date_input(key="whatif_from").set_value(FIRST)
    at.date_input(key="whatif_to").set_value(LAST).run()
    at.number_input(key="whatif_cap").set_value(CAP).run()
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
    at.number_input(key="whatif_cap").set_value(600).run()
    assert not any("setting" in df.value for df in at.dataframe)
    assert [b for b in at.button if b.key == "whatif_replay"]
    at.number_input(key="whatif_cap").set_value(CAP).run()
    assert any("setting" in df.value for df in at.dataframe)


def test_the_inputs_start_again_at_another_tasks_own_values() -> None:
    # Streamlit keeps a keyed input's value across reruns: set for one task, it would
    # stay when another is picked, so the page forgets them when the task changes.
    state: dict[str, Any] = {"whatif_task": TASK, "whatif_cap": CAP, "whatif_confidence": FLOOR}
    state |= {"whatif_from": FIRST, "whatif_to": LAST, "task_pick": TASK}
    whatif.start_inputs(state, TASK)
    assert state["whatif_cap"] == CAP and state["whatif_from"] == FIRST
    whatif.start_inputs(state, "invoice_extract")
    assert state == {"whatif_task": "invoice_extract", "task_pick": TASK}
