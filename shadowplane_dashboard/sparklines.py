"""Sparklines: a rate over time as a small inline SVG (no axes), drawn crisp at any width.

Pure: values in, SVG text out. The text holds only what this module writes (numbers and the
caller's label, HTML-escaped), so a page may show it as HTML."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from shadowplane_dashboard.formats import coordinate

# The drawing's own units; the SVG stretches to its cell's width and keeps its height.
WIDTH = 120
HEIGHT = 28
PAD = 3
# A rate's scale spans at least this much, so noise of a point or two does not fill it.
MIN_SPAN = 0.05
COLOURS = {"agreement": "#1f77b4", "edge_share": "#2ca02c"}


def _scale(values: Sequence[float]) -> tuple[float, float]:
    """The rates' range, widened about its middle to MIN_SPAN and kept within 0–1."""
    low, high = min(values), max(values)
    if high - low < MIN_SPAN:
        middle = (low + high) / 2
        low, high = middle - MIN_SPAN / 2, middle + MIN_SPAN / 2
        if low < 0:
            low, high = 0.0, MIN_SPAN
        if high > 1:
            low, high = 1 - MIN_SPAN, 1.0
    return low, high


def points(series: Sequence[tuple[datetime, float | None]]) -> list[list[tuple[float, float]]]:
    """The drawing's coordinates, in runs broken where a point has no value: x by time
    from the first point to the last, y by value (higher is up)."""
    known = [value for _, value in series if value is not None]
    if not known:
        return []
    low, high = _scale(known)
    first, last = series[0][0], series[-1][0]
    seconds = (last - first).total_seconds()
    runs: list[list[tuple[float, float]]] = [[]]
    for at, value in series:
        if value is None:
            if runs[-1]:
                runs.append([])
            continue
        x = PAD + (WIDTH - 2 * PAD) * ((at - first).total_seconds() / seconds if seconds else 1)
        y = PAD + (HEIGHT - 2 * PAD) * (high - value) / (high - low)
        runs[-1].append((coordinate(x), coordinate(y)))
    return [run for run in runs if run]


def sparkline(series: Sequence[tuple[datetime, float | None]], *, name: str, label: str) -> str:
    """The SVG of one rate's series (oldest first): a line per run of points with values, a
    dot on a lone point and on the newest; `name` picks the colour and is the element's
    class; `label` is what a screen reader and a hover say. Empty text without a value."""
    runs = points(series)
    if not runs:
        return ""
    colour = COLOURS.get(name, "currentColor")
    said = escape(label, quote=True)
    marks = []
    for run in runs:
        if len(run) == 1:
            ((x, y),) = run
            marks.append(f'<circle cx="{x}" cy="{y}" r="1.5" fill="{colour}"/>')
            continue
        path = " ".join(f"{'M' if i == 0 else 'L'}{x},{y}" for i, (x, y) in enumerate(run))
        marks.append(
            f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="1.5" '
            'stroke-linejoin="round" vector-effect="non-scaling-stroke"/>'
        )
    x, y = runs[-1][-1]
    marks.append(f'<circle cx="{x}" cy="{y}" r="2" fill="{colour}"/>')
    count = sum(len(run) for run in runs)
    return (
        f'<svg class="sparkline {escape(name, quote=True)}" data-points="{count}" '
        f'role="img" aria-label="{said}" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" '
        f'height="{HEIGHT}" preserveAspectRatio="none" style="display:block;max-width:{WIDTH}px">'
        f"<title>{said}</title>{''.join(marks)}</svg>"
    )
