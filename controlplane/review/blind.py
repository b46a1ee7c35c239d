"""What a reviewer sees of an item (pure): the two answers as A and B in the item's hidden
order, each in one normalised form (`shown_answer`), the comparator's diff rewritten in A/B
terms, a note when every difference shown is on a field the reference itself changes
between runs (docs/review.md, "Noisy fields"), and nothing else (docs/review.md,
"Blindness").

Diffs are rewritten by their known shapes (controlplane.compare.comparators); a key the
rewrite does not know is dropped rather than shown, so a new comparator shape must be
added here before reviewers see it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from controlplane.compare.comparators import canonical, normalise_label, text_too_deep
from controlplane.compare.jsonutil import loads
from controlplane.compare.redaction import TRUNCATED, TYPES

# The comparators' per-check entries whose values compare the two sides.
_SIDE_CHECKS = ("label", "too_long", "sentences", "length_ratio", "negations", "numbers", "spans")
# Keys of a per-check entry that may be shown once the sides are renamed.
_NEUTRAL_KEYS = ("max_chars",)


class BlindItem(Protocol):
    id: int
    kind: str
    a_is_edge: bool
    # The comparator kind the item was compared with: it decides the answers' shown form.
    comparator: str
    input: Any
    edge_output: Any
    cloud_output: Any
    diff: Any
    lease_expires_at: datetime | None
    # The payload policy the item was stored under: only `redacted` text holds placeholders.
    policy: str


def _shown(item: BlindItem) -> list[Any]:
    """Input, A, B (each in its shown form) and the A/B diff (its values too)."""
    if item.kind == "single":
        a, b, diff = item.cloud_output, None, None
    elif item.a_is_edge:
        a, b, diff = item.edge_output, item.cloud_output, blind_diff(item.diff, True)
    else:
        a, b, diff = item.cloud_output, item.edge_output, blind_diff(item.diff, False)
    kind = item.comparator
    shown_b = None if item.kind == "single" else shown_answer(kind, b)
    return [item.input, shown_answer(kind, a), shown_b, shown_diff(kind, diff)]


# --- one shown form for both answers -------------------------------------------------------
#
# Two models format the same answer differently (" Refund " and "refund", keys in another
# order, JSON sent as text or as an object): shown as sent, the formatting names the model.
# Both answers are shown as the comparator reads them, so what tells them apart is only
# what the comparator judges.

# A placeholder of a masked value in any case (a label is case-folded: its placeholders
# are given back their upper case, so the renumbering still finds them).
_ANY_CASE_PLACEHOLDER = re.compile(
    rf"<({'|'.join(TYPES)}|{TRUNCATED})_([0-9]{{1,9}})>", re.IGNORECASE
)


def shown_answer(comparator: str | None, value: Any) -> Any:
    """An answer in the one form a reviewer is shown, whichever side gave it:
    `label`: as the comparator reads it (case-folded, spaces collapsed: normalise_label);
    `text_conservation`: surrounding whitespace trimmed; `json_fields`: the object (JSON
    text of one is read as the comparator reads it) with its text fields' spaces collapsed
    as the comparator compares them; every JSON value canonical (keys sorted, a whole
    float as an integer). `exact` compares text as it is, so its text is shown as it is."""
    if comparator == "label" and (label := normalise_label(value)) is not None:
        return _ANY_CASE_PLACEHOLDER.sub(lambda m: f"<{m[1].upper()}_{m[2]}>", label)
    if comparator == "text_conservation" and isinstance(value, str):
        return value.strip()
    if comparator == "json_fields":
        found = _json_object(value)
        if found is not None:
            return {k: _field(found[k]) for k in sorted(found)}
        return value.strip() if isinstance(value, str) else _canonical(value)
    if comparator == "exact" or not isinstance(value, str):
        return _canonical(value)
    return value.strip()


def shown_diff(comparator: str | None, diff: Any) -> Any:
    """A blind diff whose answer values are in their shown form (`shown_answer`): the labels
    of a label diff, the two values of each differing json_fields field."""
    if not isinstance(diff, dict):
        return diff
    out = dict(diff)
    if isinstance(out.get("label"), dict):
        out["label"] = {k: shown_answer("label", v) for k, v in out["label"].items()}
    if isinstance(out.get("fields"), dict):
        out["fields"] = {
            name: {k: _field(v) for k, v in pair.items()} if isinstance(pair, dict) else pair
            for name, pair in out["fields"].items()
        }
    return out


def _json_object(value: Any) -> dict[str, Any] | None:
    """The object json_fields reads from an answer: the object itself, or JSON text of one."""
    if isinstance(value, str) and not text_too_deep(value):
        try:
            value = loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _field(value: Any) -> Any:
    """A json_fields field value as the comparator compares it: text with its spaces
    collapsed, any other value canonical."""
    return " ".join(value.split()) if isinstance(value, str) else _canonical(value)


def _canonical(value: Any) -> Any:
    """A JSON value with keys sorted at every depth and whole floats as integers (as the
    comparators compare them); as it is when it nests too deep to be compared."""
    try:
        value = canonical(value)
    except ValueError:
        return value
    return _sorted(value)


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _as_shown(item: BlindItem) -> list[Any]:
    """`_shown`, with placeholders of masked values numbered in the order shown, not the
    order masked. Text stored under `full` was never masked: placeholder-like text in it is
    the sender's own and is shown as it is."""
    shown = _shown(item)
    return renumber(shown) if item.policy == "redacted" else shown


def shown_answers(item: BlindItem) -> tuple[Any, Any]:
    """Answers A and B exactly as the item's view shows them (B None for a single item):
    what a message to the reviewer may quote, since the stored text's placeholder numbers
    follow the sides."""
    shown = _as_shown(item)
    return shown[1], shown[2]


def view(item: BlindItem, task: str, noisy: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The blind view of a claimed item; `noisy`: the task's noisy fields or checks now
    (controlplane.metrics.noise.noisy_fields), for the item's `note`."""
    shown = _as_shown(item)
    lease = item.lease_expires_at
    return {
        "id": item.id,
        "task": task,
        "kind": item.kind,
        "input": shown[0],
        "a": shown[1],
        "b": shown[2],
        "diff": shown[3],
        "note": noise_note(shown[3], noisy),
        "lease_expires_at": lease.isoformat().replace("+00:00", "Z") if lease else None,
    }


def differing(diff: Any) -> list[str]:
    """The fields (json_fields) or checks (text_conservation) a blind diff shows the two
    answers differing on; empty when it shows anything else too (an answer breaking the
    schema, a label, JSON paths, a length cap), which no repeat pair measures. Read from
    the blind diff, so a check the view hides never counts (its absence says nothing)."""
    if not isinstance(diff, dict) or not diff:
        return []
    fields = diff.get("fields")
    if set(diff) == {"fields"} and isinstance(fields, dict):
        return sorted(str(name) for name in fields)
    failed = diff.get("failed")
    if isinstance(failed, list) and set(diff) <= {"failed", *failed}:
        return sorted(str(name) for name in failed)
    return []


def noise_note(diff: Any, noisy: Sequence[Mapping[str, Any]]) -> str | None:
    """A sentence for the reviewer when every difference the blind diff shows is on a field
    or check that the same model changes between two answers to the same input more often
    than the task's `grading.noisy_field_rate`; else None. Names no side."""
    names = differing(diff)
    rates = {str(n["name"]): float(n["rate"]) for n in noisy}
    if not names or not all(name in rates for name in names):
        return None
    shares = [f"{rates[name]:.0%}" for name in names]
    if len(names) == 1:
        return (
            f"These answers differ only on {names[0]}, which varies between two runs of the "
            f"same model on the same input in {shares[0]} of repeats."
        )
    return (
        f"These answers differ only on {_listed(names)}, which vary between two runs of the "
        f"same model on the same input in {_listed(shares)} of repeats respectively."
    )


def _listed(words: Sequence[str]) -> str:
    return ", ".join(words[:-1]) + f" and {words[-1]}"


def blind_diff(diff: Any, a_is_edge: bool) -> Any:
    """A comparator's diff with the sides named A and B; None when nothing in it may be
    shown."""
    if not isinstance(diff, dict):
        return None
    names = {"edge": "a" if a_is_edge else "b", "cloud": "b" if a_is_edge else "a"}
    hidden = set() if _length_fails_both_ways(diff.get("length_ratio")) else {"length_ratio"}
    out: dict[str, Any] = {}
    for key, value in diff.items():
        if key in hidden:
            continue
        if key in names:
            # The side whose output broke the schema, and why.
            out[names[key]] = value
        elif key in _SIDE_CHECKS:
            out[key] = _sides(value, names)
        elif key == "fields" and isinstance(value, dict):
            out[key] = {str(field): _sides(pair, names) for field, pair in value.items()}
        elif key == "failed" and isinstance(value, list):
            # Check names: they do not say which side is which (a hidden check left out).
            out[key] = [name for name in value if name not in hidden]
        elif key == "paths" and isinstance(value, list):
            # JSON paths of the outputs: they do not say which side is which.
            out[key] = value
    if not out or out.get("failed") == [] and len(out) == 1:
        return None
    # The output order stays hidden only if the keys do not give it away either.
    return {k: out[k] for k in sorted(out)}


def _length_fails_both_ways(check: Any) -> bool:
    """Whether text_conservation's length check (edge length over cloud length within
    [lo, hi]) fails whichever of the two answers is the edge's. Its bounds are asymmetric
    (0.7 and 1.4 by default, and 1 / 0.7 > 1.4): lengths in the ratio band between them
    fail only when the longer answer is the edge's, so showing that failure would name
    the edge. The blind view shows the check (the two lengths as A and B) only when it
    fails both ways round."""
    if not isinstance(check, dict):
        return False
    e, c, bounds = check.get("edge"), check.get("cloud"), check.get("bounds")
    if not (isinstance(e, int | float) and isinstance(c, int | float)):
        return False
    if not (isinstance(bounds, list) and len(bounds) == 2):
        return False
    lo, hi = bounds
    if not (isinstance(lo, int | float) and isinstance(hi, int | float)):
        return False

    def fails(edge: float, cloud: float) -> bool:
        if cloud == 0:
            return edge != 0  # an infinite ratio is outside any bounds
        return not lo <= edge / cloud <= hi

    return fails(e, c) and fails(c, e)


# A masked value's placeholder (controlplane.compare.redaction): its type and number.
# TRUNCATED counts dropped characters, not values, and is left as it is.
_PLACEHOLDER = re.compile(rf"<({'|'.join(TYPES)})_([0-9]{{1,6}})>")


# The same in a diff, where text_conservation's spans check lists placeholders without
# their brackets (`EMAIL_2`): bracketed or bare as a whole token.
_DIFF_PLACEHOLDER = re.compile(
    rf"<({'|'.join(TYPES)})_([0-9]{{1,6}})>"
    rf"|(?<![A-Za-z0-9_])({'|'.join(TYPES)})_([0-9]{{1,6}})(?![A-Za-z0-9_])"
)


def renumber(values: list[Any], diff_at: int | None = 3) -> list[Any]:
    """The values (input, A, B, diff) with each masked placeholder renumbered per type by
    first appearance, reading the values in the order given (a bijection: one value keeps
    one number across all of them, the diff's bare `TYPE_N` tokens included; `diff_at`:
    where the diff is among the values, None when there is none). The masker numbers
    values in the order it masks the fields (input, edge output, cloud output), so its
    numbers would tell the sides apart."""
    numbers = numbering(values, diff_at)
    return [
        _rewrite(v, lambda kind, n: str(numbers[(kind, n)]), diff=i == diff_at)
        for i, v in enumerate(values)
    ]


def numbering(values: list[Any], diff_at: int | None = 3) -> dict[tuple[str, str], int]:
    """`renumber`'s mapping: (type, stored number as written) -> number shown."""
    numbers: dict[tuple[str, str], int] = {}
    counts: dict[str, int] = {}

    def see(kind: str, n: str) -> str:
        if (kind, n) not in numbers:
            counts[kind] = counts.get(kind, 0) + 1
            numbers[(kind, n)] = counts[kind]
        return n

    for i, value in enumerate(values):
        _rewrite(value, see, diff=i == diff_at)
    return numbers


def stored_numbering(item: BlindItem, value: Any) -> Any:
    """A value written against the item's blind view (a reviewer's correction) with the
    placeholders renumbered back to the numbers the item's stored text uses (the inverse
    of the view's renumbering); unchanged for an item not stored `redacted`. Raises
    ValueError naming a placeholder the view never showed: it stands for no known value."""
    if item.policy != "redacted":
        return value
    inverse = {(kind, str(shown)): n for (kind, n), shown in numbering(_shown(item)).items()}

    def back(kind: str, n: str) -> str:
        key = (kind, str(int(n)))
        if key not in inverse:
            raise ValueError(f"<{kind}_{n}> is not a placeholder this item shows")
        return inverse[key]

    return _rewrite(value, back)


def _rewrite(value: Any, replace: Callable[[str, str], str], *, diff: bool = False) -> Any:
    """The value with every placeholder's number replaced by replace(type, number as
    written), in reading order (dict keys before their values); `diff`: bare tokens too."""
    pattern = _DIFF_PLACEHOLDER if diff else _PLACEHOLDER

    def sub(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return f"<{match.group(1)}_{replace(match.group(1), match.group(2))}>"
        return f"{match.group(3)}_{replace(match.group(3), match.group(4))}"

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(sub, value) if diff or "<" in value else value
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        return value

    return walk(value)


def _sides(value: Any, names: dict[str, str]) -> Any:
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    for key, inner in value.items():
        if key in names:
            out[names[key]] = inner
        elif key == "missing":
            # In the cloud (reference) answer and not in the edge's.
            out[f"only_in_{names['cloud']}"] = inner
        elif key == "extra":
            out[f"only_in_{names['edge']}"] = inner
        elif key in _NEUTRAL_KEYS:
            out[key] = inner
    return {k: out[k] for k in sorted(out)}
