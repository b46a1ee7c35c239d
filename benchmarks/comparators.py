"""Comparisons per second for each comparator, and masking throughput, on one core.

    .venv/bin/python benchmarks/comparators.py [--reps 5] [--seconds 0.5]

Inputs are realistic: short labels, JSON invoices, and reply rewrites of about 300 and
3,000 characters in Chinese and in English (faithful rewrites and ones that drop a
negation or change a number, as the simulator sends). Beside each figure is the ceiling
measured in the same run on the same data: a plain string equality (`a == b`) over the
same pairs. Goal: text_conservation on 3,000-character texts at 5,000 comparisons/s or
more on one core. Prints medians of --reps runs; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controlplane.ingest.comparators import compare  # noqa: E402
from controlplane.ingest.redaction import mask_text  # noqa: E402
from controlplane.sim.profiles import REWRITES  # noqa: E402

LABEL_SPEC = {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]}
JSON_SPEC = {
    "kind": "json_fields",
    "fields": {"amount": "number", "currency": "string", "invoice_id": "string"},
    "required": ["amount"],
}
TEXT_SPEC = {"kind": "text_conservation", "length_ratio": [0.7, 1.4]}


def fill(rng: random.Random) -> dict[str, Any]:
    amount = rng.randrange(20, 900)
    return {
        "amount": amount,
        "amount2": amount + 7,
        "phone": f"1{rng.choice('3589')}{rng.randrange(10**8, 10**9)}",
        "email": f"user{rng.randrange(10**4)}@example.com",
        "order": f"SO-{rng.randrange(10**6, 10**7)}",
    }


def rewrites(language: str, target_chars: int, n: int, seed: int = 7) -> list[tuple[str, str]]:
    """Pairs of (edge, cloud) texts of about `target_chars`, built from the simulator's replies."""
    rng = random.Random(seed)
    templates = [t for t in REWRITES if (t[0][0] > "\u2e80") == (language == "zh")]
    pairs = []
    for _ in range(n):
        edge_parts, cloud_parts = [], []
        while sum(map(len, cloud_parts)) < target_chars:
            cloud, faithful, no_negation, other_number = rng.choice(templates)
            values = fill(rng)
            roll = rng.random()
            edge = (
                no_negation
                if roll < 0.05 and no_negation
                else (other_number if roll < 0.1 and other_number else faithful)
            )
            cloud_parts.append(cloud.format(**values))
            edge_parts.append(edge.format(**values))
        joiner = "" if language == "zh" else " "
        pairs.append((joiner.join(edge_parts), joiner.join(cloud_parts)))
    return pairs


def rate(run: Callable[[], None], count: int, seconds: float) -> float:
    """Items per second: repeat `run` (which handles `count` items) for about `seconds`."""
    loops, started = 0, time.perf_counter()
    while True:
        run()
        loops += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return loops * count / elapsed


def measure(
    label: str,
    pairs: list[tuple[Any, Any]],
    work: Callable[[Any, Any], Any],
    reps: int,
    seconds: float,
) -> None:
    def run_work() -> None:
        for a, b in pairs:
            work(a, b)

    def run_ceiling() -> None:
        for a, b in pairs:
            _ = a == b

    figures, ceilings = [], []
    for _ in range(reps):
        figures.append(rate(run_work, len(pairs), seconds))
        ceilings.append(rate(run_ceiling, len(pairs), seconds))
    med, ceiling = statistics.median(figures), statistics.median(ceilings)
    print(
        f"  {label:<44} {med:>12,.0f}/s   ceiling a == b {ceiling:>14,.0f}/s   "
        f"runs: {', '.join(f'{f:,.0f}' for f in figures)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one measured run")
    args = parser.parse_args()
    gc.collect()
    gc.freeze()
    rng = random.Random(1)

    labels = [
        (rng.choice(["Refund", " refund", "exchange "]), rng.choice(["refund", "exchange"]))
        for _ in range(1000)
    ]
    invoices = [
        (
            {"amount": a, "currency": "EUR", "invoice_id": f"I-{a}"},
            {"currency": "EUR", "amount": float(a), "invoice_id": f"I-{a}"},
        )
        for a in range(1000)
    ]
    print("Comparisons per second, one core (median of runs):")
    measure("label", labels, lambda e, c: compare(LABEL_SPEC, e, c), args.reps, args.seconds)
    measure("json_fields", invoices, lambda e, c: compare(JSON_SPEC, e, c), args.reps, args.seconds)
    measure(
        "exact (JSON invoices)",
        invoices,
        lambda e, c: compare({"kind": "exact"}, e, c),
        args.reps,
        args.seconds,
    )
    texts = {}
    for language in ("en", "zh"):
        for chars in (300, 3000):
            texts[(language, chars)] = pairs = rewrites(
                language, chars, 50 if chars > 1000 else 200
            )
            size = statistics.mean(len(c) for _, c in pairs)
            measure(
                f"text_conservation {language}, ~{size:,.0f} chars",
                pairs,
                lambda e, c: compare(TEXT_SPEC, e, c),
                args.reps,
                args.seconds,
            )
    print("\nMasking (redacted policy), texts per second, one core:")
    for (language, _chars), pairs in texts.items():
        size = statistics.mean(len(c) for _, c in pairs)
        measure(
            f"mask_text {language}, ~{size:,.0f} chars",
            pairs,
            lambda e, c: mask_text(c),
            args.reps,
            args.seconds,
        )
    print("\nGoal: text_conservation on ~3,000-character texts ≥ 5,000 comparisons/s.")


if __name__ == "__main__":
    main()
