"""A simulated reviewer that labels blind review items with the simulator's known truth.

The generators in `profiles` know what is right: the cloud answer is the truth of every
simulated task (ticket label, invoice fields, reply), and they know how the edge goes
wrong (another label, a misplaced decimal point, a dropped field, a dropped negation, a
changed number). The reviewer sees what a person sees — the blind item (`input`, `a`,
`b`), never which side is which — finds the generated result by its input, and judges
each answer against the truth, naming the failure class of a wrong one.

It can also say what an edge model answers on the tickets of an eval set
(`ticket_answers`): the simulator knows each model's error profile, so a run of the next
model on the regression set is drawn from the truth it knows. And `review_over_http` labels through the review API,
with a `review` key, as a person at the review page would.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from controlplane.compare.comparators import normalise_label
from controlplane.compare.jsonutil import loads
from controlplane.evalsets.items import item_id
from controlplane.sim.profiles import LABELS, faithful_reply, ticket_miss_rate


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


@dataclass(frozen=True, slots=True)
class Known:
    """What the simulator knows of an input: the right answer and the input's tokens."""

    truth: Any
    input_tokens: int


class SimulatedReviewer:
    """Labels blind items of simulated results; knows the truth of the results it was built
    from and of those it `learn`s as the simulator reports them, by the input's eval item
    id (so a review item, an eval item and a result of the same input meet)."""

    def __init__(self, results: Iterable[Mapping[str, Any]] = ()) -> None:
        self._known: dict[str, Known] = {}
        for r in results:
            self.learn(r)

    def learn(self, result: Mapping[str, Any]) -> None:
        cloud = result.get("cloud") or {}
        if result.get("input") is not None and cloud.get("output") is not None:
            key = item_id(result["task"], result["input"])
            self._known[key] = Known(cloud["output"], int(result.get("input_tokens") or 0))

    def known(self, task: str, value: Any) -> Known | None:
        """What is known of the input `value` of `task` (None: a result not seen)."""
        return self._known.get(item_id(task, value))

    def knows(self, task: str, item: Mapping[str, Any]) -> bool:
        return self.known(task, item.get("input")) is not None

    def label(self, task: str, item: Mapping[str, Any]) -> Label:
        """The verdict on a blind item (`kind`, `input`, `a`, `b`) as the truth has it."""
        found = self.known(task, item.get("input"))
        if found is None:
            return Label("unclear")
        truth = found.truth
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


def ticket_answers(
    model: str, items: Sequence[tuple[str, Known | None]], scenario: str
) -> dict[str, str | None]:
    """What edge model `model` answers on each ticket item (its id, and what is known of its
    input; None: an input the simulator never sent, which gets no answer). As many answers
    are wrong as the model's error profile expects over these items (the sum of
    profiles.ticket_miss_rate, rounded), taken in an order drawn from the model and the ids:
    a run is the same every time, and a set of 40 items is not judged on a lucky or unlucky
    draw."""
    out: dict[str, str | None] = {key: None for key, known in items if known is None}
    due = 0.5  # rounds the expected number of misses
    for key, known in sorted(
        ((k, x) for k, x in items if x is not None), key=lambda kx: _draw(model, kx[0])
    ):
        due += ticket_miss_rate(known.input_tokens, scenario, model)
        right = str(known.truth)
        if due >= 1:
            due -= 1
            rng = random.Random(f"{model}:{key}")
            out[key] = rng.choice([x for x in LABELS if x != right])
        else:
            out[key] = right
    return out


def _draw(model: str, key: str) -> str:
    return hashlib.sha256(f"{model}:{key}".encode()).hexdigest()


@dataclass
class Reviewed:
    """What `review_over_http` did: items labelled, and those it could not judge."""

    labelled: int = 0
    unclear: int = 0


def review_over_http(
    client: httpx.Client,
    reviewer: SimulatedReviewer,
    task: str,
    *,
    remaining: Callable[[], int],
    limit: int = 10_000,
) -> Reviewed:
    """Claim and label `task`'s items through the review API with the client's `review` key
    (GET /v1/review/next, POST /v1/review/{id}/label): as many as `remaining()` says are
    left, then ask it again, until it says none, the queue has nothing more for this
    reviewer (204) or `limit` items are labelled."""
    out = Reviewed()
    while out.labelled < limit and (due := remaining()) > 0:
        for _ in range(min(due, limit - out.labelled)):
            claimed = client.get("/v1/review/next", params={"task": task})
            if claimed.status_code == 204:
                return out
            claimed.raise_for_status()
            item = claimed.json()["item"]
            verdict = reviewer.label(task, item)
            client.post(
                f"/v1/review/{item['id']}/label",
                json={
                    "verdict": verdict.verdict,
                    "failure_class": verdict.failure_class,
                    "corrected": verdict.corrected,
                },
            ).raise_for_status()
            out.labelled += 1
            out.unclear += verdict.verdict == "unclear"
    return out
