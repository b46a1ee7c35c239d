"""What a `review` key must never read (issue 26, "Blind everywhere"): a model name, a side
named as the side of an answer, what was served, or the router's decision. Shared by the
scan of every endpoint a review key reaches and the eval-set page's download test."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from typing import Any

# A key naming a side, a model, what was served or the router's decision (`edge_output`,
# `cloud_model`, `served`, `a_is_edge`, `decision`).
SIDE_KEY = re.compile(r"edge|cloud|served|model|^decision$", re.IGNORECASE)
# What was served, said in words.
SERVED = re.compile(r"\bserved\b", re.IGNORECASE)
# A value naming a side: "edge" or "cloud" alone, or a word built on one
# (`consensus:edge_correct`, `cloud_decided`, `edge_error`).
SIDE_VALUE = re.compile(r"^\s*(edge|cloud)\s*$|\b(edge|cloud)_[a-z]", re.IGNORECASE)


def leaks(value: Any, models: Iterable[str], path: str = "$") -> list[str]:
    """Where a JSON value names a side, a model or `served` (JSON paths, with what is there);
    empty when it names none. Strings holding JSON are read as JSON too."""
    found: list[str] = []
    names = [m.lower() for m in models]
    if isinstance(value, dict):
        for key, inner in value.items():
            if SIDE_KEY.search(str(key)):
                found.append(f"{path}: key {key!r}")
            found += leaks(inner, names, f"{path}.{key}")
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += leaks(inner, names, f"{path}[{i}]")
    elif isinstance(value, str):
        low = value.lower()
        found += [f"{path}: model {m!r}" for m in names if m in low]
        if SIDE_VALUE.search(value) or SERVED.search(value):
            found.append(f"{path}: {value[:80]!r}")
        if value[:1] in "{[":
            try:
                found += leaks(json.loads(value), names, f"{path}<json>")
            except ValueError:
                pass
    return found


def model_leaks(text: str, models: Iterable[str]) -> list[str]:
    """The model names a text holds."""
    return [f"model {m!r}" for m in models if m.lower() in text.lower()]


def text_leaks(text: str, models: Iterable[str]) -> list[str]:
    """`leaks` of an answer body: JSON, NDJSON (each line), or plain text."""
    try:
        return leaks(json.loads(text), models)
    except ValueError:
        pass
    lines = text.splitlines()
    try:
        return [x for i, line in enumerate(lines) for x in leaks(json.loads(line), models, f"{i}")]
    except ValueError:
        return leaks(text, models)


def csv_leaks(data: bytes, models: Iterable[str]) -> list[str]:
    """`leaks` of a CSV file: its header's column names as keys, every cell as a value."""
    rows = list(csv.reader(io.StringIO(data.decode())))
    if not rows:
        return []
    header, cells = rows[0], [cell for row in rows[1:] for cell in row]
    return leaks(dict.fromkeys(header, ""), models) + leaks(cells, models)


# The keys of a blind eval line: what a review key reads of an eval item.
BLIND_KEYS = {
    "id",
    "task",
    "layer",
    "input",
    "a",
    "b",
    "expected",
    "bucket",
    "failure_class",
    "tags",
}
