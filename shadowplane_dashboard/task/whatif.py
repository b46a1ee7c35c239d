"""The Task page's routing what-if as data: the period asked for, the replays kept per
setting, a replay's figures in sentences and table rows (percentages, as everywhere on the
page), what today's flag does in words, and the cost–quality curve of the cap as charts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, MutableMapping
from typing import Any

import altair as alt
import pandas as pd

from shadowplane_dashboard import charts
from shadowplane_dashboard.formats import (
    axis_format,
    count,
    estimate,
    moment,
    money,
    number,
    percent,
    tooltip_format,
)

# The what-if replays at most this long a period (as GET /v1/tasks/{task}/whatif).
MAX_DAYS = 31
# The replays kept in the session (one per setting asked for), newest last.
KEPT = 5

Setting = tuple[str, dt.datetime, dt.datetime, int | None, float | None]
# The inputs' keys: they start at the shown task's own values (its newest day, its cap of
# today, no floor), and again when another task is shown.
INPUTS = ("whatif_from", "whatif_to", "whatif_cap", "whatif_confidence")
INPUTS_TASK = "whatif_task"


def default_day(span: tuple[dt.datetime, dt.datetime] | None, now: dt.datetime) -> dt.date:
    """The UTC day of the newest window (the day `now` without one)."""
    return (span[1] - dt.timedelta(seconds=1)).date() if span else now.date()


def start_inputs(state: MutableMapping[Any, Any], task: str) -> None:
    """Forget the inputs' values when `task` is not the one they were set for (another
    task was picked on the same page), so they start at this task's own; then remember
    `task`."""
    if state.get(INPUTS_TASK) != task:
        for key in INPUTS:
            state.pop(key, None)
    state[INPUTS_TASK] = task


def period(first_day: dt.date, last_day: dt.date) -> tuple[dt.datetime, dt.datetime, str | None]:
    """The replayed period from the first UTC day to the end of the last, and why it cannot
    be replayed (None when it can)."""
    since = dt.datetime.combine(first_day, dt.time(), dt.UTC)
    until = dt.datetime.combine(last_day, dt.time(), dt.UTC) + dt.timedelta(days=1)
    if until <= since:
        return (
            since,
            until,
            "The period ends before it starts: pick a 'To' day on or after the 'From' day.",
        )
    if until - since > dt.timedelta(days=MAX_DAYS):
        return since, until, f"The what-if replays at most {MAX_DAYS} days; pick a shorter period."
    return since, until, None


def keep(kept: dict[Any, Any], setting: Setting, replay: dict[str, Any]) -> None:
    """Keep `replay` for its setting, dropping the oldest beyond KEPT."""
    kept[setting] = replay
    for old in list(kept)[:-KEPT]:
        del kept[old]


def no_results(since: dt.datetime, until: dt.datetime) -> str:
    return (
        f"No results stored from {moment(since)} to {moment(until)}: pick a period with "
        "traffic (the evidence above shows when there was some)."
    )


def total(replay: Mapping[str, Any]) -> dict[str, Any] | None:
    """The replay's row over every bucket, None when it holds no result."""
    found = next((r for r in replay["buckets"] if r["bucket"] == "all"), None)
    return None if found is None or found["n_results"] == 0 else found


def _cap_words(cap: int | None) -> str:
    return f"cap {count(cap)} tokens" if cap is not None else "no cap"


def setting_words(setting: Mapping[str, Any]) -> str:
    minimum = setting["min_confidence"]
    return _cap_words(setting["max_input_tokens"]) + (
        f", edge confidence at least {number(minimum)}" if minimum is not None else ""
    )


def today_words(today: Mapping[str, Any]) -> str:
    """What the task's flag does now, in words: the what-if's "today"."""
    stage, share = today.get("stage"), today.get("edge_percent", 0)
    if today.get("killed"):
        return "kill switch on: every request goes to the cloud"
    if stage is None:
        return "no flag: every request goes to the cloud"
    if stage == "shadow":
        return "in shadow: the cloud serves every request, the edge only runs beside it"
    if stage in ("canary", "full") and share:
        return (
            f"{stage}: the edge serves {percent(share / 100)} of the requests the router "
            f"finds eligible, {_cap_words(today['max_input_tokens'])}"
        )
    said = "rolled back" if stage == "rolled_back" else stage
    return f"{said}: every request goes to the cloud"


def figures(row: Mapping[str, Any], setting: str) -> str:
    """A bucket's figures under one setting ("candidate" or "current") in a sentence."""
    f = row[setting]
    share, agreement, fails = f["edge_share"], f["agreement"], f["offload_fail_rate"]
    return (
        f"edge serves {share['num']} of {row['n_results']} ({percent(share['value'])}); "
        f"agreement {estimate(agreement['value'], agreement['low'], agreement['high'])} over "
        f"{agreement['den']} pairs; offload failures {fails['num']} of {fails['den']} edge "
        f"runs ({percent(fails['value'])}); cost {money(f['cost'])} against "
        f"{money(row['baseline_cost'])} cloud-only (saves {money(f['savings'])})"
    )


def summary(replay: Mapping[str, Any], since: dt.datetime, until: dt.datetime) -> str:
    everything = total(replay)
    assert everything is not None, "a replay without results has no summary"
    return (
        f"From {moment(since)} to {moment(until)}, {everything['n_results']} results.  \n"
        f"**Candidate** ({setting_words(replay['candidate'])}): "
        f"{figures(everything, 'candidate')}.  \n"
        f"**Today** ({today_words(replay['current'])}): {figures(everything, 'current')}."
    )


def rows(replay: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The table: per bucket, the candidate's figures and today's, rates in percent (the
    edge runs and the cloud-only cost are in the sentences)."""
    table = []
    for row in replay["buckets"]:
        for setting, label in (("candidate", "candidate"), ("current", "today")):
            f = row[setting]
            agreement, fails = f["agreement"], f["offload_fail_rate"]
            table.append(
                {
                    "bucket": row["bucket"],
                    "setting": label,
                    "results": row["n_results"],
                    "edge served": f["edge_share"]["num"],
                    "edge share": percent(f["edge_share"]["value"]),
                    "pairs": agreement["den"],
                    "agreement (95% interval)": estimate(
                        agreement["value"], agreement["low"], agreement["high"]
                    ),
                    "offload failures": fails["num"],
                    "offload-failure rate": percent(fails["value"]),
                    "cost": money(f["cost"]),
                    "savings": money(f["savings"]),
                }
            )
    return table


def bucket_lines(replay: Mapping[str, Any]) -> str:
    return "\n".join(
        f"- {row['bucket']}, candidate: {figures(row, 'candidate')}; "
        f"today: {figures(row, 'current')}"
        for row in replay["buckets"]
        if row["bucket"] != "all"
    )


# --- the cost–quality curve ------------------------------------------------------------

SERIES = "setting"
CURVE, CANDIDATE, TODAY = "cap moving", "your setting", "today"
# Fixed colours for every layer and both charts, so each legend is the same three entries.
COLOURS = alt.Scale(domain=[CURVE, CANDIDATE, TODAY], range=["#4c78a8", "#2ca02c", "#d62728"])
AGREEMENT_TITLE = "Agreement as the cap moves"
COST_TITLE = "Cost as the cap moves"


def _point(setting: str, cap: str, figures: Mapping[str, Any]) -> dict[str, Any]:
    agreement = figures["agreement"]
    return {
        SERIES: setting,
        "cap": cap,
        "edge_share": figures["edge_share"]["value"],
        "agreement": agreement["value"],
        "agreement_low": agreement["low"],
        "agreement_high": agreement["high"],
        "cost": figures["cost"],
    }


def curve_frame(replay: Mapping[str, Any]) -> pd.DataFrame:
    """The curve's points, then the candidate's and today's figures over the period, one
    row each: `setting`, `cap` (in words), `edge_share`, `agreement` with its interval,
    `cost`. A figure without data is missing (NaN), never zero."""
    everything = total(replay)
    assert everything is not None, "a replay without results has no curve"
    # The curve starts where the edge serves nothing: every result at its cloud-only cost.
    origin = {SERIES: CURVE, "cap": "below every input", "edge_share": 0.0}
    origin["cost"] = everything["baseline_cost"]
    points = [origin] + [
        _point(CURVE, f"≤ {count(p['max_input_tokens'])} tokens", p) for p in replay["curve"]
    ]
    markers = [
        _point(
            CANDIDATE, _cap_words(replay["candidate"]["max_input_tokens"]), everything["candidate"]
        ),
        _point(TODAY, today_words(replay["current"]), everything["current"]),
    ]
    return pd.DataFrame([*points, *markers]).astype(
        {c: float for c in ("edge_share", "agreement", "agreement_low", "agreement_high", "cost")}
    )


def _colour() -> alt.Color:
    return alt.Color(
        f"{SERIES}:N",
        scale=COLOURS,
        # Full colour in the legend, whichever layer (the light band) it takes its symbols from.
        legend=alt.Legend(title=SERIES, orient="bottom", symbolOpacity=1),
    )


def _x() -> alt.X:
    return alt.X(
        "edge_share:Q", title="edge share of all results", axis=alt.Axis(format=axis_format(True))
    )


def _tooltip(y: str, rate: bool) -> list[alt.Tooltip]:
    return [
        alt.Tooltip(f"{SERIES}:N"),
        alt.Tooltip("cap:N"),
        alt.Tooltip("edge_share:Q", title="edge share", format=tooltip_format(True)),
        alt.Tooltip(f"{y}:Q", format=tooltip_format(rate)),
    ]


def _chart(frame: pd.DataFrame, y: str, title: str, *, rate: bool) -> charts.Spec:
    """`y` against the edge's share: the curve as a line (with its interval as a light
    band when there is one), the candidate and today as rules at their share with a point
    where they have the figure. Layers with nothing to draw are left out."""
    y_axis = alt.Y(
        f"{y}:Q", title=y, axis=alt.Axis(format=axis_format(rate)), scale=alt.Scale(zero=not rate)
    )
    drawn = frame[frame[y].notna()]
    on_curve, markers = drawn[drawn[SERIES] == CURVE], frame[frame[SERIES] != CURVE]
    # Each layer written with Altair without data, and put together as shadowplane_dashboard/charts.py
    # does (Altair's own layering copies every layer over and over).
    layers: list[charts.Unit] = []
    band = on_curve.dropna(subset=[f"{y}_low", f"{y}_high"]) if rate else on_curve.iloc[:0]
    if not band.empty:
        area = (
            alt.Chart()
            .mark_area(opacity=0.15, clip=True)
            .encode(
                x=_x(), y=alt.Y(f"{y}_low:Q", title=y), y2=alt.Y2(f"{y}_high:Q"), color=_colour()
            )
        )
        layers.append((area, band[[SERIES, "edge_share", f"{y}_low", f"{y}_high"]]))
    columns = [SERIES, "cap", "edge_share", y]
    if not on_curve.empty:
        line = (
            alt.Chart()
            .mark_line(point=True)
            .encode(x=_x(), y=y_axis, color=_colour(), tooltip=_tooltip(y, rate))
        )
        layers.append((line, on_curve[columns]))
    rule = (
        alt.Chart()
        .mark_rule(strokeDash=[4, 3], strokeWidth=2)
        .encode(
            x=_x(),
            color=_colour(),
            tooltip=[alt.Tooltip(f"{SERIES}:N"), alt.Tooltip("cap:N"), _tooltip(y, rate)[2]],
        )
    )
    layers.append((rule, markers[[SERIES, "cap", "edge_share"]]))
    marked = markers[markers[y].notna()]
    if not marked.empty:
        point = (
            alt.Chart()
            .mark_point(filled=True, size=120, shape="diamond", opacity=1)
            .encode(x=_x(), y=y_axis, color=_colour(), tooltip=_tooltip(y, rate))
        )
        layers.append((point, marked[columns]))
    # Fit the width only: with Streamlit's default ("fit") the height would hold the axis
    # and the legend too, leaving the plot a strip.
    return charts.spec(layers, title=title, height=240, autosize=charts.FIT_WIDTH)


def curve_charts(frame: pd.DataFrame) -> tuple[charts.Spec, charts.Spec]:
    """Agreement, and cost, against the edge's share as the cap moves."""
    return (
        _chart(frame, "agreement", AGREEMENT_TITLE, rate=True),
        _chart(frame, "cost", COST_TITLE, rate=False),
    )


def curve_words(replay: Mapping[str, Any]) -> str:
    """The curve read in a sentence: from its shortest cap to no cap at all."""
    points = replay["curve"]
    minimum = replay["candidate"]["min_confidence"]
    floor = f" whose edge confidence reaches {number(minimum)}" if minimum is not None else ""
    if not points:
        return f"No result the router found eligible{floor}: the edge would serve nothing."
    first, last = points[0], points[-1]
    everything = total(replay)
    assert everything is not None
    return (
        "Each point of the curve is a cap: the edge serves every request the router finds "
        f"eligible{floor} up to that many input tokens, the cloud the rest. From a cap of "
        f"{count(first['max_input_tokens'])} to {count(last['max_input_tokens'])} tokens (the "
        f"longest such input), the edge's share goes from {percent(first['edge_share']['value'])} "
        f"to {percent(last['edge_share']['value'])}, agreement from "
        f"{percent(first['agreement']['value'])} to {percent(last['agreement']['value'])}, and "
        f"the cost from {money(first['cost'])} to {money(last['cost'])} against "
        f"{money(everything['baseline_cost'])} cloud-only. Today "
        f"({today_words(replay['current'])}) the edge serves "
        f"{percent(everything['current']['edge_share']['value'])}."
    )


def curve_rows(replay: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The curve's points as a table, rates in percent."""
    return [
        {
            "cap (tokens)": p["max_input_tokens"],
            "edge served": p["edge_share"]["num"],
            "edge share": percent(p["edge_share"]["value"]),
            "agreement": estimate(
                p["agreement"]["value"], p["agreement"]["low"], p["agreement"]["high"]
            ),
            "offload-failure rate": percent(p["offload_fail_rate"]["value"]),
            "cost": money(p["cost"]),
            "savings": money(p["savings"]),
        }
        for p in replay["curve"]
    ]
