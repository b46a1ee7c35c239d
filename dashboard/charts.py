"""Altair charts of metrics over time, from pandas frames with a `window_start` column.

Every chart shares the time axis, so rules for events (alerts, decisions) can be layered
over any of them; `draw` makes each chart a page shows from its `Chart` description."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import altair as alt
import pandas as pd

from dashboard import formats

# A page draws a few months of windows per bucket: more than Altair's default of 5,000 rows.
alt.data_transformers.disable_max_rows()

TIME = alt.X("window_start:T", title=None)
EVENT_COLOURS = {"decision": "#d62728", "alert": "#ff7f0e"}


def _y(field: str, title: str, percent: bool) -> alt.Y:
    return alt.Y(f"{field}:Q", title=title, axis=alt.Axis(format=formats.axis_format(percent)))


def _colour(field: str, order: list[str] | None, legend: bool = True) -> alt.Color:
    return alt.Color(
        f"{field}:N",
        sort=order,
        legend=alt.Legend(title=field, orient="bottom") if legend else None,
    )


def events_layer(events: pd.DataFrame) -> list[alt.Chart]:
    """Vertical rules at events, one colour per kind (red decisions, orange alerts):
    columns `at` (time), `kind` (decision | alert), `text`. Fixed colours, so the rules
    never join the lines' colour legend."""
    layers = []
    for kind, colour in EVENT_COLOURS.items():
        some = events[events["kind"] == kind]
        if some.empty:
            continue
        layers.append(
            alt.Chart(some)
            .mark_rule(strokeWidth=2, opacity=0.7, color=colour)
            .encode(
                x=alt.X("at:T", title=None),
                tooltip=[alt.Tooltip("at:T", format=formats.MINUTE), "kind:N", "text:N"],
            )
        )
    return layers


def _layered(layers: list[Any], events: pd.DataFrame | None, title: str) -> alt.LayerChart:
    if events is not None and not events.empty:
        layers += events_layer(events)
    return cast(alt.LayerChart, alt.layer(*layers).properties(title=title, height=240))


def _only(frame: pd.DataFrame, *columns: str | None) -> pd.DataFrame:
    """The columns a chart draws: the rest of a wide frame would be serialized into the
    chart's data for nothing (a page draws several charts of the same frame)."""
    wanted = ["window_start", *(c for c in columns if c is not None)]
    return frame[[c for c in dict.fromkeys(wanted) if c in frame.columns]]


@dataclass(frozen=True)
class Beside:
    """A second figure drawn beside a band chart's lines, dashed, one line per `color`
    value: the figure it is read against (the cloud's agreement with itself beside edge
    agreement). `y` is its column (`{y}_low`, `{y}_high` its interval when the frame has
    them); `label` names it and `main` the chart's own lines in the `series` legend. A
    window where the figure is missing has no point: a gap, never a zero."""

    y: str
    label: str
    main: str


SERIES = "series"


def beside_frame(
    frame: pd.DataFrame, *, y: str, low: str, high: str, color: str, beside: Beside
) -> pd.DataFrame:
    """The chart's own lines and the `beside` figure in one long frame: per window and
    `color` value a `series` row of each (`beside.main`, `beside.label`), the value under
    `y` and its interval under `low`/`high`. Rows of the beside figure without a value
    are left out."""
    own = frame[["window_start", color, y, low, high]].copy()
    own[SERIES] = beside.main
    other = pd.DataFrame(
        {
            "window_start": frame["window_start"],
            color: frame[color],
            y: frame[beside.y] if beside.y in frame.columns else pd.NA,
            low: frame.get(f"{beside.y}_low", pd.NA),
            high: frame.get(f"{beside.y}_high", pd.NA),
        }
    )
    other[SERIES] = beside.label
    other = other[other[y].notna()]
    return pd.concat([own, other], ignore_index=True) if not other.empty else own


def band_lines(
    frame: pd.DataFrame,
    *,
    y: str,
    low: str,
    high: str,
    title: str,
    y_title: str,
    color: str = "bucket",
    order: list[str] | None = None,
    percent: bool = True,
    threshold: float | None = None,
    threshold_label: str = "threshold",
    events: pd.DataFrame | None = None,
    beside: Beside | None = None,
) -> alt.LayerChart:
    """A line per `color` value with its interval shaded, a dashed rule at `threshold`, and
    the `beside` figure as a dashed line per `color` value."""
    base = alt.Chart(_only(frame, color, y, low, high)).encode(x=TIME)
    # The band's colour stays out of the legend: the legend shows the lines' colours.
    band = base.mark_area(opacity=0.15).encode(
        y=_y(low, y_title, percent), y2=f"{high}:Q", color=_colour(color, order, legend=False)
    )
    tooltip: list[Any] = [
        alt.Tooltip("window_start:T", format=formats.MINUTE),
        f"{color}:N",
        alt.Tooltip(f"{y}:Q", format=formats.tooltip_format(percent)),
        alt.Tooltip(f"{low}:Q", format=formats.tooltip_format(percent)),
        alt.Tooltip(f"{high}:Q", format=formats.tooltip_format(percent)),
    ]
    if beside is None:
        line = base.mark_line(point=True).encode(
            y=_y(y, y_title, percent), color=_colour(color, order), tooltip=tooltip
        )
    else:
        both = beside_frame(frame, y=y, low=low, high=high, color=color, beside=beside)
        line = (
            alt.Chart(both)
            .mark_line(point=True)
            .encode(
                x=TIME,
                y=_y(y, y_title, percent),
                color=_colour(color, order),
                strokeDash=alt.StrokeDash(
                    f"{SERIES}:N",
                    sort=[beside.main, beside.label],
                    legend=alt.Legend(title=SERIES, orient="bottom"),
                ),
                tooltip=[*tooltip[:2], f"{SERIES}:N", *tooltip[2:]],
            )
        )
    layers: list[Any] = [band, line]
    if threshold is not None:
        rule = pd.DataFrame({"threshold": [threshold], "label": [threshold_label]})
        layers.append(
            alt.Chart(rule)
            .mark_rule(strokeDash=[6, 4], color="#d62728")
            .encode(y="threshold:Q", tooltip=["label:N", "threshold:Q"])
        )
    return _layered(layers, events, title)


def lines(
    frame: pd.DataFrame,
    *,
    y: str,
    title: str,
    y_title: str,
    color: str = "bucket",
    order: list[str] | None = None,
    dash: str | None = None,
    percent: bool = False,
    events: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """A line per `color` (and `dash`) value."""
    encoding: dict[str, Any] = {
        "x": TIME,
        "y": _y(y, y_title, percent),
        "color": _colour(color, order),
        "tooltip": [
            alt.Tooltip("window_start:T", format=formats.MINUTE),
            f"{color}:N",
            *([f"{dash}:N"] if dash else []),
            alt.Tooltip(f"{y}:Q", format=formats.tooltip_format(percent, fine=True)),
        ],
    }
    if dash is not None:
        encoding["strokeDash"] = alt.StrokeDash(
            f"{dash}:N", legend=alt.Legend(title=dash, orient="bottom")
        )
    line = alt.Chart(_only(frame, color, dash, y)).mark_line(point=True).encode(**encoding)
    return _layered([line], events, title)


def long_form(frame: pd.DataFrame, columns: dict[str, dict[str, str]], value: str) -> pd.DataFrame:
    """One row per window and named column: `columns` maps a column of `frame` to the labels
    it gets (e.g. {"edge_latency_ms_p95": {"side": "edge", "percentile": "p95"}})."""
    parts = []
    for column, labels in columns.items():
        part = frame[["window_start"]].copy()
        part[value] = frame[column]
        for name, label in labels.items():
            part[name] = label
        parts.append(part)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


@dataclass(frozen=True)
class Chart:
    """One chart of a metric over time: a line per `color` value (and `dash` value), with
    its interval shaded when `band` names the interval's (low, high) columns."""

    y: str
    title: str
    y_title: str
    color: str = "bucket"
    percent: bool = True
    band: tuple[str, str] | None = None
    dash: str | None = None
    # The label of the dashed threshold rule drawn when a threshold is given.
    rule: str = "threshold"
    # A figure drawn beside a band chart's lines (the floor they are read against).
    beside: Beside | None = None


BAR_STEP = alt.Step(32)


@dataclass(frozen=True)
class Bars:
    """Scores from 0 to 1 as horizontal bars, one per `y` value in the frame's order,
    coloured by `color` (its values in `colours`), with labelled vertical rules across
    every bar (thresholds) and ticks on single bars (a limit of that bar alone)."""

    x: str
    y: str
    title: str
    x_title: str
    color: str
    colours: Mapping[str, str]


def bars(
    chart: Bars,
    frame: pd.DataFrame,
    *,
    rules: Mapping[str, float] | None = None,
    ticks: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """The `chart` of `frame`: a bar per row, a dashed rule at each of `rules` (label →
    position) with its label on top, and a tick per row of `ticks` (columns `chart.y`,
    `at`, `label`)."""
    order = list(frame[chart.y])
    y = alt.Y(f"{chart.y}:N", sort=order, title=None)
    scale = alt.Scale(domain=[0, 1])
    others = [c for c in frame.columns if c not in (chart.y, chart.x)]
    layers: list[Any] = [
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X(
                f"{chart.x}:Q",
                title=chart.x_title,
                scale=scale,
                axis=alt.Axis(format=formats.axis_format(False)),
            ),
            y=y,
            color=alt.Color(
                f"{chart.color}:N",
                scale=alt.Scale(domain=list(chart.colours), range=list(chart.colours.values())),
                legend=alt.Legend(title=chart.color, orient="bottom"),
            ),
            tooltip=[
                f"{chart.y}:N",
                alt.Tooltip(f"{chart.x}:Q", format=formats.tooltip_format(False)),
                *(f"{c}:N" for c in others),
            ],
        )
    ]
    if rules:
        at = pd.DataFrame({"rule": list(rules), "at": list(rules.values())})
        rule = alt.Chart(at).encode(x=alt.X("at:Q", scale=scale), tooltip=["rule:N", "at:Q"])
        layers += [
            rule.mark_rule(strokeDash=[6, 4], color="#333333"),
            rule.mark_text(align="left", dx=3, dy=-4, baseline="bottom", color="#333333").encode(
                text="rule:N", y=alt.value(0)
            ),
        ]
    if ticks is not None and not ticks.empty:
        layers.append(
            alt.Chart(ticks)
            .mark_tick(color=EVENT_COLOURS["decision"], thickness=3)
            .encode(x=alt.X("at:Q", scale=scale), y=y, tooltip=["label:N", "at:Q"])
        )
    # A step per bar (a fixed height would squeeze the bars on a page's discrete axis).
    return cast(alt.LayerChart, alt.layer(*layers).properties(title=chart.title, height=BAR_STEP))


@dataclass(frozen=True)
class Histogram:
    """Shares per bin as vertical bars in the frame's order (columns `bin`, `share`,
    `count`), one colour: one of two histograms drawn side by side on the same scale."""

    title: str
    x_title: str
    colour: str


def histogram(chart: Histogram, frame: pd.DataFrame, *, top: float) -> alt.Chart:
    """The `chart` of `frame`, its share axis from 0 to `top` (the larger of the two
    histograms' tallest bar, so side by side they read on one scale)."""
    return cast(
        alt.Chart,
        alt.Chart(frame)
        .mark_bar(color=chart.colour)
        .encode(
            x=alt.X("bin:N", sort=list(frame["bin"]), title=chart.x_title),
            y=alt.Y(
                "share:Q",
                title="share of inputs",
                scale=alt.Scale(domain=[0, top]),
                axis=alt.Axis(format=formats.axis_format(True)),
            ),
            tooltip=[
                "bin:N",
                alt.Tooltip("share:Q", format=formats.tooltip_format(True)),
                alt.Tooltip("count:Q", format=","),
            ],
        )
        .properties(title=chart.title, height=240),
    )


def draw(
    chart: Chart | Bars,
    frame: pd.DataFrame,
    *,
    order: list[str] | None = None,
    threshold: float | None = None,
    events: pd.DataFrame | None = None,
    rules: Mapping[str, float] | None = None,
    ticks: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """The chart `chart` describes, of `frame`: for a line chart with a rule at
    `threshold` (a band chart's only) and the `events` marked; for bars with the `rules`
    and `ticks` (`bars`)."""
    if isinstance(chart, Bars):
        return bars(chart, frame, rules=rules, ticks=ticks)
    if chart.band is not None:
        low, high = chart.band
        return band_lines(
            frame,
            y=chart.y,
            low=low,
            high=high,
            title=chart.title,
            y_title=chart.y_title,
            color=chart.color,
            order=order,
            percent=chart.percent,
            threshold=threshold,
            threshold_label=chart.rule,
            events=events,
            beside=chart.beside,
        )
    return lines(
        frame,
        y=chart.y,
        title=chart.title,
        y_title=chart.y_title,
        color=chart.color,
        order=order,
        dash=chart.dash,
        percent=chart.percent,
        events=events,
    )


EVENT_COLUMNS = ["at", "kind", "text"]


def events(
    decisions: Iterable[Mapping[str, Any]], alerts: Iterable[Mapping[str, Any]]
) -> pd.DataFrame:
    """The events `events_layer` draws: each decision at its time, each alert at its
    window (or when it opened), with its sentence."""
    frame = pd.DataFrame(
        [{"at": d["created_at"], "kind": "decision", "text": d["reason"]} for d in decisions]
        + [
            {"at": a["window_start"] or a["opened_at"], "kind": "alert", "text": a["message"]}
            for a in alerts
        ],
        columns=EVENT_COLUMNS,
    )
    if not frame.empty:
        frame["at"] = pd.to_datetime(frame["at"], utc=True)
    return frame


def events_within(
    events: pd.DataFrame, first: pd.Timestamp, last: pd.Timestamp, seconds: int
) -> pd.DataFrame:
    """The events from the first window's start to the last window's end (`seconds` after
    its start): one far off would stretch the time axis until the windows are a sliver."""
    if events.empty:
        return events
    end = last + pd.Timedelta(seconds, "s")
    return events[(events["at"] >= first) & (events["at"] <= end)]
