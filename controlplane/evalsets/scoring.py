"""Scoring runs of a model on an eval set (pure): a run is one line per item (`id`, `output`,
optional `model`); an output is right when the task's comparator calls it `agree` with the
item's `expected` answer (the expected answer stands where the cloud reference stands in
shadow traffic).

Two runs on the same items are compared per layer and length bucket, with the paired
difference of their accuracies and its 95% interval (Newcombe's method 10 for paired
proportions, built from the Wilson intervals of each run: it stays inside [-1, 1] and is
sensible at 0 and n discordant items, where the plain normal interval is not).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.compare.comparators import compare
from controlplane.compare.jsonutil import loads
from controlplane.http import JsonShape
from controlplane.metrics.stats import wilson

ALL = "all"
# A run file's bounds: the bytes of one line and the number of lines.
MAX_LINE_BYTES = 1 << 20
MAX_LINES = 1_000_000
# A line nested deeper than this is refused before it is parsed (the comparators do not
# walk deeper JSON either).
MAX_DEPTH = 64
# At most this many ids are named in a refusal; the counts say how many there were.
NAMED = 5


class RunError(ValueError):
    """A run that cannot be scored; the message names the line, the field and why."""


@dataclass(frozen=True, slots=True)
class Run:
    outputs: dict[str, Any]
    model: str | None


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    layer: str
    bucket: str
    expected: Any


@dataclass
class Score:
    n: int = 0
    correct: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.n if self.n else None

    def view(self) -> dict[str, Any]:
        return {"n": self.n, "correct": self.correct, "accuracy": self.accuracy}


@dataclass
class RunScore:
    total: Score = field(default_factory=Score)
    per_bucket: dict[str, Score] = field(default_factory=dict)
    right: dict[str, bool] = field(default_factory=dict)


def _row(raw: str | bytes, where: str) -> Any:
    """One line parsed; RunError (naming `where`) for a line too long, not UTF-8, nested
    deeper than MAX_DEPTH, or not JSON."""
    data = raw.encode() if isinstance(raw, str) else raw
    if len(data) > MAX_LINE_BYTES:
        raise RunError(f"{where}: longer than {MAX_LINE_BYTES} bytes")
    # Checked before parsing: the parser recurses once per level.
    if problem := JsonShape(MAX_DEPTH).feed(data, final=True):
        raise RunError(f"{where}: {problem.removeprefix('body: ')}")
    try:
        return loads(data.decode())
    except ValueError:
        raise RunError(f"{where}: not a JSON object") from None


def read_run(lines: Iterable[str | bytes], *, source: str = "run") -> Run:
    """A run from its JSONL lines; RunError names the line and what is wrong with it (a
    line that is no object, no `id` or `output`, an id given twice, two `model`s, a line
    longer than MAX_LINE_BYTES, not UTF-8 or nested deeper than MAX_DEPTH, more than
    MAX_LINES lines, no line at all)."""
    outputs: dict[str, Any] = {}
    models: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        if number > MAX_LINES:
            raise RunError(f"{source}: more than {MAX_LINES} lines")
        if not raw.strip():
            continue
        row = _row(raw, f"{source}:{number}")
        if not isinstance(row, dict):
            raise RunError(f"{source}:{number}: not a JSON object")
        rid = row.get("id")
        if not isinstance(rid, str) or not rid:
            raise RunError(f"{source}:{number}: id: missing or not a string")
        if "output" not in row:
            raise RunError(f"{source}:{number}: output: missing (null is an output; give it)")
        if rid in outputs:
            raise RunError(f"{source}:{number}: id: {rid} is given twice")
        model = row.get("model")
        if model is not None:
            if not isinstance(model, str):
                raise RunError(f"{source}:{number}: model: not a string")
            models.add(model)
        outputs[rid] = row["output"]
    if not outputs:
        raise RunError(f"{source}: no lines: a run answers every item of an eval set, one a line")
    if len(models) > 1:
        raise RunError(f"{source}: model: one run is one model; found {', '.join(sorted(models))}")
    return Run(outputs, next(iter(models), None))


def read_run_file(path: Path) -> Run:
    """A run from a JSONL file, read line by line (a line is never read past
    MAX_LINE_BYTES); RunError names the file, the line and the problem."""
    source = str(path)

    def lines() -> Iterator[bytes]:
        with path.open("rb") as handle:
            number = 0
            while raw := handle.readline(MAX_LINE_BYTES + 2):
                number += 1
                line = raw.rstrip(b"\r\n")
                if len(line) > MAX_LINE_BYTES:
                    raise RunError(f"{source}:{number}: longer than {MAX_LINE_BYTES} bytes")
                yield line

    return read_run(lines(), source=source)


def _named(ids: Iterable[str]) -> str:
    ids = sorted(ids)
    shown = ", ".join(ids[:NAMED])
    return f"{len(ids)} ({shown}{', …' if len(ids) > NAMED else ''})"


def same_items(expected: Iterable[str], given: Iterable[str], *, what: str, against: str) -> None:
    """RunError unless `given` holds exactly the ids of `expected`, naming what differs."""
    want, got = set(expected), set(given)
    if want == got:
        return
    parts = []
    if missing := want - got:
        parts.append(f"{_named(missing)} of {against} missing from {what}")
    if extra := got - want:
        parts.append(f"{_named(extra)} in {what} not in {against}")
    raise RunError(f"{what} and {against} hold different items: " + "; ".join(parts))


def is_right(spec: Mapping[str, Any], output: Any, expected: Any) -> bool:
    """The task's comparator says the output agrees with the expected answer."""
    return compare(spec, output, expected).outcome == "agree"


def score(spec: Mapping[str, Any], items: Sequence[Item], run: Run) -> RunScore:
    """Accuracy of the run on the items (every item must have an output), overall and per
    length bucket."""
    out = RunScore()
    for item in items:
        right = is_right(spec, run.outputs[item.id], item.expected)
        out.right[item.id] = right
        for s in (out.total, out.per_bucket.setdefault(item.bucket, Score())):
            s.n += 1
            s.correct += right
    out.per_bucket = dict(sorted(out.per_bucket.items()))
    return out


@dataclass(frozen=True, slots=True)
class Paired:
    n: int
    a: float | None
    b: float | None
    # b - a and its interval; None without items.
    diff: float | None
    low: float | None
    high: float | None
    # Items only A got right, only B got right.
    only_a: int
    only_b: int


def paired(a_right: Sequence[bool], b_right: Sequence[bool], z: float = 1.959964) -> Paired:
    """Accuracies of A and B on the same items and B − A with Newcombe's interval."""
    n = len(a_right)
    both = sum(1 for x, y in zip(a_right, b_right, strict=True) if x and y)
    only_a = sum(1 for x, y in zip(a_right, b_right, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a_right, b_right, strict=True) if y and not x)
    neither = n - both - only_a - only_b
    if n == 0:
        return Paired(0, None, None, None, None, None, 0, 0)
    p1, p2 = (both + only_a) / n, (both + only_b) / n
    w1, w2 = wilson(both + only_a, n, z), wilson(both + only_b, n, z)
    assert w1 is not None and w2 is not None
    (l1, u1), (l2, u2) = w1, w2
    margins = (both + only_a) * (only_b + neither) * (both + only_b) * (only_a + neither)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins else 0.0
    diff = p2 - p1
    below = math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    above = math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return Paired(n, p1, p2, diff, max(-1.0, diff - below), min(1.0, diff + above), only_a, only_b)


def compare_runs(
    spec: Mapping[str, Any], items: Sequence[Item], a: Run, b: Run
) -> list[dict[str, Any]]:
    """Rows per layer and bucket (then each layer's `all`, then `all`/`all`): n, A's and
    B's accuracy, B − A with its paired interval. Both runs must answer every item."""
    sa, sb = score(spec, items, a), score(spec, items, b)
    groups: dict[tuple[str, str], list[str]] = {}
    overall: set[str] = set()
    for item in items:
        for key in ((item.layer, item.bucket), (item.layer, ALL)):
            groups.setdefault(key, []).append(item.id)
        # An input may sit in two layers (boundary and regression): once in `all`/`all`.
        if item.id not in overall:
            overall.add(item.id)
            groups.setdefault((ALL, ALL), []).append(item.id)

    def order(key: tuple[str, str]) -> tuple[int, str, int, str]:
        layer, bucket = key
        return (layer == ALL, layer, bucket == ALL, bucket)

    rows = []
    for layer, bucket in sorted(groups, key=order):
        ids = groups[(layer, bucket)]
        p = paired([sa.right[i] for i in ids], [sb.right[i] for i in ids])
        rows.append(
            {
                "layer": layer,
                "bucket": bucket,
                "n": p.n,
                "a": p.a,
                "b": p.b,
                "diff": p.diff,
                "low": p.low,
                "high": p.high,
                "only_a": p.only_a,
                "only_b": p.only_b,
            }
        )
    return rows
