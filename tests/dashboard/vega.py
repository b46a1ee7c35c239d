"""What makes Vega warn in the browser console, or a chart misread, checked on a Vega-Lite
spec without a browser: a quantitative field with no value in its layer's data (Vega's
"Infinite extent for field"), two layers giving one legend different properties
("Conflicting legend property"), a time read in the browser's local time, an area that
is not a band, a chart without a legend."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import jsonschema
import pandas as pd
import pyarrow as pa
from altair.vegalite.v6.schema import load_schema
from streamlit.testing.v1 import AppTest

Spec = Mapping[str, Any]
# The channels a legend is drawn for.
LEGEND_CHANNELS = ("color", "fill", "stroke", "strokeDash", "shape", "size", "opacity")
POSITION = ("x", "y", "x2", "y2")


def units(spec: Spec, group: tuple[int, ...] = ()) -> Iterator[tuple[Spec, dict[str, tuple]]]:
    """Every single-mark spec within `spec`, with, per legend channel, the scope whose
    scale (and so legend) it shares: a layer resolving a channel independently gives each
    of its children a scope of its own."""
    yield from _units(spec, {c: () for c in LEGEND_CHANNELS})


def _units(spec: Spec, scopes: dict[str, tuple]) -> Iterator[tuple[Spec, dict[str, tuple]]]:
    if "layer" not in spec:
        yield spec, scopes
        return
    independent = (spec.get("resolve") or {}).get("scale") or {}
    for k, child in enumerate(spec["layer"]):
        inner = {
            c: (*scope, k) if independent.get(c) == "independent" else scope
            for c, scope in scopes.items()
        }
        yield from _units(child, inner)


def _data(unit: Spec, datasets: Mapping[str, Any]) -> pd.DataFrame | None:
    name = (unit.get("data") or {}).get("name")
    if name is None or name not in datasets:
        return None
    found = datasets[name]
    return found if isinstance(found, pd.DataFrame) else pd.DataFrame(found)


def _fields(encoding: Mapping[str, Any], channel: str) -> list[Mapping[str, Any]]:
    value = encoding.get(channel)
    if value is None:
        return []
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, dict)]


def _is_utc(definition: Mapping[str, Any], *, axis: bool) -> bool:
    """Whether a time is written in UTC: a UTC time unit (Vega-Lite then formats with
    utcFormat), or on an axis a UTC scale labelled with utcFormat. Vega-Lite takes
    `formatType: "utc"` for a custom format and writes NaN: never UTC."""
    if definition.get("formatType") is not None:
        return False
    if str(definition.get("timeUnit", "")).startswith("utc"):
        return True
    if axis:
        label = (definition.get("axis") or {}).get("labelExpr", "")
        scale = (definition.get("scale") or {}).get("type")
        return scale == "utc" and "utcFormat" in label and "timeFormat(" not in label
    return False


def problems(spec: Spec, datasets: Mapping[str, Any]) -> list[str]:
    """What is wrong with the chart `spec` whose data are `datasets` (by name): empty when
    Vega draws it without a warning, in UTC, with a legend, its areas bands."""
    found: list[str] = []
    legends: dict[tuple[str, tuple, str], list[Any]] = {}
    for unit, scopes in units(spec):
        mark = unit.get("mark")
        kind = mark.get("type") if isinstance(mark, dict) else mark
        encoding = unit.get("encoding") or {}
        data = _data(unit, datasets)
        for channel in POSITION:
            for d in _fields(encoding, channel):
                field = d.get("field")
                if d.get("type") == "quantitative" and field and data is not None:
                    if field not in data.columns or data[field].isna().all():
                        found.append(f"{kind}: no value of {field} (an infinite extent)")
                if d.get("type") == "temporal" and not _is_utc(d, axis=True):
                    found.append(f"{kind}: {channel} {field} is read in local time")
        for d in _fields(encoding, "tooltip"):
            if d.get("type") == "temporal" and not _is_utc(d, axis=False):
                found.append(f"{kind}: the tooltip's {d.get('field')} is in local time")
        for channel in LEGEND_CHANNELS:
            for d in _fields(encoding, channel):
                if d.get("field"):
                    key = (channel, scopes.get(channel, ()), d["field"])
                    legends.setdefault(key, []).append(d.get("legend", "default"))
        if kind == "area":
            y = encoding.get("y") or {}
            if "y2" not in encoding or y.get("stack", "stacked") is not None:
                found.append("area: not a band (stacked, or without y2)")
            if not isinstance(mark, dict) or mark.get("opacity", 1) > 0.2:
                found.append("area: not a light band")
    for (channel, _, field), given in legends.items():
        if any(g != given[0] for g in given):
            found.append(f"conflicting legends for {channel} {field}: {given}")
    if not any(g is not None for given in legends.values() for g in given):
        found.append("no legend")
    return found


def titled(spec: Spec) -> str | None:
    """The chart's title as text."""
    title = spec.get("title")
    return title.get("text") if isinstance(title, dict) else title


Drawn = tuple[dict[str, Any], dict[str, pd.DataFrame]]


def charts_on(at: AppTest) -> dict[str | None, Drawn]:
    """Every Vega-Lite chart the page drew, by title: its spec and its datasets by name."""
    out = {}
    for element in at.get("vega_lite_chart"):
        proto: Any = element.proto
        spec = json.loads(proto.spec)
        data = {d.name: pa.ipc.open_stream(d.data.data).read_pandas() for d in proto.datasets}
        out[titled(spec)] = (spec, data)
    return out


def layer_data(chart: Drawn, mark: str) -> list[pd.DataFrame]:
    """The data of the chart's single-mark specs drawn with `mark` (within layers within
    layers too)."""
    spec, data = chart
    marks = [unit for unit, _ in units(spec) if unit["mark"]["type"] == mark]
    return [data[unit["data"]["name"]] for unit in marks]


@cache
def _validator() -> Any:
    schema = load_schema()
    return jsonschema.validators.validator_for(schema)(schema)


def _rows(datasets: Mapping[str, pd.DataFrame]) -> dict[str, list[Any]]:
    """Frames as Vega-Lite receives them: rows of JSON, times in ISO 8601."""
    return {
        name: json.loads(frame.to_json(orient="records", date_format="iso"))
        for name, frame in datasets.items()
    }


def schema_problems(spec: Spec, datasets: Mapping[str, pd.DataFrame]) -> list[str]:
    """Where a chart breaks Vega-Lite's schema (each place, and why), its data as sent. A
    spec fits one of several shapes (a layer, a single view...): each error is followed into
    the shape that read furthest into it, so it names the place within it, not the spec's root."""
    sent = {**spec, "datasets": _rows(datasets)}
    found = []
    for error in _validator().iter_errors(sent):
        while error.context:  # the branch that read furthest into the spec
            error = max(error.context, key=lambda e: len(e.absolute_path))
        found.append(f"{'/'.join(map(str, error.absolute_path))}: {error.message[:200]}")
    return found


def as_sent(spec: Spec) -> dict[str, Any]:
    """A chart of shadowplane_dashboard/charts.py as Vega-Lite receives it, its frames as rows of JSON,
    checked against Vega-Lite's schema (the dashboard does not validate on every render)."""
    assert schema_problems(spec, spec["datasets"]) == []
    return {**spec, "datasets": _rows(spec["datasets"])}
