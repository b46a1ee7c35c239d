"""Altair charts of metrics over time, from pandas frames with a `window_start` column.

Every chart shares the time axis, so rules for events (alerts, decisions) can be layered
over any of them."""

from __future__ import annotations

from typing import Any, cast

import altair as alt
import pandas as pd

TIME = alt.X("window_start:T", title=None)
EVENT_COLOURS = {"decision": "#d62728", "alert": "#ff7f0e"}


def _y(field: str, title: str, percent: bool) -> alt.Y:
    return alt.Y(f"{field}:Q", title=title, axis=alt.Axis(format=".1~%" if percent else ",.3~r"))


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
                tooltip=[alt.Tooltip("at:T", format="%Y-%m-%d %H:%M"), "kind:N", "text:N"],
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
            alt.Tooltip("window_start:T", format="%Y-%m-%d %H:%M"),
            f"{color}:N",
            alt.Tooltip(f"{y}:Q", format=".1%" if percent else ",.4g"),
            alt.Tooltip(f"{low}:Q", format=".1%" if percent else ",.4g"),
            alt.Tooltip(f"{high}:Q", format=".1%" if percent else ",.4g"),
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
            alt.Tooltip("window_start:T", format="%Y-%m-%d %H:%M"),
            f"{color}:N",
            *([f"{dash}:N"] if dash else []),
            alt.Tooltip(f"{y}:Q", format=".2%" if percent else ",.6g"),
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
