"""Comparisons per second for each comparator, masking throughput, and reading time of
hostile texts, on one core.

    .venv/bin/python benchmarks/comparators.py [--reps 5] [--seconds 0.5] [--only-hostile]

Inputs are realistic: short labels, JSON invoices, and reply rewrites of about 300 and
3,000 characters in Chinese and in English (faithful rewrites and ones that drop a
negation or change a number, as the simulator sends). Beside each label and JSON figure
is the ceiling measured in the same run on the same data: a plain string equality
(`a == b`) over the same pairs.

Text comparisons and masking run with both text readers on the same texts, the compiled
one (controlplane/compare/_*.pyx) and the Python one (the reference), beside the ceiling
of one `str.translate` over the same texts (one pass of C over each text's characters).
Goals on one core, ~3,000-character texts, the compiled reader: text_conservation ≥ 5,000
comparisons/s in each language (a comparison reads two texts), masking ≥ 20,000 texts/s.
Prints medians of --reps runs; asserts nothing about time.

Then the time `conservation.read` and `mask_text` take per 1,000 characters, with each
reader, on benign texts (the rewrites above) and on adversarial ones (runs that almost
match each pattern: letters then "@", "1_1_1…", unclosed quotes, …) of 3,000, 30,000 and
300,000 characters, each adversarial figure beside its ratio to the benign one. Goal:
every ratio within 3×. The masker reads the whole text here (max_chars = its length), not
the 32,000 characters it keeps at ingest.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controlplane.compare import native  # noqa: E402
from controlplane.compare.comparators import compare  # noqa: E402
from controlplane.compare.conservation import read  # noqa: E402
from controlplane.compare.redaction import mask_text  # noqa: E402
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


def rewrites(
    language: str, target_chars: int, n: int, seed: int = 7, unfaithful: float | None = None
) -> list[tuple[str, str]]:
    """Pairs of (edge, cloud) texts of about `target_chars`, built from the simulator's replies.

    Each reply of a pair drops a negation or changes a number with the simulator's odds
    (1 in 10), so most long pairs conflict somewhere; with `unfaithful`, that share of the
    pairs holds one such reply and the others none (a rewrite model wrong on 1 text in 10)."""
    rng = random.Random(seed)
    templates = [t for t in REWRITES if (t[0][0] > "\u2e80") == (language == "zh")]
    pairs = []
    for _ in range(n):
        edge_parts, cloud_parts = [], []
        wrong_pair = unfaithful is not None and rng.random() < unfaithful
        while sum(map(len, cloud_parts)) < target_chars:
            cloud, faithful, no_negation, other_number = rng.choice(templates)
            values = fill(rng)
            roll = rng.random()
            if unfaithful is not None:
                # One unfaithful reply, the first that can be, in the pairs chosen wrong.
                roll = 0.0 if wrong_pair and (no_negation or other_number) else 1.0
                wrong_pair = wrong_pair and roll == 1.0
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


# One C pass over a text: str.translate with a small table (the number reader's own,
# full-width digits to ASCII), the ceiling a native reader is measured against.
ONE_PASS = str.maketrans("０１２３４５６７８９．，％", "0123456789.,%")


@contextmanager
def reader(which: str) -> Iterator[None]:
    """Run the block with the compiled text reader ("native") or the Python one."""
    kept = native.READER
    if which == "native" and kept is None:
        raise SystemExit("the compiled text reader is not built: pip install . with a compiler")
    native.READER = kept if which == "native" else None
    try:
        yield
    finally:
        native.READER = kept


def measure_readers(
    label: str,
    pairs: list[tuple[str, str]],
    work: Callable[[str, str], Any],
    texts_per_item: int,
    reps: int,
    seconds: float,
) -> dict[str, float]:
    """Items per second with each reader on the same items, beside one str.translate over
    the same texts (`texts_per_item` of each pair: a comparison reads two texts)."""

    def run_work() -> None:
        for a, b in pairs:
            work(a, b)

    def run_ceiling() -> None:
        if texts_per_item == 2:
            for a, b in pairs:
                a.translate(ONE_PASS)
                b.translate(ONE_PASS)
        else:
            for _, b in pairs:
                b.translate(ONE_PASS)

    runs: dict[str, list[float]] = {"native": [], "python": [], "ceiling": []}
    for _ in range(reps):
        for which in ("native", "python"):
            if which == "native" and native.ACTIVE is False:
                continue
            with reader(which):
                runs[which].append(rate(run_work, len(pairs), seconds))
        runs["ceiling"].append(rate(run_ceiling, len(pairs), seconds))
    med = {k: statistics.median(v) if v else float("nan") for k, v in runs.items()}
    print(
        f"  {label:<36} compiled {med['native']:>9,.0f}/s   Python {med['python']:>7,.0f}/s"
        f" ({med['native'] / med['python']:>5.1f}×)   ceiling one str.translate per text "
        f"{med['ceiling']:>10,.0f}/s   compiled runs: {', '.join(f'{f:,.0f}' for f in runs['native'])}"
    )
    return med


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


def repeat(unit: str, head: str = "", tail: str = "") -> Callable[[int], str]:
    def build(n: int) -> str:
        body = n - len(head) - len(tail)
        return head + (unit * (body // len(unit) + 1))[:body] + tail

    return build


# One text per pattern family that almost matches, over and over (as tests/ingest/
# test_linear_time.py, which checks that their time grows linearly).
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "email: letters then @": repeat("a", tail="@"),
    "email: a@a@a@": repeat("a@"),
    "email: @ then labels, no TLD": repeat("a.", head="a@"),
    "url: www.www.": repeat("www."),
    "phone: +1 1 1 1": repeat(" 1", head="+1"),
    "token: 1_1_1_": repeat("1_"),
    "token: a1:a1:": repeat("a1:"),
    "digits: 1.1.1.1": repeat("1."),
    "capitalised: A A A": repeat("A "),
    "quotes: unclosed “““": repeat("“"),
    'quotes: "abc"abc': repeat('"abc'),
    "negations: not not": repeat("not "),
    "negations: 不不不": repeat("不"),
    "numbers: 1,000,1,000": repeat("1,000,"),
    "numbers: 百分之百分之": repeat("百分之"),
    "numbers: 一点一点": repeat("一点"),
    "sentences: Mr. Mr.": repeat("Mr. "),
    "sentences: !?!?": repeat("!?"),
    "mixed scripts": repeat("a1中B2。@x.“"),
}
HOSTILE_SIZES = (3_000, 30_000, 300_000)


def per_kchar(work: Callable[[str], Any], text: str, reps: int) -> float:
    """µs per 1,000 characters: the best of `reps` runs (the collector kept out, as its
    passes cost in proportion to what the process holds, not to the text)."""
    best = float("inf")
    gc.collect()
    gc.unfreeze()
    gc.disable()
    try:
        for _ in range(reps):
            started = time.perf_counter()
            work(text)
            best = min(best, time.perf_counter() - started)
    finally:
        gc.enable()
        gc.freeze()
    return best * 1e6 / (len(text) / 1000)


def hostile(reps: int, which: str) -> None:
    readers: dict[str, Callable[[str], Any]] = {
        "conservation.read": read,
        "mask_text": lambda text: mask_text(text, max_chars=len(text)),
    }
    benign = {
        (language, size): rewrites(language, size, 1)[0][1][:size]
        for language in ("en", "zh")
        for size in HOSTILE_SIZES
    }
    print(
        f"\nReading hostile text with the {which} reader, µs per 1,000 characters (best of "
        "runs);\nbeside each adversarial figure its ratio to the benign one (the mean of en "
        "and zh). Goal: ≤ 3×."
    )
    worst: dict[tuple[str, int], tuple[float, str]] = {}
    for reader, work in readers.items():
        print(f"\n  {reader:<30}" + "".join(f"{size:>18,}" for size in HOSTILE_SIZES))
        base = {}
        for language in ("en", "zh"):
            figures = [per_kchar(work, benign[(language, size)], reps) for size in HOSTILE_SIZES]
            print(f"    benign {language:<25}" + "".join(f"{f:>12,.0f}      " for f in figures))
            for size, figure in zip(HOSTILE_SIZES, figures, strict=True):
                base[size] = base.get(size, 0.0) + figure / 2
        for family, build in ADVERSARIAL.items():
            row = f"    {family:<31}"
            for size in HOSTILE_SIZES:
                figure = per_kchar(work, build(size), reps)
                ratio = figure / base[size]
                row += f"{figure:>12,.0f} {ratio:>4.1f}×"
                worst[(reader, size)] = max(worst.get((reader, size), (0.0, "")), (ratio, family))
            print(row, flush=True)
    print("\n  Worst ratio to benign:")
    for (reader, size), (ratio, family) in worst.items():
        print(f"    {reader:<18} {size:>8,} chars: {ratio:4.1f}×  ({family})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one measured run")
    parser.add_argument(
        "--only-hostile", action="store_true", help="only the hostile-text reading times"
    )
    args = parser.parse_args()
    gc.collect()
    gc.freeze()
    if args.only_hostile:
        for which in ("native", "python") if native.ACTIVE else ("python",):
            with reader(which):
                hostile(args.reps, "compiled" if which == "native" else "Python")
        return
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
    print(
        f"\nText comparisons per second, one core, {native.reader_name()} built: the compiled "
        "and the Python reader\non the same pairs (median of runs), beside one str.translate "
        "over both texts of each pair:"
    )
    texts = {}
    goals = []
    for language in ("en", "zh"):
        for chars in (300, 3000):
            texts[(language, chars)] = pairs = rewrites(
                language, chars, 50 if chars > 1000 else 200
            )
            size = statistics.mean(len(c) for _, c in pairs)
            med = measure_readers(
                f"text_conservation {language}, ~{size:,.0f} chars",
                pairs,
                lambda e, c: compare(TEXT_SPEC, e, c),
                2,
                args.reps,
                args.seconds,
            )
            if chars == 3000:
                goals.append(f"text_conservation {language} {med['native']:,.0f}/s (goal ≥ 5,000)")
    print("\nMasking (redacted policy), texts per second, one core, the same way:")
    for (language, chars), pairs in texts.items():
        size = statistics.mean(len(c) for _, c in pairs)
        med = measure_readers(
            f"mask_text {language}, ~{size:,.0f} chars",
            pairs,
            lambda e, c: mask_text(c),
            1,
            args.reps,
            args.seconds,
        )
        if chars == 3000:
            goals.append(f"mask_text {language} {med['native']:,.0f}/s (goal ≥ 20,000)")
    print("\nOn ~3,000-character texts, the compiled reader: " + "; ".join(goals) + ".")
    for which in ("native", "python") if native.ACTIVE else ("python",):
        with reader(which):
            hostile(args.reps, "compiled" if which == "native" else "Python")


if __name__ == "__main__":
    main()
