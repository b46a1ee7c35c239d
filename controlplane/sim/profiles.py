"""Realistic result generators per example task, and the scenarios that break them.

Pure: given a seeded `random.Random` and a clock value, the same results come out.
`reply_rewrite` sends Chinese and English reply rewrites, about one in twenty of which
drops a negation and one in twenty changes a number. Scenarios (DESIGN §9): `long_ticket_regression` (the edge degrades only on long tickets),
`edge_outage` (edge errors and degrades), `silent_router` (a task stops sending),
`traffic_jump` (several times the usual volume).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

SCENARIOS = ("none", "long_ticket_regression", "edge_outage", "silent_router", "traffic_jump")
LABELS = ["refund", "exchange", "complaint", "inquiry"]
CURRENCIES = ["EUR", "USD", "GBP", "JPY"]

Generator = Callable[[random.Random, int, datetime, str], dict[str, Any]]


def _tokens(rng: random.Random, median: float, sigma: float) -> int:
    return max(1, int(rng.lognormvariate(math.log(median), sigma)))


def _sides(
    rng: random.Random,
    tokens: int,
    edge_out: Any,
    cloud_out: Any,
    *,
    edge_error: str | None,
    scenario: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    edge_latency = rng.gauss(40 + tokens * 0.02, 8)
    edge = {
        "output": None if edge_error else edge_out,
        "error": edge_error,
        "error_message": f"edge {edge_error} after {edge_latency:.0f} ms" if edge_error else None,
        "latency_ms": round(max(5.0, edge_latency * (8 if scenario == "edge_outage" else 1)), 1),
        "ttfb_ms": round(max(2.0, edge_latency * 0.3), 1),
        "confidence": round(min(1.0, max(0.0, rng.betavariate(8, 2))), 3),
        "valid": True,
        "model": "small-int4@3",
        "input_tokens": tokens,
        "output_tokens": 3,
    }
    cloud_latency = rng.gauss(380 + tokens * 0.1, 60)
    cloud = {
        "output": cloud_out,
        "latency_ms": round(max(50.0, cloud_latency), 1),
        "ttfb_ms": round(max(20.0, cloud_latency * 0.5), 1),
        "model": "large@7",
        "input_tokens": tokens,
        "output_tokens": 3,
    }
    return edge, cloud


def ticket_classify(rng: random.Random, i: int, ts: datetime, scenario: str) -> dict[str, Any]:
    tokens = _tokens(rng, 260, 0.9)
    truth = rng.choice(LABELS)
    # Easy on short tickets; on long ones the deciding sentence sits mid-text.
    miss = 0.03 if tokens < 512 else 0.06
    if scenario == "long_ticket_regression" and tokens >= 512:
        miss = 0.35
    edge_label = rng.choice([x for x in LABELS if x != truth]) if rng.random() < miss else truth
    if rng.random() < 0.3:
        edge_label = f" {edge_label.title()} "  # casing and spacing noise the comparator ignores
    edge_error = _edge_error(rng, scenario)
    edge, cloud = _sides(rng, tokens, edge_label, truth, edge_error=edge_error, scenario=scenario)
    return _result(
        "ticket_classify",
        i,
        ts,
        tokens,
        rng,
        {"text": f"ticket {i}: ... ({tokens} tokens)"},
        edge,
        cloud,
    )


def invoice_extract(rng: random.Random, i: int, ts: datetime, scenario: str) -> dict[str, Any]:
    tokens = _tokens(rng, 700, 0.6)
    amount = round(rng.uniform(5, 5000), 2)
    cloud_out = {"amount": amount, "currency": rng.choice(CURRENCIES), "invoice_id": f"INV-{i:06d}"}
    edge_out: Any = dict(cloud_out)
    roll = rng.random()
    if roll < 0.04:
        edge_out["amount"] = round(amount * 10, 2)  # a misplaced decimal point
    elif roll < 0.06:
        edge_out.pop("currency")  # breaks the schema: invalid
    elif roll < 0.5:
        edge_out = {k: edge_out[k] for k in reversed(list(edge_out))}  # same fields, other order
    edge_error = _edge_error(rng, scenario)
    edge, cloud = _sides(rng, tokens, edge_out, cloud_out, edge_error=edge_error, scenario=scenario)
    return _result(
        "invoice_extract", i, ts, tokens, rng, {"text": f"invoice {i} scan text"}, edge, cloud
    )


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


def reply_rewrite(rng: random.Random, i: int, ts: datetime, scenario: str) -> dict[str, Any]:
    cloud_text, faithful, no_negation, other_number = rng.choice(REWRITES)
    amount = rng.randrange(20, 900)
    fill = {
        "amount": amount,
        "amount2": amount + rng.randrange(1, 50),
        "phone": f"1{rng.choice('3589')}{rng.randrange(10**8, 10**9)}",
        "email": f"user{rng.randrange(10**4)}@example.com",
        "order": f"SO-{rng.randrange(10**6, 10**7)}",
    }
    roll = rng.random()
    edge_text = faithful
    if roll < 0.05 and no_negation:
        edge_text = no_negation  # the rewrite that flips the meaning
    elif roll < 0.10 and other_number:
        edge_text = other_number
    tokens = len(cloud_text) * 2
    edge_error = _edge_error(rng, scenario)
    edge, cloud = _sides(
        rng,
        tokens,
        edge_text.format(**fill),
        cloud_text.format(**fill),
        edge_error=edge_error,
        scenario=scenario,
    )
    return _result(
        "reply_rewrite", i, ts, tokens, rng, {"text": cloud_text.format(**fill)}, edge, cloud
    )


def _edge_error(rng: random.Random, scenario: str) -> str | None:
    rate = 0.4 if scenario == "edge_outage" else 0.005
    if rng.random() >= rate:
        return None
    return rng.choice(["timeout", "exception", "rate_limited"])


def _result(
    task: str,
    i: int,
    ts: datetime,
    tokens: int,
    rng: random.Random,
    input_: dict[str, Any],
    edge: dict[str, Any],
    cloud: dict[str, Any],
) -> dict[str, Any]:
    return {
        "request_id": f"sim-{task}-{ts:%Y%m%d%H%M%S}-{i}",
        "task": task,
        "ts": ts.isoformat(),
        "session_id": f"s-{rng.randrange(5000)}",
        "user_id": f"u-{rng.randrange(2000)}",
        "input_tokens": tokens,
        "decision": "edge" if tokens <= 2048 else "cloud",
        "served": "cloud",  # shadow stage: cloud answers, the edge runs beside it
        "degraded": False,
        "input": input_,
        "edge": edge,
        "cloud": cloud,
    }


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
) -> list[dict[str, Any]]:
    """`n` results of `task` spread over the `span_seconds` before `now`."""
    if scenario == "silent_router":
        return []
    if scenario == "traffic_jump":
        n *= 5
    rng = random.Random(f"{task}:{seed}")
    make = GENERATORS[task]
    return [
        make(rng, i, now - timedelta(seconds=span_seconds * (n - i) / max(n, 1)), scenario)
        for i in range(n)
    ]
