"""The Task page's evidence over time and route accuracy as data: the charts it draws (one
`charts.Chart` each), the frames they draw from, the rules' thresholds and the sentences
written under them. Plain functions of the loaded windows, no Streamlit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pandas as pd

from shadowplane_dashboard import charts, formats
from shadowplane_dashboard.formats import estimate, line, moment, money, percent

PERIODS = {
    "the last 6 hours": dt.timedelta(hours=6),
    "the last 24 hours": dt.timedelta(hours=24),
    "the last 3 days": dt.timedelta(days=3),
    "the last 7 days": dt.timedelta(days=7),
}


def _banded(metric: str, title: str, y_title: str) -> charts.Chart:
    """A rate per bucket with its interval (columns `{metric}_low`, `{metric}_high`) and the
    threshold of the rollback rule on it."""
    return charts.Chart(
        metric, title, y_title, band=(f"{metric}_low", f"{metric}_high"), rule=f"{metric} rule"
    )


# Edge agreement read against the task's threshold, LaunchDarkly's way: per window and
# bucket the difference with its interval, 0 being the threshold; dashed beside it, the
# cloud's agreement with itself on its repeat pairs less the same threshold (the floor
# edge agreement is read against; a bucket without repeat pairs has none).
EDGE, FLOOR = "edge vs cloud", "cloud vs itself"
SERIES = "series"
DIFFERENCE = charts.Chart(
    "difference",
    "Agreement minus its threshold (95% interval), and the cloud against itself",
    "agreement − threshold",
    band=("difference_low", "difference_high"),
    dash=SERIES,
    dashes=(EDGE, FLOOR),
    signed=True,
    extra=("agreement",),
)
CONFLICTS = charts.Chart("conflict_rate", "Conflict rate", "conflicts / pairs")
EDGE_ERRORS = charts.Chart("edge_error_rate", "Edge error rate", "errors / edge runs")
DEGRADES = _banded("degrade_rate", "Degrade rate", "of edge attempts")
OFFLOAD_FAILURES = _banded("offload_fail_rate", "Offload-failure rate", "of edge attempts")
# Rates of the requests the router sent to the edge to serve: none in a window without any.
PER_EDGE_ATTEMPT = (DEGRADES, OFFLOAD_FAILURES)
ROUTE_ACCURACY = charts.Chart(
    "estimate",
    "Route accuracy (95% interval)",
    "routed right",
    color="series",
    band=("low", "high"),
    rule="route_acc rule",
)
MISSES = charts.Chart(
    "share", "missed_offload and wrong_offload", "share of labelled results", color="kind"
)
# The rule each chart draws the threshold of, by the chart's y column.
RULE_METRICS = {"estimate": "route_acc"}


# The charts of one bucket's windows, by name: y column, title, y axis, colour, dash.
OF_BUCKET: dict[str, tuple[str, str, str, str, str | None]] = {
    "latency": (
        "latency_ms",
        "Latency p50/p95/p99, edge against cloud",
        "ms",
        "side",
        "percentile",
    ),
    "input_length": ("input_tokens", "Input length", "tokens", "percentile", None),
    "cost": ("cost", "Cost against the cloud-only baseline", "cost per window", "series", None),
}


def of_bucket(name: str, bucket: str) -> charts.Chart:
    """The chart `name` of OF_BUCKET for the windows of `bucket` (named in its title)."""
    y, title, y_title, color, dash = OF_BUCKET[name]
    return charts.Chart(y, f"{title} ({bucket})", y_title, color=color, dash=dash, percent=False)


def rule_threshold(config: Mapping[str, Any], metric: str) -> float | None:
    """The threshold of the first rollback rule on `metric` that is not off."""
    for rule in config.get("rollback", {}).get("rules", []):
        if rule["metric"] == metric and rule.get("mode") != "off":
            return float(rule["threshold"])
    return None


def threshold(config: Mapping[str, Any], chart: charts.Chart) -> float | None:
    """The rule's threshold a banded chart draws; None for the others."""
    if chart.band is None:
        return None
    return rule_threshold(config, RULE_METRICS.get(chart.y, chart.y))


def agreement_threshold(config: Mapping[str, Any]) -> tuple[float, str]:
    """The threshold edge agreement is read against, and where it comes from in words: the
    agreement rule's (the first not off), else the promotion gate's lower bound."""
    found = rule_threshold(config, "agreement")
    if found is not None:
        return found, "the agreement rule's"
    return float(config["promotion"]["agreement_lower_bound"]), "the promotion gate's"


def _numbers(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats, gaps as NaN; all gaps when the frame has no such column."""
    if column not in frame.columns:
        return pd.Series(float("nan"), index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def difference_frame(frame: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """What the difference chart draws, per window and bucket with a value: edge agreement
    less `threshold` with its interval ("edge vs cloud"), and the cloud's agreement with
    itself less the same threshold where the bucket had repeat pairs ("cloud vs itself",
    a line without a band: the floor is read as a level); `agreement` keeps the rate
    itself for the tooltip."""
    parts = []
    for series, rate, interval in ((EDGE, "agreement", True), (FLOOR, "self_agreement", False)):
        value = _numbers(frame, rate)
        held = value.notna()
        if not held.any():
            continue
        gaps = pd.Series(float("nan"), index=frame.index)
        low = _numbers(frame, f"{rate}_low") if interval else gaps
        high = _numbers(frame, f"{rate}_high") if interval else gaps
        parts.append(
            pd.DataFrame(
                {
                    "window_start": frame.loc[held, "window_start"],
                    "bucket": frame.loc[held, "bucket"],
                    SERIES: series,
                    "agreement": value[held],
                    "difference": value[held] - threshold,
                    "difference_low": low[held] - threshold,
                    "difference_high": high[held] - threshold,
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    return pd.concat(parts, ignore_index=True)


DIFFERENCE_COLUMNS = [
    "window_start",
    "bucket",
    SERIES,
    "agreement",
    "difference",
    "difference_low",
    "difference_high",
]


def zero_label(threshold: float, source: str) -> str:
    """What the difference chart's 0 is."""
    return f"0 = {percent(threshold)} agreement ({source} threshold)"


def difference_words(threshold: float, source: str) -> str:
    """How to read the difference chart, under it."""
    return (
        f"Above 0, edge agreement is above {source} threshold ({percent(threshold)}); "
        "the light band is its 95% interval (cut at the chart's edge when wider). Dashed, "
        "the cloud's agreement with itself on its repeat pairs, less the same threshold: "
        "the most agreement can be expected to reach. A floor below 0 means the threshold "
        "asks more of the edge than the cloud gives itself."
    )


def since(span: tuple[dt.datetime, dt.datetime], period: str) -> dt.datetime:
    """The start of the windows shown: `period` back from the newest, not before the first."""
    first, last = span
    return max(first, last - PERIODS[period])


def no_edge_attempts(chart: charts.Chart) -> str:
    return (
        f"{chart.title}: no edge attempts in these windows (it counts requests the router "
        "sent to the edge to serve), so there is nothing to draw."
    )


def nothing_to_draw(chart: charts.Chart) -> str:
    """What the page says in place of a chart without a value to draw."""
    if chart in PER_EDGE_ATTEMPT:
        return no_edge_attempts(chart)
    return f"{chart.title}: no value in these windows, so there is nothing to draw."


def latest_line(frame: pd.DataFrame, *, seconds: bool = False) -> str | None:
    """The figures of the newest closed window, per bucket (None: no window closed): edge
    agreement, and beside it the cloud's agreement with itself on its repeat pairs; its
    time to the second when `seconds`."""
    latest_start = frame.loc[frame["closed"], "window_start"].max()
    if pd.isna(latest_start):
        return None
    latest = frame[frame["window_start"] == latest_start]
    return (
        f"Latest closed window ({moment(latest_start, seconds=seconds)}): "
        + "; ".join(
            f"{line(row['bucket'])}: agreement "
            f"{estimate(row['agreement'], row['agreement_low'], row['agreement_high'])} "
            f"of {row['n_pairs']} pairs, {floor_words(row)}"
            for _, row in latest.iterrows()
        )
        + "."
    )


def floor_words(row: Mapping[str, Any]) -> str:
    """The cloud against itself in a window's bucket: its self-agreement over its repeat
    pairs, or that it had none (no floor, which is not a floor of zero)."""
    pairs = row.get("n_repeat_pairs")
    if formats.missing(pairs) or not pairs or formats.missing(row.get("self_agreement")):
        return "cloud vs itself: no repeat pairs"
    return (
        f"cloud vs itself "
        f"{estimate(row['self_agreement'], row.get('self_agreement_low'), row.get('self_agreement_high'))}"
        f" of {formats.count(int(pairs))} repeat pairs"
    )


def calibration_line(found: Mapping[str, Any]) -> str:
    precision, miss = found["conflict_precision"], found["agree_miss_rate"]
    return (
        f"Comparator **{line(found['comparator'])}**: of {precision['n']} labelled conflicts, "
        f"{estimate(precision['estimate'], precision['low'], precision['high'])} were a real "
        f"difference (conflict precision); of {miss['n']} labelled agreeing pairs, "
        f"{estimate(miss['estimate'], miss['low'], miss['high'])} hid a wrong answer (agree "
        "miss rate). Agreement is only as good as these: a high miss rate means wrong edge "
        "answers pass as agreeing."
    )


def latencies(detail: pd.DataFrame) -> pd.DataFrame:
    return charts.long_form(
        detail,
        {
            f"{side}_latency_ms_{p}": {"side": side, "percentile": p}
            for side in ("edge", "cloud")
            for p in ("p50", "p95", "p99")
        },
        "latency_ms",
    )


def input_lengths(detail: pd.DataFrame) -> pd.DataFrame:
    return charts.long_form(
        detail,
        {"input_tokens_p50": {"percentile": "p50"}, "input_tokens_p95": {"percentile": "p95"}},
        "input_tokens",
    )


def costs(detail: pd.DataFrame) -> pd.DataFrame:
    return charts.long_form(
        detail,
        {"total_cost": {"series": "edge + cloud"}, "baseline_cost": {"series": "cloud only"}},
        "cost",
    )


def savings_line(detail: pd.DataFrame, bucket: str) -> str:
    spent, baseline = detail["total_cost"].sum(), detail["baseline_cost"].sum()
    net = detail["net_savings"].dropna()
    return (
        f"Over these windows ({line(bucket)}): cost {money(spent)} against {money(baseline)} "
        f"for the cloud alone, saving {money(baseline - spent)}"
        + (f"; net of the edge's fixed cost {money(net.sum())}" if not net.empty else "")
        + "."
    )


def routes(accuracy: list[dict[str, Any]]) -> pd.DataFrame:
    """The route-accuracy windows with an estimate, as one series over time."""
    frame = pd.DataFrame(accuracy)
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    frame["series"] = "route accuracy"
    return frame


def misses(routes: pd.DataFrame) -> pd.DataFrame:
    return charts.long_form(
        routes,
        {"missed_offload": {"kind": "missed_offload"}, "wrong_offload": {"kind": "wrong_offload"}},
        "share",
    )


def newest_accuracy(newest: Mapping[str, Any], *, seconds: bool = False) -> str:
    return (
        f"Newest estimate ({moment(newest['window_start'], seconds=seconds)}): route accuracy "
        f"{estimate(newest['estimate'], newest['low'], newest['high'])} from "
        f"{newest['n_labels']} labels; missed_offload {percent(newest['missed_offload'])}, "
        f"wrong_offload {percent(newest['wrong_offload'])}."
    )
