"""Vega-Lite charts of metrics over time, from pandas frames with a `window_start` column.

Every chart shares the time axis (UTC, 24-hour), so rules for events (alerts, decisions)
can be layered over any of them; every chart has a legend; `draw` makes each chart a page
shows from its `Chart` description. A chart draws only columns holding a value (a
column of gaps would give Vega an infinite extent): `drawable` says whether there is
anything to draw at all.

Each single-mark layer is written with Altair, without data, and turned into its Vega-Lite
dict on its own; the layers are put together, and their frames named, here. A chart is a
dict (`Spec`) Streamlit draws with `st.vega_lite_chart`, its frames sent as Arrow. Altair's
own layering deep-copies every layer (each of its properties, set or not) several times
over in each LayerChart it makes and again when the chart becomes a dict, and validates the
whole spec on every render: three quarters of a task page's CPU, about 45 ms a chart. The
tests validate the charts against Vega-Lite's schema instead: every kind in
tests/dashboard/task/test_evidence.py and test_spans.py (tests/dashboard/vega.py's
`as_sent`), and every chart the task page draws in tests/dashboard/test_task.py."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import altair as alt
import pandas as pd

from shadowplane_dashboard import formats

# A Vega-Lite spec, its `datasets` pandas frames (by name).
Spec = dict[str, Any]
# A single-mark layer written with Altair, without data, and the frame it draws.
Unit = tuple[alt.Chart, pd.DataFrame]

EVENT_COLOURS = {"decision": "#d62728", "alert": "#ff7f0e"}
# The lines' colours, in order: none is an event's.
PALETTE = ["#4c78a8", "#54a24b", "#b279a2", "#72b7b2", "#9d755d", "#eeca3b", "#bab0ac"]
ALL_COLOUR = "#333333"
EVENT = "event"
HEIGHT = 240
# A chart fits its column's width, and its plot keeps its height under the legends and
# axes (Streamlit's default fits the whole chart, legends included, into the height).
FIT_WIDTH = {"type": "fit-x", "contains": "padding"}
# How light an interval's band is beside its line.
BAND_OPACITY = 0.08


def time_x(field: str = "window_start") -> alt.X:
    """The time axis: a UTC scale, labelled in UTC 24-hour time (Vega's own labels are the
    browser's local time in 12 hours)."""
    return alt.X(
        f"{field}:T",
        title="UTC",
        scale=alt.Scale(type="utc"),
        axis=alt.Axis(labelExpr=formats.TIME_AXIS_LABEL),
    )


def time_tooltip(field: str, title: str, *, seconds: bool) -> alt.Tooltip:
    """A time in a tooltip, in UTC 24-hour time (to the second when `seconds`). A UTC time
    unit makes Vega-Lite format it with utcFormat (its `formatType="utc"` is taken for a
    custom format and writes NaN); the unit truncates nothing finer than the format."""
    unit: Literal["utcyearmonthdatehoursminutesseconds", "utcyearmonthdatehoursminutes"] = (
        "utcyearmonthdatehoursminutesseconds" if seconds else "utcyearmonthdatehoursminutes"
    )
    return alt.Tooltip(
        f"{field}:T", title=title, timeUnit=unit, format=formats.time_tooltip(seconds=seconds)
    )


def legend(title: str) -> alt.Legend:
    """Every legend alike (the same object on each layer encoding a channel, so Vega-Lite
    merges them without a conflict)."""
    return alt.Legend(title=title, orient="right", symbolOpacity=1)


def _y(field: str, title: str, percent: bool, *, signed: bool = False, domain: Any = None) -> alt.Y:
    directive = formats.DIFFERENCE_AXIS if signed else formats.axis_format(percent)
    scale = alt.Scale(domain=domain) if domain is not None else alt.Undefined
    return alt.Y(
        f"{field}:Q", title=title, axis=alt.Axis(format=directive), scale=scale, stack=None
    )


def _dash(field: str, order: Sequence[str] | None = None) -> alt.StrokeDash:
    """Dashes by `field` (in `order` when given), its legend showing each dash as a line."""
    scale = alt.Scale(domain=list(order)) if order else alt.Undefined
    return alt.StrokeDash(
        f"{field}:N",
        sort=list(order) if order else alt.Undefined,
        scale=scale,
        legend=alt.Legend(
            title=field, orient="right", symbolType="stroke", symbolSize=400, symbolStrokeWidth=2
        ),
    )


def _colour(field: str, order: Sequence[str] | None) -> alt.Color:
    """Colour by `field`; with an `order`, the colours follow it (a bucket keeps its colour
    on every chart of the page, whichever buckets a chart has values for), none of them
    the events' red or orange, and "all" dark."""
    scale: Any = alt.Undefined
    if order:
        palette = iter(PALETTE * (len(order) // len(PALETTE) + 1))
        colours = [ALL_COLOUR if v == "all" else next(palette) for v in order]
        scale = alt.Scale(domain=list(order), range=colours)
    return alt.Color(f"{field}:N", sort=order, scale=scale, legend=legend(field))


def _value(rate: bool, signed: bool, *, fine: bool = False) -> str:
    return formats.DIFFERENCE_TOOLTIP if signed else formats.tooltip_format(rate, fine=fine)


def events_layer(events: pd.DataFrame, *, seconds: bool = False) -> Unit | None:
    """Vertical rules at events, one colour per kind (red decisions, orange alerts) with
    their own legend: columns `at` (time), `kind` (decision | alert), `text`. None without
    an event."""
    if events.empty:
        return None
    kinds = [k for k in EVENT_COLOURS if k in set(events["kind"])]
    rules = (
        alt.Chart()
        .mark_rule(strokeWidth=2, opacity=0.7)
        .encode(
            x=time_x("at"),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=kinds, range=[EVENT_COLOURS[k] for k in kinds]),
                legend=legend(EVENT),
            ),
            tooltip=[
                time_tooltip("at", "at", seconds=seconds),
                alt.Tooltip("kind:N"),
                alt.Tooltip("text:N"),
            ],
        )
    )
    return rules, events[["at", "kind", "text"]]


class _Frames:
    """The frames of one spec, each named by a digest of its columns, their types and its
    rows (Streamlit names the frames of its Altair charts by their Arrow bytes, which a
    type or a time zone changes too): a frame drawn by several layers is sent once."""

    def __init__(self) -> None:
        self.named: dict[str, pd.DataFrame] = {}
        self._names: dict[int, str] = {}

    def unit(self, layer: Unit) -> Spec:
        """The layer's Vega-Lite dict, reading its frame by name."""
        chart, frame = layer
        spec = chart.to_dict(validate=False)
        # Altair gives a chart without data an empty dataset, and a chart at the top
        # level its schema and theme: the spec's top has them (it has no theme).
        for key in ("$schema", "config", "datasets"):
            spec.pop(key, None)
        spec["data"] = {"name": self._name(frame)}
        return spec

    def _name(self, frame: pd.DataFrame) -> str:
        name = self._names.get(id(frame))
        if name is None:
            # Row hashes alone read a naive time and a UTC one alike, 1 and True alike.
            digest = hashlib.sha256(
                repr([*map(str, frame.columns), *map(str, frame.dtypes)]).encode()
            )
            digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
            name = self._names[id(frame)] = f"data-{digest.hexdigest()[:20]}"
            self.named[name] = frame
        return name


def spec(units: Sequence[Unit | Spec], frames: _Frames | None = None, **top: Any) -> Spec:
    """The layers (each a Unit, or a layer spec whose frames are in `frames`) as one
    Vega-Lite spec with the `top` properties and the frames they draw."""
    frames = frames or _Frames()
    layers = [u if isinstance(u, dict) else frames.unit(u) for u in units]
    return {"$schema": alt.SCHEMA_URL, **top, "layer": layers, "datasets": frames.named}


def _layered(layers: list[Unit], events: pd.DataFrame | None, title: str, *, seconds: bool) -> Spec:
    """The layers with the events' rules over them: the events' colours are a scale of
    their own (a legend of their own), apart from the lines'."""
    marks = events_layer(events, seconds=seconds) if events is not None else None
    top: dict[str, Any] = {"title": title, "height": HEIGHT, "autosize": FIT_WIDTH}
    if marks is None:
        return spec(layers, **top)
    frames = _Frames()
    lines = {"layer": [frames.unit(layer) for layer in layers]}
    independent = {"scale": {"color": "independent"}}
    return spec([lines, frames.unit(marks)], frames, resolve=independent, **top)


def _only(frame: pd.DataFrame, *columns: str | None) -> pd.DataFrame:
    """The columns a chart draws: the rest of a wide frame would be serialized into the
    chart's data for nothing (a page draws several charts of the same frame)."""
    wanted = ["window_start", *(c for c in columns if c is not None)]
    return frame[[c for c in dict.fromkeys(wanted) if c in frame.columns]]


def _held(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """The rows holding a value in each of `columns` (a window without one is a gap)."""
    return frame.dropna(subset=list(columns))


def value_domain(
    values: Iterable[float], *, rule: float | None, percent: bool, signed: bool
) -> list[float]:
    """The y axis's range: the lines' values and the rule's, with a margin; a rate's kept
    within 0–100%. Intervals are drawn within it, cut at its edge: a window of three edge
    attempts has an interval of 0–70%, which would flatten every line to the bottom."""
    held = [float(v) for v in values if not formats.missing(v)]
    if rule is not None:
        held.append(rule)
    if signed:
        held.append(0.0)
    low, high = min(held), max(held)
    margin = max((high - low) * 0.1, 0.01 if percent or signed else abs(high) * 0.05 or 1.0)
    low, high = low - margin, high + margin
    if percent and not signed:
        low, high = max(low, 0.0), min(high, 1.0)
    return [low, high]


def band_lines(
    frame: pd.DataFrame,
    chart: Chart,
    *,
    order: Sequence[str] | None = None,
    threshold: float | None = None,
    rule_label: str | None = None,
    events: pd.DataFrame | None = None,
    seconds: bool = False,
) -> Spec:
    """A line per `color` (and `dash`) value with its interval as a light band behind it
    (never stacked), a dashed rule at `threshold` labelled `rule_label` (else the chart's
    `rule`), and the `events` marked."""
    assert chart.band is not None
    low, high = chart.band
    y, percent, signed = chart.y, chart.percent, chart.signed
    drawn = _held(_only(frame, chart.color, chart.dash, y, low, high, *chart.extra), y)
    domain = value_domain(drawn[y], rule=threshold, percent=percent, signed=signed)
    axis = _y(y, chart.y_title, percent, signed=signed, domain=domain)
    time = time_tooltip("window_start", "window from", seconds=seconds)
    keys = [
        alt.Tooltip(f"{chart.color}:N"),
        *([alt.Tooltip(f"{chart.dash}:N")] if chart.dash else []),
    ]
    tooltip: list[Any] = [
        time,
        *keys,
        *(alt.Tooltip(f"{c}:Q", format=formats.tooltip_format(True)) for c in chart.extra),
        alt.Tooltip(f"{y}:Q", format=_value(percent, signed)),
        alt.Tooltip(f"{low}:Q", format=_value(percent, signed)),
        alt.Tooltip(f"{high}:Q", format=_value(percent, signed)),
    ]
    colour = _colour(chart.color, order)
    # Every layer reads the one frame (sent once), each filtering the rows it draws.
    base = alt.Chart()
    layers: list[Unit] = []
    if not _held(drawn, low, high).empty:
        band = (
            base.transform_filter(f"isValid(datum['{low}']) && isValid(datum['{high}'])")
            .mark_area(opacity=BAND_OPACITY, clip=True)
            .encode(
                x=time_x(),
                y=_y(low, chart.y_title, percent, signed=signed, domain=domain),
                y2=alt.Y2(f"{high}:Q"),
                color=colour,
                **({"detail": alt.Detail(f"{chart.dash}:N")} if chart.dash else {}),
            )
        )
        layers.append((band, drawn))
    encoding: dict[str, Any] = {"x": time_x(), "y": axis, "color": colour, "tooltip": tooltip}
    if chart.dash is None:
        layers.append((base.mark_line(point=True, clip=True).encode(**encoding), drawn))
    else:
        # The first dash value is the chart's own figure, drawn with its points (a layer of
        # their own: points on the dashed lines would make the dash legend's symbols
        # filled dots); the others are levels it is read against, lines alone.
        held = set(drawn[chart.dash])
        dashes = [d for d in chart.dashes or sorted(held) if d in held]
        encoding["strokeDash"] = _dash(chart.dash, dashes)
        layers.append((base.mark_line(clip=True).encode(**encoding), drawn))
        points = {k: v for k, v in encoding.items() if k != "strokeDash"}
        dots = (
            base.transform_filter(alt.datum[chart.dash] == dashes[0])
            .mark_point(filled=True, clip=True)
            .encode(**points)
        )
        layers.append((dots, drawn))
    if threshold is not None:
        axis = _y("threshold", chart.y_title, percent, signed=signed, domain=domain)
        at = formats.percent(threshold) if percent else formats.number(threshold)
        layers += threshold_rule(threshold, rule_label or f"{chart.rule}: {at}", axis)
    return _layered(layers, events, chart.title, seconds=seconds)


def threshold_rule(at: float, label: str, y: alt.Y) -> list[Unit]:
    """A dashed rule across the chart at `at` (on the chart's axis `y`, of a `threshold`
    column), its label, which says where it is, written on it at the left."""
    frame = pd.DataFrame({"threshold": [at], "label": [label]})
    rule = alt.Chart().encode(y=y, tooltip=[alt.Tooltip("label:N")])
    return [
        (rule.mark_rule(strokeDash=[6, 4], color="#333333"), frame),
        (
            rule.mark_text(align="left", baseline="bottom", dx=4, dy=-3, color="#333333").encode(
                x=alt.XValue(0), text=alt.Text("label:N")
            ),
            frame,
        ),
    ]


def lines(
    frame: pd.DataFrame,
    chart: Chart,
    *,
    order: Sequence[str] | None = None,
    events: pd.DataFrame | None = None,
    seconds: bool = False,
) -> Spec:
    """A line per `color` (and `dash`) value."""
    y, dash, percent = chart.y, chart.dash, chart.percent
    encoding: dict[str, Any] = {
        "x": time_x(),
        "y": _y(y, chart.y_title, percent),
        "color": _colour(chart.color, order),
        "tooltip": [
            time_tooltip("window_start", "window from", seconds=seconds),
            alt.Tooltip(f"{chart.color}:N"),
            *([alt.Tooltip(f"{dash}:N")] if dash else []),
            alt.Tooltip(f"{y}:Q", format=formats.tooltip_format(percent, fine=True)),
        ],
    }
    if dash is not None:
        encoding["strokeDash"] = _dash(dash)
    drawn = _held(_only(frame, chart.color, dash, y), y)
    line = alt.Chart().mark_line(point=True).encode(**encoding)
    return _layered([(line, drawn)], events, chart.title, seconds=seconds)


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
    """One chart of a metric over time: a line per `color` value (and `dash` value, in the
    order of `dashes` when given), with its interval as a light band when `band` names the
    interval's (low, high) columns."""

    y: str
    title: str
    y_title: str
    color: str = "bucket"
    percent: bool = True
    band: tuple[str, str] | None = None
    dash: str | None = None
    # The label of the dashed threshold rule drawn when a threshold is given.
    rule: str = "threshold"
    # A difference of rates: signed on the axis and in tooltips ("+2.5%").
    signed: bool = False
    # The dash values in the legend's order.
    dashes: tuple[str, ...] = ()
    # Rates shown in the tooltip besides the drawn figure (e.g. the agreement a
    # difference is of).
    extra: tuple[str, ...] = ()


def drawable(chart: Chart, frame: pd.DataFrame) -> bool:
    """Whether `frame` holds anything for `chart` to draw: a value of its figure."""
    return chart.y in frame.columns and bool(frame[chart.y].notna().any())


# Each bar's band, in pixels.
BAR_STEP = 32


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
) -> Spec:
    """The `chart` of `frame`: a bar per row, a dashed rule at each of `rules` (label →
    position) with its label on top, and a tick per row of `ticks` (columns `chart.y`,
    `at`, `label`)."""
    order = list(frame[chart.y])
    y = alt.Y(f"{chart.y}:N", sort=order, title=None)
    scale = alt.Scale(domain=[0, 1])
    others = [c for c in frame.columns if c not in (chart.y, chart.x)]
    bar = (
        alt.Chart()
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
                alt.Tooltip(f"{chart.y}:N"),
                alt.Tooltip(f"{chart.x}:Q", format=formats.tooltip_format(False)),
                *(alt.Tooltip(f"{c}:N") for c in others),
            ],
        )
    )
    layers: list[Unit] = [(bar, frame)]
    if rules:
        at = pd.DataFrame({"rule": list(rules), "at": list(rules.values())})
        rule = alt.Chart().encode(
            x=alt.X("at:Q", scale=scale), tooltip=[alt.Tooltip("rule:N"), alt.Tooltip("at:Q")]
        )
        layers += [
            (rule.mark_rule(strokeDash=[6, 4], color="#333333"), at),
            (
                rule.mark_text(
                    align="left", dx=3, dy=-4, baseline="bottom", color="#333333"
                ).encode(text=alt.Text("rule:N"), y=alt.YValue(0)),
                at,
            ),
        ]
    if ticks is not None and not ticks.empty:
        tick = (
            alt.Chart()
            .mark_tick(color=EVENT_COLOURS["decision"], thickness=3)
            .encode(
                x=alt.X("at:Q", scale=scale),
                y=y,
                tooltip=[alt.Tooltip("label:N"), alt.Tooltip("at:Q")],
            )
        )
        layers.append((tick, ticks))
    # A band per bar (a fixed height would squeeze the bars when there are many). Not a
    # Vega-Lite step: Streamlit's frontend fits a chart's height, which a step height
    # cannot (Vega warns it drops "fit-y").
    return spec(layers, title=chart.title, height=BAR_STEP * len(order), autosize=FIT_WIDTH)


@dataclass(frozen=True)
class Histogram:
    """Shares per bin as vertical bars in the frame's order (columns `bin`, `share`,
    `count`), one colour named `label` in its legend: one of two histograms drawn side by
    side on the same scale."""

    title: str
    x_title: str
    colour: str
    label: str


def histogram(chart: Histogram, frame: pd.DataFrame, *, top: float) -> Spec:
    """The `chart` of `frame`, its share axis from 0 to `top` (the larger of the two
    histograms' tallest bar, so side by side they read on one scale)."""
    frames = _Frames()
    bars = (
        alt.Chart()
        .mark_bar()
        .encode(
            x=alt.X("bin:N", sort=list(frame["bin"]), title=chart.x_title),
            y=alt.Y(
                "share:Q",
                title="share of inputs",
                scale=alt.Scale(domain=[0, top]),
                axis=alt.Axis(format=formats.axis_format(True)),
            ),
            color=alt.Color(
                "inputs:N",
                scale=alt.Scale(domain=[chart.label], range=[chart.colour]),
                legend=legend("inputs"),
            ),
            tooltip=[
                alt.Tooltip("bin:N"),
                alt.Tooltip("share:Q", format=formats.tooltip_format(True)),
                alt.Tooltip("count:Q", format=","),
            ],
        )
    )
    drawn = frames.unit((bars, frame.assign(inputs=chart.label)))
    top_level = {"title": chart.title, "height": HEIGHT, "autosize": FIT_WIDTH}
    return {"$schema": alt.SCHEMA_URL, **top_level, **drawn, "datasets": frames.named}


def draw(
    chart: Chart | Bars,
    frame: pd.DataFrame,
    *,
    order: Sequence[str] | None = None,
    threshold: float | None = None,
    rule_label: str | None = None,
    events: pd.DataFrame | None = None,
    rules: Mapping[str, float] | None = None,
    ticks: pd.DataFrame | None = None,
    seconds: bool = False,
) -> Spec:
    """The chart `chart` describes, of `frame`: for a line chart with a rule at
    `threshold` (a band chart's only) and the `events` marked, times to the second when
    `seconds`; for bars with the `rules` and `ticks` (`bars`)."""
    if isinstance(chart, Bars):
        return bars(chart, frame, rules=rules, ticks=ticks)
    if chart.band is not None:
        return band_lines(
            frame,
            chart,
            order=order,
            threshold=threshold,
            rule_label=rule_label,
            events=events,
            seconds=seconds,
        )
    return lines(frame, chart, order=order, events=events, seconds=seconds)


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
