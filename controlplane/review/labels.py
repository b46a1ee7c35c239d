"""What labels mean (pure): a reviewer's verdict resolved to the sides, and the consensus of
an item's reviewers that route accuracy, calibration and eval sets read.

Pair verdicts are given in A/B terms (`a_correct`, `b_correct`, `both_correct`,
`both_wrong`, `unclear`) and stored resolved to the sides (`edge_correct`,
`cloud_correct`, ...) with the item's hidden order; single-answer items ("is this answer
right?", the answer shown being the cloud's) take `correct`, `wrong`, `unclear`.

A pair verdict may not contradict the task's comparator (`contradiction`): an answer it
calls invalid is never right, and under an exact comparator two answers it reads as one
are right or wrong together, two it reads as different are never both right. Nor may a
correction beside `both_wrong` or `wrong` be, to an exact comparator, an answer the
verdict calls wrong (`wrong_correction`).

Labels are never edited: each reviewer's newest label on an item is their vote. The
consensus is the verdict most of the votes that are not `unclear` give; none, or a tie,
is `unclear` (a tie is what sends an item to one more reviewer).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from controlplane.compare.comparators import compare
from controlplane.compare.jsonutil import short_repr
from controlplane.review.blind import shown_answer

PAIR_VERDICTS = ("a_correct", "b_correct", "both_correct", "both_wrong", "unclear")
SINGLE_VERDICTS = ("correct", "wrong", "unclear")
# Resolved pair verdicts whose edge answer was right: the right route was the edge.
EDGE_RIGHT = ("edge_correct", "both_correct")


class LabelError(ValueError):
    """A verdict that does not fit the item; the message names the field and what is allowed."""


def resolve(verdict: str, *, kind: str, a_is_edge: bool) -> str:
    """The verdict in terms of the sides (pairs) or as given (singles)."""
    if kind == "single":
        if verdict not in SINGLE_VERDICTS:
            raise LabelError(
                f"verdict: {verdict!r} is not a verdict for a single answer; "
                f"one of {', '.join(SINGLE_VERDICTS)}"
            )
        return verdict
    if verdict not in PAIR_VERDICTS:
        raise LabelError(
            f"verdict: {verdict!r} is not a verdict for a pair; one of {', '.join(PAIR_VERDICTS)}"
        )
    if verdict == "a_correct":
        return "edge_correct" if a_is_edge else "cloud_correct"
    if verdict == "b_correct":
        return "cloud_correct" if a_is_edge else "edge_correct"
    return verdict


# Comparators that read two answers as one answer or as two different ones (a label
# normalised, JSON canonical, json_fields on its declared fields). A text rewrite is read
# by what it conserves: two different rewrites may both be right.
EXACT_COMPARATORS = ("label", "exact", "json_fields")
# The answers each pair verdict calls right.
CALLED_RIGHT = {"a_correct": ("A",), "b_correct": ("B",), "both_correct": ("A", "B")}
# At most this many differing fields or paths are named in a refusal.
NAMED = 5


def contradiction(verdict: str, spec: Mapping[str, Any] | None, a: Any, b: Any) -> str | None:
    """Why the pair verdict contradicts how the task's comparator (`spec`) reads answers A
    and B, as a sentence in A/B terms; None when it may stand (or without a spec).

    The eval set takes the answer called right as the expected one and scores runs with
    the comparator, so: an answer the comparator calls invalid is never right (no run
    could agree with it); under an exact comparator `both_correct` needs the two answers
    equal as it reads them, and `a_correct`/`b_correct` needs them different (one answer
    cannot be right and wrong at once). Answers too long to compare are not judged."""
    called = CALLED_RIGHT.get(verdict)
    if spec is None or called is None:
        return None
    kind = spec["kind"]
    for name, other, answer in (("A", "b", a), ("B", "a", b)):
        problem = invalid(spec, answer) if name in called else None
        if problem is not None:
            return (
                f"verdict: {verdict} calls {name} right, but {name} is not an answer this "
                f"task's {kind} comparator accepts ({problem}); choose {other}_correct, or "
                "both_wrong with the right answer as a correction"
            )
    if kind not in EXACT_COMPARATORS:
        return None
    found = compare(spec, a, b)
    if found.outcome is None:
        return None
    if verdict == "both_correct" and found.outcome != "agree":
        return (
            f"verdict: both_correct calls A and B right, but they are different answers to "
            f"this task's {kind} comparator ({_how_different(found.diff)}), so at most one "
            f"of them is right; choose a_correct, b_correct or both_wrong"
        )
    if verdict != "both_correct" and found.outcome == "agree":
        return (
            f"verdict: {verdict} calls only {called[0]} right, but A and B are the same "
            f"answer to this task's {kind} comparator ({_how_same(spec, a)}), so they are "
            "right or wrong together; choose both_correct or both_wrong"
        )
    return None


# The answers each verdict that takes a correction calls wrong (a single item's one answer
# is shown as A).
CALLED_WRONG = {"both_wrong": ("A", "B"), "wrong": ("A",)}


def wrong_correction(
    verdict: str, spec: Mapping[str, Any] | None, corrected: Any, a: Any, b: Any = None
) -> str | None:
    """Why the correction contradicts the verdict beside it, as a sentence in A/B terms;
    None when it may stand (or without a spec). Under an exact comparator a correction it
    reads as an answer the verdict calls wrong (`both_wrong`: A or B; `wrong`: the one
    answer shown, `a`) would make the eval set expect that answer while the label says it
    is wrong: name the verdict that says what the reviewer means instead."""
    called = CALLED_WRONG.get(verdict)
    if spec is None or called is None or spec["kind"] not in EXACT_COMPARATORS:
        return None
    answers = {"A": a, "B": b}
    same = [name for name in called if compare(spec, corrected, answers[name]).outcome == "agree"]
    if not same:
        return None
    kind = spec["kind"]
    if verdict == "wrong":
        shown, instead = "the answer shown", "correct"
    else:
        shown = " and ".join(same)
        instead = "both_correct" if len(same) == 2 else f"{same[0].lower()}_correct"
    # Not quoted: the reviewer wrote it, and under `redacted` the stored form's placeholder
    # numbers (which it is compared in) are not the ones the reviewer is shown.
    return (
        f"corrected: the same answer as {shown} to this task's {kind} comparator, which "
        f"{verdict} calls wrong; choose {instead}, or give the right answer as the correction"
    )


def invalid(spec: Mapping[str, Any], answer: Any) -> str | None:
    """What the task's comparator finds wrong with the answer (it does not agree with
    itself), or None when it is a valid answer or too long to compare."""
    found = compare(spec, answer, answer)
    if found.outcome in (None, "agree"):
        return None
    return why_not_accepted(found.diff)


def why_not_accepted(diff: Any) -> str:
    """The problem a comparator's diff of an answer compared with itself names."""
    if isinstance(diff, dict) and "edge" in diff:
        problem = diff["edge"]
        text = "; ".join(map(str, problem)) if isinstance(problem, list) else str(problem)
    elif isinstance(diff, dict) and isinstance(diff.get("too_long"), dict):
        text = f"longer than {diff['too_long'].get('max_chars')} characters"
    else:
        text = "it does not agree with itself"
    return text[:300]


def _named(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _how_different(diff: Any) -> str:
    """Where two valid answers differ, from the comparator's diff (of A against B)."""
    diff = diff if isinstance(diff, dict) else {}
    if isinstance(diff.get("label"), dict):
        pair = diff["label"]
        a, b = (short_repr(shown_answer("label", pair.get(side)), 60) for side in ("edge", "cloud"))
        return f"A reads {a}, B {b}"
    if isinstance(diff.get("fields"), dict):
        return f"they differ on {_named(sorted(diff['fields']))}"
    paths = [p for p in diff.get("paths") or [] if isinstance(p, str)]
    if paths and paths != ["$"]:
        return f"they differ at {_named(paths)}"
    return "they differ as a whole"


def _how_same(spec: Mapping[str, Any], a: Any) -> str:
    """What makes two answers one answer to the comparator."""
    kind = spec["kind"]
    if kind == "label":
        return f"both read {short_repr(shown_answer('label', a), 60)}"
    if kind == "json_fields":
        return f"it compares {_named(sorted(spec['fields']))}, and they hold the same values"
    return "the same JSON value once keys are sorted and 1.0 is read as 1"


def expected_answer(
    resolved: str, *, corrected: Any, edge_output: Any, cloud_output: Any
) -> tuple[bool, Any]:
    """The answer an eval item expects, from its reviewers' consensus: a reviewer's
    correction when one was given, else the right side's output (the cloud's, the
    reference, when both were right; a single item shows the cloud answer). `both_wrong`,
    `unclear` and `wrong` need a correction: (False, None) without one."""
    if corrected is not None:
        return True, corrected
    if resolved == "edge_correct":
        return True, edge_output
    if resolved in ("cloud_correct", "both_correct", "correct"):
        return True, cloud_output
    return False, None


def usable_answer(
    agreed: Consensus | None, spec: Mapping[str, Any] | None, edge_output: Any, cloud_output: Any
) -> bool:
    """Whether the consensus gives an expected answer a run could be right on: one at all
    (`expected_answer`), and one the task's comparator agrees with itself (an answer it
    calls invalid or too long to compare agrees with nothing). Without a spec there is
    nothing to judge the answer by: any answer is usable."""
    if agreed is None:
        return False
    ok, expected = expected_answer(
        agreed.resolved,
        corrected=agreed.corrected,
        edge_output=edge_output,
        cloud_output=cloud_output,
    )
    return ok and (spec is None or compare(spec, expected, expected).outcome == "agree")


class LabelLike(Protocol):
    id: int
    reviewer: str
    resolved: str
    failure_class: str | None
    corrected: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Consensus:
    # edge_correct | cloud_correct | both_correct | both_wrong | correct | wrong | unclear
    resolved: str
    failure_class: str | None
    corrected: Any
    # The votes counted: each reviewer's newest label, oldest reviewer first.
    reviewers: tuple[str, ...]
    label_ids: tuple[int, ...]
    # Whether the votes that are not `unclear` disagree.
    disagreement: bool


def votes(labels: Sequence[LabelLike]) -> list[LabelLike]:
    """Each reviewer's newest label (by id), in the order the reviewers first labelled."""
    newest: dict[str, LabelLike] = {}
    for label in sorted(labels, key=lambda lab: lab.id):
        newest[label.reviewer] = label
    return list(newest.values())


def consensus(labels: Sequence[LabelLike]) -> Consensus | None:
    """The item's verdict from its labels; None without labels."""
    counted = votes(labels)
    if not counted:
        return None
    clear = [v for v in counted if v.resolved != "unclear"]
    tally = Counter(v.resolved for v in clear).most_common()
    disagreement = len(tally) > 1
    if not tally or (len(tally) > 1 and tally[0][1] == tally[1][1]):
        resolved = "unclear"
        backing = counted
    else:
        resolved = tally[0][0]
        backing = [v for v in clear if v.resolved == resolved]
    newest_first = sorted(backing, key=lambda lab: lab.id, reverse=True)
    classes = Counter(v.failure_class for v in backing if v.failure_class)
    failure_class = None
    if classes:
        top = classes.most_common(1)[0][1]
        failure_class = next(
            v.failure_class
            for v in newest_first
            if v.failure_class and classes[v.failure_class] == top
        )
    corrected = next((v.corrected for v in newest_first if v.corrected is not None), None)
    return Consensus(
        resolved=resolved,
        failure_class=failure_class,
        corrected=corrected,
        reviewers=tuple(v.reviewer for v in counted),
        label_ids=tuple(v.id for v in counted),
        disagreement=disagreement,
    )
