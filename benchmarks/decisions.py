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
"never caught".

Transients and drifts, at the same traffic levels: a single-window spike (one window at
0.50 amid 30 healthy 0.90 windows on each side) and a two-window dip (two such windows)
must not roll back, so any firing from the spike on counts against the decider; a slow
drift holds 0.90 for 20 windows, slides to 0.80 over 20 (crossing the threshold at its
10th window) and holds 0.80 for 40 more: its delay counts from the drift's first window.

Deciders:

- Shadowplane `capped_cusum` (min_effect 0.05, h 5, each window counting at most 2);
- Shadowplane `consecutive` (3 windows, min 200 samples, pools of up to 12 windows) at
  confidence `point`, 0.80 and 0.95; Shadowplane `cusum` (min_effect 0.05, h 5);
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

from controlplane.catalog.schemas import (  # noqa: E402
    DEFAULT_CAP,
    DEFAULT_DETECTOR,
    DEFAULT_H,
    DEFAULT_MIN_EFFECT,
)
from controlplane.rollout.detectors import capped_cusum, consecutive, cusum  # noqa: E402
from controlplane.rollout.verdicts import CellWindow, verdicts  # noqa: E402

THRESHOLD = 0.85
LEVELS = (30, 100, 200, 1000)
PRE, POST = 20, 60
# Transients: healthy windows on each side of the spike or dip.
AROUND = 30
# Drifts: windows of slide, then of holding at the end of it.
SLIDE, HOLD = 20, 40

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
    fired = cusum(windows, ">=", THRESHOLD, DEFAULT_MIN_EFFECT, DEFAULT_H)
    return fired.at_window if fired else None


def shadowplane_capped(windows: Sequence[CellWindow]) -> int | None:
    fired = capped_cusum(windows, ">=", THRESHOLD, DEFAULT_MIN_EFFECT, DEFAULT_H, DEFAULT_CAP)
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


CAPPED, CONSECUTIVE = "capped_cusum", "consecutive 0.80"
DECIDERS: dict[str, Decider] = {
    CAPPED: shadowplane_capped,
    "consecutive point": shadowplane("point"),
    CONSECUTIVE: shadowplane(0.80),
    "consecutive 0.95": shadowplane(0.95),
    "cusum": shadowplane_cusum,
    "naive (point, 3 running)": naive,
    "Flagger (5 failed checks)": counting(5),
    "Argo (failureLimit 3)": counting(4),
}
# The decider the shipped config runs (a rule's default detector, at confidence 0.80).
DEFAULT = CAPPED if DEFAULT_DETECTOR == "capped_cusum" else CONSECUTIVE


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


def transient(width: int) -> list[float]:
    return [0.90] * AROUND + [0.50] * width + [0.90] * AROUND


DRIFT = [0.90] * PRE + [0.90 - 0.10 * (i + 1) / SLIDE for i in range(SLIDE)] + [0.80] * HOLD


def late_firings(decide: Decider, streams: list[list[CellWindow]], since: int) -> float:
    """The share of streams in which the decider fires at or after window `since`."""
    return sum(any(f >= since for f in firings(decide, s)) for s in streams) / len(streams)


def goals(results: dict[tuple[str, int], dict[str, float]], name: str) -> list[tuple[str, bool]]:
    """The goals for a default detector, each with whether `name` meets them."""
    out = []
    worst = max(
        max(results[(name, n)]["false 0.9"], results[(name, n)]["false 0.87"]) for n in LEVELS
    )
    out.append(
        (
            f"false rollbacks under 0.05 per 1000 healthy windows at every level (near too): "
            f"worst {worst:.2f}",
            worst < 0.05,
        )
    )
    spikes = max(results[(name, n)]["spike"] for n in LEVELS)
    out.append((f"no firing on a single-window spike: worst share {spikes:.2%}", spikes == 0))
    d30, d200 = results[(name, 30)]["delay 0.7"], results[(name, 200)]["delay 0.7"]
    out.append((f"0.70 caught within 6 windows at 30/window: median {d30:.1f}", d30 <= 6))
    out.append((f"0.70 caught within 3 windows at 200/window: median {d200:.1f}", d200 <= 3))
    beaten = []
    for n in LEVELS:
        mine = results[(name, n)]
        for other_name in DECIDERS:
            if other_name == name:
                continue
            other = results[(other_name, n)]
            false_better = max(other["false 0.9"], other["false 0.87"]) < max(
                mine["false 0.9"], mine["false 0.87"]
            )
            delay_better = (
                other["delay 0.8"] < mine["delay 0.8"] and other["delay 0.7"] <= mine["delay 0.7"]
            )
            if false_better and delay_better:
                beaten.append(f"{other_name} at {n}/window")
    out.append(
        (
            "no other detector better on both false rollbacks and delay at any level"
            + (": better on both: " + ", ".join(beaten) if beaten else ""),
            not beaten,
        )
    )
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
        spikes = [stream(rng, n, transient(1)) for _ in range(args.streams)]
        dips = [stream(rng, n, transient(2)) for _ in range(args.streams)]
        drifts = [stream(rng, n, DRIFT) for _ in range(args.streams)]
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
            row["spike"] = late_firings(decide, spikes, AROUND)
            row["dip"] = late_firings(decide, dips, AROUND)
            drift_delays = []
            for s in drifts:
                caught = [f for f in firings(decide, s) if f >= PRE]
                if caught:
                    drift_delays.append(caught[0] - PRE + 1)
            row["drift"] = statistics.median(drift_delays) if drift_delays else float("inf")
            row["drift missed"] = 1 - len(drift_delays) / len(drifts)
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

    print(
        f"Transients and drifts: spike/dip: share of streams with a firing from the one-window "
        f"spike or two-window dip (0.50) on; drift: median windows from the start of a slide "
        f"0.90 -> 0.80 over {SLIDE} windows (it crosses {THRESHOLD} at its 10th) to a firing; "
        "drift missed: never caught.\n"
    )
    header = f"{'decider':<28}{'n/window':>9}{'spike':>9}{'dip':>9}{'drift':>9}{'drift missed':>14}"
    print(header)
    print("-" * len(header))
    for n in LEVELS:
        for name in DECIDERS:
            r = results[(name, n)]
            print(
                f"{name:<28}{n:>9}{r['spike']:>9.1%}{r['dip']:>9.1%}{r['drift']:>9.1f}"
                f"{r['drift missed']:>14.1%}"
            )
        print()

    for name in (CAPPED, CONSECUTIVE):
        marked = " (the default)" if name == DEFAULT else ""
        print(f"Goals for a default, met by {name}{marked}?")
        for text, met in goals(results, name):
            print(f"  {text} -> {'met' if met else 'MISSED'}")
        print()


if __name__ == "__main__":
    main()
