"""Decision quality of rollback deciders, side by side, on synthetic streams with known truth.

    .venv/bin/python benchmarks/decisions.py [--streams 400] [--windows 250] [--seed 1]

Each stream is one cell's agreement per window against a `>= 0.85` rule: the number of
agreeing pairs is drawn Binomial(n, p) for n = 30, 100, 200 or 1000 samples per window.
Healthy streams hold p = 0.90 (far from the threshold) or 0.87 (near it) for `--windows`
windows; regression streams hold 0.90 for 20 windows, then drop to 0.80 or 0.70 and are
followed for 60 more. A decider that fires is re-armed at once with its history
restarted (as a person would after a rollback), so false rollbacks are counted per 1000
healthy windows. Detection delay is counted in closed windows from the first bad one (1 =
fired when the first bad window closed); a regression not caught in 60 windows is
"never caught". Deciders:

- Shadowplane `consecutive` (3 windows, min 200 samples, pools of up to 12 windows) at
  confidence `point`, 0.80 (the default) and 0.95; Shadowplane `cusum` (min_effect 0.05, h 5);
- naive: the point estimate below the threshold 3 windows running, no minimum, no pooling;
- Flagger: failed checks (point estimate below the threshold) counted, never reset,
  rollback at 5;
- Argo Rollouts: `failureLimit: 3`, every failed measurement counted; fails on the 4th.

Prints the table; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controlplane.rollout.detectors import consecutive, cusum  # noqa: E402
from controlplane.rollout.verdicts import CellWindow, verdicts  # noqa: E402

THRESHOLD = 0.85
LEVELS = (30, 100, 200, 1000)
PRE, POST = 20, 60

# A decider reads one stream's windows (oldest first) and returns the index of the window
# whose close makes it fire, or None.
Decider = Callable[[Sequence[CellWindow]], int | None]


def shadowplane(confidence: float | str) -> Decider:
    def decide(windows: Sequence[CellWindow]) -> int | None:
        found = verdicts(
            windows,
            op=">=",
            threshold=THRESHOLD,
            confidence=confidence,  # type: ignore[arg-type]
            min_samples=200,
            max_pool_windows=12,
        )
        fired = consecutive(found, 3, 36)
        return fired.at_window if fired else None

    return decide


def shadowplane_cusum(windows: Sequence[CellWindow]) -> int | None:
    fired = cusum(windows, ">=", THRESHOLD, 0.05, 5.0)
    return fired.at_window if fired else None


def naive(windows: Sequence[CellWindow]) -> int | None:
    run = 0
    for w in windows:
        if w.den and w.num / w.den < THRESHOLD:
            run += 1
            if run >= 3:
                return w.window
        elif w.den:
            run = 0
    return None


def counting(limit: int) -> Decider:
    """Failed checks counted and never reset; fires when the count reaches `limit`."""

    def decide(windows: Sequence[CellWindow]) -> int | None:
        failed = 0
        for w in windows:
            if w.den and w.num / w.den < THRESHOLD:
                failed += 1
                if failed >= limit:
                    return w.window
        return None

    return decide


DECIDERS: dict[str, Decider] = {
    "consecutive point": shadowplane("point"),
    "consecutive 0.80 (default)": shadowplane(0.80),
    "consecutive 0.95": shadowplane(0.95),
    "cusum": shadowplane_cusum,
    "naive (point, 3 running)": naive,
    "Flagger (5 failed checks)": counting(5),
    "Argo (failureLimit 3)": counting(4),
}
DEFAULT = "consecutive 0.80 (default)"


def stream(rng: np.random.Generator, n: int, truth: Sequence[float]) -> list[CellWindow]:
    return [CellWindow(i, int(rng.binomial(n, p)), n) for i, p in enumerate(truth)]


def firings(decide: Decider, windows: list[CellWindow]) -> list[int]:
    """Every window at which the decider fires, re-armed with fresh history after each."""
    out = []
    start = 0
    while start < len(windows):
        fired = decide(windows[start:])
        if fired is None:
            break
        out.append(fired)
        start = fired + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=400)
    parser.add_argument("--windows", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    results: dict[tuple[str, int], dict[str, float]] = {}
    for n in LEVELS:
        healthy = {
            p: [stream(rng, n, [p] * args.windows) for _ in range(args.streams)]
            for p in (0.90, 0.87)
        }
        regressions = {
            p: [stream(rng, n, [0.90] * PRE + [p] * POST) for _ in range(args.streams)]
            for p in (0.80, 0.70)
        }
        for name, decide in DECIDERS.items():
            row: dict[str, float] = {}
            for p, streams in healthy.items():
                fires = sum(len(firings(decide, s)) for s in streams)
                row[f"false {p}"] = 1000 * fires / (len(streams) * args.windows)
            for p, streams in regressions.items():
                delays, missed = [], 0
                for s in streams:
                    caught = [f for f in firings(decide, s) if f >= PRE]
                    if caught:
                        delays.append(caught[0] - PRE + 1)
                    else:
                        missed += 1
                row[f"delay {p}"] = statistics.median(delays) if delays else float("inf")
                row[f"missed {p}"] = missed / len(streams)
            results[(name, n)] = row

    print(
        f"Rule: agreement >= {THRESHOLD}. {args.streams} streams per cell of the table; healthy "
        f"streams {args.windows} windows; regressions after {PRE} healthy windows, followed "
        f"for {POST}.\nfalse/1000: false rollbacks per 1000 healthy windows (far: p=0.90, "
        "near: p=0.87); delay: median windows to detect (0.80 and 0.70); missed: share of "
        "regressions never caught.\n"
    )
    header = (
        f"{'decider':<28}{'n/window':>9}{'false far':>11}{'false near':>11}"
        f"{'delay .80':>10}{'delay .70':>10}{'missed .80':>11}{'missed .70':>11}"
    )
    print(header)
    print("-" * len(header))
    for n in LEVELS:
        for name in DECIDERS:
            r = results[(name, n)]
            print(
                f"{name:<28}{n:>9}{r['false 0.9']:>11.2f}{r['false 0.87']:>11.2f}"
                f"{r['delay 0.8']:>10.1f}{r['delay 0.7']:>10.1f}"
                f"{r['missed 0.8']:>11.1%}{r['missed 0.7']:>11.1%}"
            )
        print()

    print("Goals for the default:")
    worst = max(
        max(results[(DEFAULT, n)]["false 0.9"], results[(DEFAULT, n)]["false 0.87"]) for n in LEVELS
    )
    print(
        f"  under 1 false rollback per 1000 healthy windows at every level: worst {worst:.2f} -> "
        f"{'met' if worst < 1 else 'MISSED'}"
    )
    d70 = results[(DEFAULT, 200)]["delay 0.7"]
    print(
        f"  the 0.70 regression caught within 3 windows at 200/window: median {d70:.1f} -> "
        f"{'met' if d70 <= 3 else 'MISSED'}"
    )
    beaten = []
    for n in LEVELS:
        mine = results[(DEFAULT, n)]
        for name in DECIDERS:
            if name == DEFAULT:
                continue
            other = results[(name, n)]
            false_better = max(other["false 0.9"], other["false 0.87"]) < max(
                mine["false 0.9"], mine["false 0.87"]
            )
            delay_better = (
                other["delay 0.8"] < mine["delay 0.8"] and other["delay 0.7"] <= mine["delay 0.7"]
            )
            if false_better and delay_better:
                beaten.append(f"{name} at {n}/window")
    print(
        "  no other decider better on both counts at any level: "
        + ("met" if not beaten else "MISSED — better on both: " + ", ".join(beaten))
    )


if __name__ == "__main__":
    main()
