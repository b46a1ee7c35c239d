"""Altair charts of metrics over time, from pandas frames with a `window_start` column.

Every chart shares the time axis, so rules for events (alerts, decisions) can be layered
over any of them."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

TIME = alt.X("window_start:T", title=None)
EVENT_COLOURS = {"decision": "#d62728", "alert": "#ff7f0e"}


def _y(field: str, title: str, percent: bool) -> alt.Y:
    return alt.Y(f"{field}:Q", title=title, axis=alt.Axis(format=".0%" if percent else "~s"))


def events_layer(events: pd.DataFrame) -> alt.Chart:
    """Vertical rules at events: columns `at` (time), `kind` (decision | alert), `text`."""
    return (
        alt.Chart(events)
        .mark_rule(strokeWidth=2, opacity=0.7)
        .encode(
            x=alt.X("at:T", title=None),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=list(EVENT_COLOURS), range=list(EVENT_COLOURS.values())),
                legend=alt.Legend(title="event"),
            ),
            tooltip=[alt.Tooltip("at:T", format="%Y-%m-%d %H:%M"), "kind:N", "text:N"],
        )
    )


def _layered(layers: list[Any], events: pd.DataFrame | None, title: str) -> alt.LayerChart:
    if events is not None and not events.empty:
        layers.append(events_layer(events))
    return alt.layer(*layers).resolve_scale(color="independent").properties(title=title, height=220)


def band_lines(
    frame: pd.DataFrame,
    *,
    y: str,
    low: str,
    high: str,
    title: str,
    y_title: str,
    color: str = "bucket",
    percent: bool = True,
    threshold: float | None = None,
    threshold_label: str = "threshold",
    events: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """A line per `color` value with its interval shaded, a dashed rule at `threshold`."""
    base = alt.Chart(frame).encode(x=TIME, color=alt.Color(f"{color}:N", title=color))
    band = base.mark_area(opacity=0.15).encode(y=_y(low, y_title, percent), y2=f"{high}:Q")
    line = base.mark_line(point=True).encode(
        y=_y(y, y_title, percent),
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
    dash: str | None = None,
    percent: bool = False,
    events: pd.DataFrame | None = None,
) -> alt.LayerChart:
    """A line per `color` (and `dash`) value."""
    encoding: dict[str, Any] = {
        "x": TIME,
        "y": _y(y, y_title, percent),
        "color": alt.Color(f"{color}:N", title=color),
        "tooltip": [
            alt.Tooltip("window_start:T", format="%Y-%m-%d %H:%M"),
            f"{color}:N",
            *([f"{dash}:N"] if dash else []),
            alt.Tooltip(f"{y}:Q", format=".2%" if percent else ",.4g"),
        ],
    }
    if dash is not None:
        encoding["strokeDash"] = alt.StrokeDash(f"{dash}:N", title=dash)
    line = alt.Chart(frame).mark_line(point=True).encode(**encoding)
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
