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
) -> alt.LayerChart:
    """A line per `color` value with its interval shaded, a dashed rule at `threshold`."""
    base = alt.Chart(_only(frame, color, y, low, high)).encode(x=TIME)
    # The band's colour stays out of the legend: the legend shows the lines' colours.
    band = base.mark_area(opacity=0.15).encode(
        y=_y(low, y_title, percent), y2=f"{high}:Q", color=_colour(color, order, legend=False)
    )
    line = base.mark_line(point=True).encode(
        y=_y(y, y_title, percent),
        color=_colour(color, order),
        tooltip=[
            alt.Tooltip("window_start:T", format=formats.MINUTE),
            f"{color}:N",
            alt.Tooltip(f"{y}:Q", format=formats.tooltip_format(percent)),
            alt.Tooltip(f"{low}:Q", format=formats.tooltip_format(percent)),
            alt.Tooltip(f"{high}:Q", format=formats.tooltip_format(percent)),
        ],
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


def draw(
    chart: Chart,
    frame: pd.DataFrame,
    *,
    order: list[str] | None = None,
    threshold: float | None = None,
    events: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """The chart `chart` describes, of `frame`, with a rule at `threshold` (a band chart's
    only) and the `events` marked."""
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
