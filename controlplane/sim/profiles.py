"""Realistic result generators per example task, and the scenarios that break them
(docs/architecture.md, "The traffic simulator").

Pure: given a seeded `random.Random` and a clock value, the same results come out. Input
texts (`texts`) and reply wordings are drawn from a generator of the request's own, so the
rest of a seeded stream does not depend on them.
`decision` is the simulated router's own eligibility rule (`ELIGIBLE_MAX_TOKENS`), before
any flag.

Scenarios: `long_tickets` (the edge model `small-int4@3` fails the ticket classifier's
2048+ token tickets; its successor `small-int4@4`, the `edge_model` knob, does not),
`edge_outage` (errors and slow answers), `silence` (no traffic), `traffic_jump` (5× the
traffic), `costly_edge` (the edge's reported cost and its degrades rise until offloading
costs more than it saves: `costlier`) and `longer_inputs` (inputs 3× as long, and they stay).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from controlplane.client import wants_repeat
from controlplane.sim import texts

SCENARIOS = (
    "none",
    "long_tickets",
    "edge_outage",
    "silence",
    "traffic_jump",
    "costly_edge",
    "longer_inputs",
)
LONG_TICKET = 2048
# The simulated routers send nothing longer than this to the edge, whatever the flag says.
ELIGIBLE_MAX_TOKENS = 4096
LABELS = ["refund", "exchange", "complaint", "inquiry"]
CURRENCIES = ["EUR", "USD", "GBP", "JPY"]

# `longer_inputs`: every input this many times as long, from the switch on.
LONGER_INPUTS = 3
# `costly_edge`: from the switch on the edge reports a cost that rises from nothing to
# EDGE_COST_TOP times what the cloud charges for the same tokens, over
# COSTLY_EDGE_RAMP_SECONDS, then stays there; and up to COSTLY_EDGE_DEGRADES more of its
# answers come back unsure (a degrade: the edge and then the cloud are paid). Kept below the
# degrade_rate rule's 5% with the usual 2.5%, so it is the money that breaks first.
COSTLY_EDGE_RAMP_SECONDS = 60.0
EDGE_COST_TOP = 1.5
COSTLY_EDGE_DEGRADES = 0.015
# The simulated cloud's prices per 1k tokens (input, output), as it bills them.
CLOUD_PRICE_IN, CLOUD_PRICE_OUT = 0.003, 0.006

# The simulated edge models: today's, and its successor that reads long tickets as well as
# short ones (the fix a rollback's regression set is run against).
EDGE_MODEL = "small-int4@3"
EDGE_MODEL_FIX = "small-int4@4"
EDGE_MODELS = (EDGE_MODEL, EDGE_MODEL_FIX)
CLOUD_MODEL = "large@7"
# How often the fixed edge model labels a ticket wrongly, whatever its length; no more than
# today's lowest rate, so its misses are a subset of today's on the same draws.
FIX_TICKET_MISS = 0.02


class Generator(Protocol):
    def __call__(
        self,
        rng: random.Random,
        i: int,
        ts: datetime,
        scenario: str,
        edge_serves: bool,
        edge_model: str = EDGE_MODEL,
    ) -> dict[str, Any]: ...


def _tokens(rng: random.Random, median: float, sigma: float) -> int:
    return max(1, int(rng.lognormvariate(math.log(median), sigma)))


def _longer(tokens: int, scenario: str) -> int:
    return tokens * LONGER_INPUTS if scenario == "longer_inputs" else tokens


def cloud_price(input_tokens: int, output_tokens: int) -> float:
    """What the simulated cloud bills for a request of these tokens."""
    return round((input_tokens * CLOUD_PRICE_IN + output_tokens * CLOUD_PRICE_OUT) / 1000, 8)


def _mix(rng: random.Random, parts: list[tuple[float, float, float]]) -> int:
    """Input tokens from a mixture of log-normal lengths: (share, median, sigma) parts."""
    roll = rng.random()
    for share, median, sigma in parts:
        if roll < share:
            return _tokens(rng, median, sigma)
        roll -= share
    return _tokens(rng, parts[-1][1], parts[-1][2])


def _sides(
    rng: random.Random,
    tokens: int,
    edge_out: Any,
    cloud_out: Any,
    *,
    output_tokens: int,
    edge_error: str | None,
    scenario: str,
    edge_model: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    edge_latency = max(5.0, rng.gauss(40 + tokens * 0.02, 8))
    if scenario == "edge_outage":
        edge_latency *= 8
    edge = {
        "output": None if edge_error else edge_out,
        "error": edge_error,
        "error_message": f"edge {edge_error} after {edge_latency:.0f} ms" if edge_error else None,
        "latency_ms": round(edge_latency, 1),
        "ttfb_ms": round(max(2.0, edge_latency * 0.3), 1),
        "confidence": round(min(1.0, max(0.0, rng.betavariate(8, 2))), 3),
        "valid": True,
        "model": edge_model,
        "input_tokens": tokens,
        "output_tokens": 0 if edge_error else output_tokens,
    }
    cloud_latency = max(50.0, rng.gauss(380 + tokens * 0.1, 60))
    cloud = {
        "output": cloud_out,
        "latency_ms": round(cloud_latency, 1),
        "ttfb_ms": round(max(20.0, cloud_latency * 0.5), 1),
        "model": CLOUD_MODEL,
        "input_tokens": tokens,
        "output_tokens": output_tokens,
        # The cloud provider bills per request; the self-hosted edge is priced from tokens.
        "cost": cloud_price(tokens, output_tokens),
    }
    return edge, cloud


def ticket_classify(
    rng: random.Random,
    i: int,
    ts: datetime,
    scenario: str,
    edge_serves: bool,
    edge_model: str = EDGE_MODEL,
) -> dict[str, Any]:
    # Mostly short tickets, some long threads with quoted history.
    tokens = _longer(_mix(rng, [(0.7, 180, 0.6), (0.2, 700, 0.4), (0.1, 3000, 0.3)]), scenario)
    truth = rng.choice(LABELS)
    # The same draws whichever the edge model: the fix's misses are a subset of today's, so
    # a seeded stream has the same tickets and truths under both.
    roll = rng.random()
    wrong = (
        rng.choice([x for x in LABELS if x != truth])
        if roll < ticket_miss_rate(tokens, scenario, EDGE_MODEL)
        else None
    )
    miss = ticket_miss_rate(tokens, scenario, edge_model)
    edge_label = wrong if wrong is not None and roll < miss else truth
    if rng.random() < 0.3:
        edge_label = f" {edge_label.title()} "  # casing and spacing noise the comparator ignores
    edge_error = _edge_error(rng, scenario)
    edge, cloud = _sides(
        rng,
        tokens,
        edge_label,
        truth,
        output_tokens=2,
        edge_error=edge_error,
        scenario=scenario,
        edge_model=edge_model,
    )
    ticket = texts.ticket(_aside("ticket_classify", i, ts), truth, tokens)
    return _result(
        "ticket_classify", i, ts, tokens, rng, {"text": ticket.text}, edge, cloud, edge_serves
    )


def ticket_miss_rate(tokens: int, scenario: str, edge_model: str) -> float:
    """How often the edge model labels a ticket of `tokens` wrongly. Today's model is easy on
    short tickets and harder as they grow (the deciding sentence sits mid-text), and misses a
    third of the long ones under `long_tickets`; the fix misses as few long ones as short."""
    if edge_model == EDGE_MODEL_FIX:
        return FIX_TICKET_MISS
    if scenario == "long_tickets" and tokens >= LONG_TICKET:
        return 0.35
    return 0.02 + 0.04 * min(tokens / LONG_TICKET, 1.0)


# The invoice's free-text `note`: each group words one remark several ways; a model picks
# one wording, and asked again may pick another (the cloud's own noise, INVOICE_NOTE_REWRITE).
NOTES = [
    (
        "Payment due within 30 days of the invoice date.",
        "Please pay within 30 days of the invoice date.",
        "Due 30 days after the date of this invoice.",
    ),
    (
        "Goods delivered in full; no back order.",
        "Delivery complete, nothing on back order.",
        "All items shipped; there is no back order.",
    ),
    (
        "Discount of 2% applied for early payment.",
        "Early payment discount (2%) applied.",
        "A 2% discount for paying early has been applied.",
    ),
    (
        "Recurring monthly service fee.",
        "Monthly service charge (recurring).",
        "This is the recurring fee for the monthly service.",
    ),
]

# Each remark as a Chinese invoice prints it (NOTES' order).
NOTES_ZH = [
    "自开票之日起30天内付款。",
    "货物已全部交付，无欠交。",
    "提前付款已享受2%折扣。",
    "每月固定服务费。",
]
NOTES_ANY = [wording for group in NOTES for wording in group]
# A wording's group: the other ways to say the same remark.
NOTE_GROUP = {wording: group for group in NOTES for wording in group}


def invoice_extract(
    rng: random.Random,
    i: int,
    ts: datetime,
    scenario: str,
    edge_serves: bool,
    edge_model: str = EDGE_MODEL,
) -> dict[str, Any]:
    tokens = _longer(_mix(rng, [(0.85, 700, 0.5), (0.15, 2600, 0.3)]), scenario)
    amount = round(rng.uniform(5, 5000), 2)
    cloud_out = {"amount": amount, "currency": rng.choice(CURRENCIES), "invoice_id": f"INV-{i:06d}"}
    # Drawn aside, so the rest of the stream (and every seeded run before the note existed)
    # is unchanged.
    note = random.Random(f"note:{i}:{amount}").choice(NOTES_ANY)
    cloud_out["note"] = note
    edge_out: Any = dict(cloud_out)
    roll = rng.random()
    slip = 0.03 + 0.03 * min(tokens / LONG_TICKET, 1.0)
    if roll < slip:
        edge_out["amount"] = round(amount * 10, 2)  # a misplaced decimal point
    elif roll < slip + 0.02:
        edge_out.pop("currency")  # breaks the schema: invalid
    elif roll < 0.5:
        edge_out = {k: edge_out[k] for k in reversed(list(edge_out))}  # same fields, other order
    edge_error = _edge_error(rng, scenario)
    edge, cloud = _sides(
        rng,
        tokens,
        edge_out,
        cloud_out,
        output_tokens=40,
        edge_error=edge_error,
        scenario=scenario,
        edge_model=edge_model,
    )
    group = NOTE_GROUP[note]
    remark = {"en": group[0], "zh": NOTES_ZH[NOTES.index(group)]}
    scan = texts.invoice(_aside("invoice_extract", i, ts), cloud_out, remark, tokens)
    return _result("invoice_extract", i, ts, tokens, rng, {"text": scan}, edge, cloud, edge_serves)


# (cloud reply, a faithful rewrite, the rewrite with a negation dropped, with a number changed)
REWRITES = [
    (
        "您好，您的退款{amount}元已于今天退回原账户。如有疑问，请拨打 {phone} 联系我们。",
        "您好，退款{amount}元今天已经退回到您的原账户。如有问题，请致电 {phone} 联系我们。",
        None,
        "您好，您的退款{amount2}元已于今天退回原账户。如有疑问，请拨打 {phone} 联系我们。",
    ),
    (
        "抱歉，该商品不支持七天无理由退货。我们已将说明发送至 {email}。",
        "很抱歉，这件商品不支持七天无理由退货。相关说明已发送到 {email}。",
        "很抱歉，这件商品支持七天无理由退货。相关说明已发送到 {email}。",
        "很抱歉，这件商品不支持三十天无理由退货。相关说明已发送到 {email}。",
    ),
    (
        "Hi, your refund of ${amount} was sent today. We will email {email} when it arrives.",
        "Hello, we sent your refund of ${amount} today. We will write to {email} once it arrives.",
        None,
        "Hello, we sent your refund of ${amount2} today. We will write to {email} once it arrives.",
    ),
    (
        "Sorry, we can't change the delivery address after shipping. Please call {phone} for help.",
        "We apologise, but we cannot change the delivery address after shipping. Please call {phone} for help.",
        "We apologise, but we can change the delivery address after shipping. Please call {phone} for help.",
        None,
    ),
    (
        "订单 {order} 预计3天内送达。请保持电话 {phone} 畅通。",
        "订单 {order} 预计三天内送达。请保持您的电话 {phone} 畅通。",
        None,
        "订单 {order} 预计5天内送达。请保持您的电话 {phone} 畅通。",
    ),
]


# The same two slips on the cloud's wording of each reply (REWRITES' order): (negation
# dropped, number changed), None where the faithful rewrite has none either.
CLOUD_SLIPS: list[tuple[str | None, str | None]] = [
    (None, "您好，您的退款{amount2}元已于今天退回原账户。如有疑问，请拨打 {phone} 联系我们。"),
    (
        "抱歉，该商品支持七天无理由退货。我们已将说明发送至 {email}。",
        "抱歉，该商品不支持三十天无理由退货。我们已将说明发送至 {email}。",
    ),
    (None, "Hi, your refund of ${amount2} was sent today. We will email {email} when it arrives."),
    (
        "Sorry, we can change the delivery address after shipping. Please call {phone} for help.",
        None,
    ),
    (None, "订单 {order} 预计5天内送达。请保持电话 {phone} 畅通。"),
]


def wordings(reply: int) -> tuple[tuple[str, str | None, str | None], ...]:
    """The faithful wordings of REWRITES[reply], each with its (negation dropped, number
    changed) slips. Either side words a reply either way, so its wording tells no side."""
    cloud, faithful, no_negation, other_number = REWRITES[reply]
    return ((cloud, *CLOUD_SLIPS[reply]), (faithful, no_negation, other_number))


def reply_rewrite(
    rng: random.Random,
    i: int,
    ts: datetime,
    scenario: str,
    edge_serves: bool,
    edge_model: str = EDGE_MODEL,
) -> dict[str, Any]:
    chosen = rng.choice(REWRITES)
    reply = REWRITES.index(chosen)
    amount = rng.randrange(20, 900)
    fill = {
        "amount": amount,
        "amount2": amount + rng.randrange(1, 50),
        "phone": f"1{rng.choice('3589')}{rng.randrange(10**8, 10**9)}",
        "email": f"user{rng.randrange(10**4)}@example.com",
        "order": f"SO-{rng.randrange(10**6, 10**7)}",
    }
    # Drawn aside, so the rest of the stream is as before the wordings were symmetric.
    aside = _aside("reply_rewrite", i, ts)
    cloud_text = aside.choice(wordings(reply))[0]
    edge_text, no_negation, other_number = aside.choice(wordings(reply))
    roll = rng.random()
    if roll < 0.05 and no_negation:
        edge_text = no_negation  # the rewrite that flips the meaning
    elif roll < 0.10 and other_number:
        edge_text = other_number
    # The reply answers the tail of a conversation the router sends along.
    tokens = _longer(len(chosen[0]) * 2 + _tokens(rng, 150, 0.8), scenario)
    edge_error = _edge_error(rng, scenario)
    edge, cloud = _sides(
        rng,
        tokens,
        edge_text.format(**fill),
        cloud_text.format(**fill),
        output_tokens=len(chosen[0]) * 2,
        edge_error=edge_error,
        scenario=scenario,
        edge_model=edge_model,
    )
    context = texts.reply_context(aside, reply, fill, tokens)
    return _result("reply_rewrite", i, ts, tokens, rng, {"text": context}, edge, cloud, edge_serves)


# --- The cloud's own noise: its second answer to the same input (`cloud_repeat`) ---------
#
# Each task's cloud has a designed self-agreement: asked twice, the ticket classifier's
# large model relabels about one ticket in a hundred (four in a hundred of the long ones:
# the deciding sentence sits mid-thread); the invoice extractor keeps amount, currency and
# invoice id but words its free-text `note` another way on one repeat in five; the reply
# rewriter rephrases itself, and on about one repeat in seven adds a courtesy sentence (the
# sentence count differs; a third of those are long enough to break the length ratio too).

TICKET_RELABEL = 0.01
TICKET_RELABEL_LONG = 0.04
INVOICE_NOTE_REWRITE = 0.2
REPLY_EXTRA_SENTENCE = 0.15
# Of the repeats with an extra sentence, the share whose sentence is a long one.
REPLY_LONG_SHARE = 1 / 3
# Courtesy sentences with no negation, number or name, so only sentences and length change.
COURTESY = {
    "zh": ("谢谢。", "感谢您的耐心等待，祝您生活愉快，期待再次为您服务，再会。"),
    "en": (
        " Thank you.",
        " Thanks again for reaching out to us, and have a wonderful and restful day ahead.",
    ),
}

Repeat = Callable[[random.Random, dict[str, Any]], Any]


def ticket_relabel_rate(input_tokens: int) -> float:
    """The share of repeats on which the ticket classifier's cloud answers another label."""
    return TICKET_RELABEL_LONG if input_tokens >= LONG_TICKET else TICKET_RELABEL


def ticket_repeat(rng: random.Random, result: dict[str, Any]) -> Any:
    label = result["cloud"]["output"]
    if rng.random() < ticket_relabel_rate(result["input_tokens"]):
        return rng.choice([x for x in LABELS if x != label])
    return label


def invoice_repeat(rng: random.Random, result: dict[str, Any]) -> Any:
    out = dict(result["cloud"]["output"])
    if rng.random() < INVOICE_NOTE_REWRITE:
        out["note"] = rng.choice([w for w in NOTE_GROUP[out["note"]] if w != out["note"]])
    return out


def _template(text: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", text)
    pattern = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(f"^{pattern}$")


_REPLIES = [(_template(cloud), faithful) for cloud, faithful, _, _ in REWRITES] + [
    (_template(faithful), cloud) for cloud, faithful, _, _ in REWRITES
]


def faithful_reply(cloud_text: str) -> str | None:
    """The other faithful wording of a simulated reply (the same fills), None if unknown:
    with the reply itself, every faithful answer."""
    for pattern, faithful in _REPLIES:
        match = pattern.match(cloud_text)
        if match:
            return faithful.format(**match.groupdict())
    return None


def reply_repeat(rng: random.Random, result: dict[str, Any]) -> Any:
    text = result["cloud"]["output"]
    again = faithful_reply(text) or text  # the same meaning, other words
    if rng.random() < REPLY_EXTRA_SENTENCE:
        short, long = COURTESY["en" if text.isascii() else "zh"]
        again += long if rng.random() < REPLY_LONG_SHARE else short
    return again


REPEATS: dict[str, Repeat] = {
    "ticket_classify": ticket_repeat,
    "invoice_extract": invoice_repeat,
    "reply_rewrite": reply_repeat,
}


def with_repeat(result: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """The result with `cloud_repeat`: the cloud asked a second time for the same input,
    from its task's profile. Drawn from a generator of its own, seeded by the request id, so
    the same request gets the same second answer and the other results are unchanged. A
    result whose cloud did not answer gets none (there is nothing to repeat)."""
    cloud = result.get("cloud")
    if cloud is None or cloud.get("output") is None:
        return result
    rng = random.Random(f"repeat:{seed}:{result['task']}:{result['request_id']}")
    latency = max(50.0, rng.gauss(cloud["latency_ms"], 60))
    result["cloud_repeat"] = {
        **cloud,
        "output": REPEATS[result["task"]](rng, result),
        "latency_ms": round(latency, 1),
        "ttfb_ms": round(max(20.0, latency * 0.5), 1),
    }
    return result


def _edge_error(rng: random.Random, scenario: str) -> str | None:
    rate = 0.4 if scenario == "edge_outage" else 0.005
    if rng.random() >= rate:
        return None
    return rng.choice(["timeout", "exception", "rate_limited"])


def costly_edge_ramp(seconds: float) -> float:
    """How far `costly_edge` has gone `seconds` after the switch: 0 then, 1 from
    COSTLY_EDGE_RAMP_SECONDS on."""
    return min(1.0, max(0.0, seconds / COSTLY_EDGE_RAMP_SECONDS))


def costlier(result: dict[str, Any], seconds: float, seed: int = 0) -> dict[str, Any]:
    """The result under `costly_edge`, `seconds` after the switch: the edge reports its
    cost (its share of the cloud's price for the same tokens, rising), and it is unsure of
    its answer a little more often. Drawn from a generator seeded by the request id, so the
    rest of the stream is unchanged; `serve` (again) turns the unsure answer into a degrade."""
    edge = result.get("edge")
    if edge is None:
        return result
    ramp = costly_edge_ramp(seconds)
    edge["cost"] = round(
        EDGE_COST_TOP * ramp * cloud_price(edge["input_tokens"], edge["output_tokens"]), 8
    )
    rng = random.Random(f"costly:{seed}:{result['request_id']}")
    if rng.random() < COSTLY_EDGE_DEGRADES * ramp:
        edge["confidence"] = round(rng.uniform(0.1, 0.49), 3)
    return result


def _request_id(task: str, i: int, ts: datetime) -> str:
    return f"sim-{task}-{ts:%Y%m%d%H%M%S%f}-{i}"


def _aside(task: str, i: int, ts: datetime) -> random.Random:
    """A generator of the request's own, for what is drawn beside the stream (its input
    text, its wordings): the stream's other draws stay as they were."""
    return random.Random(f"aside:{_request_id(task, i, ts)}")


def _result(
    task: str,
    i: int,
    ts: datetime,
    tokens: int,
    rng: random.Random,
    input_: dict[str, Any],
    edge: dict[str, Any],
    cloud: dict[str, Any],
    edge_serves: bool,
) -> dict[str, Any]:
    result = {
        "request_id": _request_id(task, i, ts),
        "task": task,
        "ts": ts.isoformat(),
        "session_id": f"s-{rng.randrange(5000)}",
        "user_id": f"u-{rng.randrange(2000)}",
        "input_tokens": tokens,
        "decision": "edge" if eligible(tokens) else "cloud",
        "served": "cloud",
        "degraded": False,
        "degrade_reason": None,
        "input": input_,
        "edge": edge,
        "cloud": cloud,
    }
    return serve(result, edge_serves)


def eligible(input_tokens: int) -> bool:
    """The router's own verdict, before the stage and the canary share gate it."""
    return input_tokens <= ELIGIBLE_MAX_TOKENS


def serve(result: dict[str, Any], edge_serves: bool) -> dict[str, Any]:
    """Put the edge on the serving path: it answers, or (error, low confidence) the request
    degrades to the cloud. Without `edge_serves` the cloud answers (shadow traffic)."""
    edge = result["edge"]
    if edge_serves and edge is not None:
        if edge["error"] is not None:
            result.update(served="cloud", degraded=True, degrade_reason=edge["error"])
        elif edge["confidence"] < 0.5:
            result.update(served="cloud", degraded=True, degrade_reason="low_confidence")
        else:
            result.update(served="edge", degraded=False, degrade_reason=None)
    return result


GENERATORS: dict[str, Generator] = {
    "ticket_classify": ticket_classify,
    "invoice_extract": invoice_extract,
    "reply_rewrite": reply_rewrite,
}


def generate(
    task: str,
    n: int,
    *,
    seed: int,
    now: datetime,
    span_seconds: float = 600.0,
    scenario: str = "none",
    edge_serves: bool = False,
    repeat_rate: float = 0.0,
    edge_model: str = EDGE_MODEL,
) -> list[dict[str, Any]]:
    """`n` results of `task` spread over the `span_seconds` before `now` (none under `silence`);
    on `repeat_rate` of them (chosen as routers choose, by the client's `wants_repeat` on the
    request id) the cloud answered twice (`cloud_repeat`). The scenario starts with the
    first result (`costly_edge` rises over the span). `edge_model` (one of EDGE_MODELS) is the
    edge model that answers; the same seed gives the same inputs and truths under each."""
    if edge_model not in EDGE_MODELS:
        raise ValueError(f"edge_model: one of {', '.join(EDGE_MODELS)}, not {edge_model!r}")
    if scenario == "silence":
        return []
    if scenario == "traffic_jump":
        n *= 5
    rng = random.Random(f"{task}:{seed}")
    make = GENERATORS[task]
    results = []
    for i in range(n):
        ts = now - timedelta(seconds=span_seconds * (n - i) / max(n, 1))
        result = make(rng, i, ts, scenario, edge_serves, edge_model)
        if scenario == "costly_edge":
            result = serve(costlier(result, span_seconds * i / max(n, 1), seed), edge_serves)
        results.append(result)
    return [
        with_repeat(r, seed) if wants_repeat(task, r["request_id"], repeat_rate) else r
        for r in results
    ]
