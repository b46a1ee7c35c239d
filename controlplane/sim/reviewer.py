"""A simulated reviewer that labels blind review items with the simulator's known truth.

The generators in `profiles` know what is right: the cloud answer is the truth of every
simulated task (ticket label, invoice fields, reply), and they know how the edge goes
wrong (another label, a misplaced decimal point, a dropped field, a dropped negation, a
changed number). The reviewer sees what a person sees — the blind item (`input`, `a`,
`b`), never which side is which — finds the generated result by its input, and judges
each answer against the truth, naming the failure class of a wrong one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.compare.comparators import normalise_label
from controlplane.compare.jsonutil import loads
from controlplane.sim.profiles import faithful_reply


@dataclass(frozen=True, slots=True)
class Label:
    verdict: str
    failure_class: str | None = None
    corrected: Any = None


def _as_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def judge(task: str, truth: Any, answer: Any) -> str | None:
    """None when `answer` is right for the task given the truth (the generated cloud
    answer), else its failure class."""
    if answer is None:
        return "no_answer"
    if task == "ticket_classify":
        return None if normalise_label(answer) == truth else "wrong_label"
    if task == "invoice_extract":
        got = _as_object(answer)
        if got is None or got.get("currency") is None or got.get("amount") is None:
            return "missing_field"
        if got.get("amount") != truth.get("amount"):
            return "amount"
        same = all(got.get(k) == v for k, v in truth.items())
        return None if same else "wrong_field"
    if task == "reply_rewrite":
        if answer in (truth, faithful_reply(truth)):
            return None
        return "meaning_changed"
    return None if answer == truth else "wrong"


class SimulatedReviewer:
    """Labels blind items of simulated results; built from the results the simulator sent."""

    def __init__(self, results: Iterable[Mapping[str, Any]]) -> None:
        self._truth: dict[tuple[str, str | None], Any] = {}
        for r in results:
            text = (r.get("input") or {}).get("text")
            cloud = r.get("cloud") or {}
            if isinstance(text, str) and cloud.get("output") is not None:
                self._truth[(r["task"], text)] = cloud["output"]

    def knows(self, task: str, item: Mapping[str, Any]) -> bool:
        return (task, _text(item)) in self._truth

    def label(self, task: str, item: Mapping[str, Any]) -> Label:
        """The verdict on a blind item (`kind`, `input`, `a`, `b`) as the truth has it."""
        truth = self._truth.get((task, _text(item)))
        if truth is None:
            return Label("unclear")
        a_wrong = judge(task, truth, item.get("a"))
        if item.get("kind") == "single":
            return Label("correct") if a_wrong is None else Label("wrong", a_wrong, truth)
        b_wrong = judge(task, truth, item.get("b"))
        if a_wrong is None and b_wrong is None:
            return Label("both_correct")
        if a_wrong is None:
            return Label("a_correct", b_wrong)
        if b_wrong is None:
            return Label("b_correct", a_wrong)
        return Label("both_wrong", a_wrong, truth)


def _text(item: Mapping[str, Any]) -> str | None:
    value = item.get("input")
    if isinstance(value, Mapping):
        text = value.get("text")
        return text if isinstance(text, str) else None
    return value if isinstance(value, str) else None
