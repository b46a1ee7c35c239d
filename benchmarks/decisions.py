"""Decision quality of rollback deciders, side by side, on synthetic streams with known truth.

    .venv/bin/python benchmarks/decisions.py [--streams 400] [--windows 250] [--seed 1]
        [--seeds 8] [--only rates|spans]

Two parts: the rate rules' deciders (`rates`, below) and the span rules, net_savings and
input_shift, replayed on cost and input-length streams (`spans`, at the end).

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

Span rules (`--only spans`), each at its default: `net_savings >= 0` over 24 h at 95% and
`input_shift <= 0.25` over 2 h, on 5-minute windows of simulated requests: Poisson(100)
requests a window (or a daily cycle between 30 and 170 a window, the stage starting at a
random hour), input tokens lognormal (median 400, sigma 0.8), output tokens lognormal
(median 150, sigma 0.6), the default prices, a shadow rate of 10% and 3% of requests
degraded (both paid to the cloud as well), fixed costs of 60 a day: net savings about 8 a
day, positive but modest. The input baseline is a week of the same traffic. Changes, after
a day of that traffic, followed for a day: the costly step (edge cost x20 and 45% of
requests degraded: net savings about -26 a day) and the same reached by a drift over 12 h;
input lengths x3 in one step and by a drift over 6 h (geometric); a one-hour burst of x3
inputs that reverts. Both rules read every stream; a rule that fires is re-armed at once
with the stage restarted, and a firing in a stage younger than the rule's span is counted
apart ("young"). Delay counts closed windows from the change's first window (1 = fired
when it closed). Medians over `--seeds` seeds.

Prints the tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controlplane.catalog.schemas import (  # noqa: E402
    DEFAULT_CAP,
    DEFAULT_DETECTOR,
    DEFAULT_H,
    DEFAULT_MIN_EFFECT,
    ResolvedRule,
    TaskConfig,
    parse_config,
)
from controlplane.metrics import lengths  # noqa: E402
from controlplane.metrics.shift import Baseline, SpanWindow  # noqa: E402
from controlplane.rollout.detectors import capped_cusum, consecutive, cusum  # noqa: E402
from controlplane.rollout.spans import judge_input_shift, judge_net_savings  # noqa: E402
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


def rate_rules(args: argparse.Namespace) -> None:
    """The rate rules' deciders side by side: the first part of the tables."""
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


# Span rules: 5-minute windows, a day of them, the default prices and a modest margin.
SPAN_WINDOW = 300
DAY_WINDOWS = 86400 // SPAN_WINDOW
WEEK_WINDOWS = 7 * DAY_WINDOWS
PER_WINDOW = 100
FIXED_COST_PER_DAY = 60.0
SHADOW_RATE = 0.10
DEGRADE, COSTLY_DEGRADE = 0.03, 0.45
COSTLY_EDGE = 20.0
LONG = 3.0
COST_DRIFT, LENGTH_DRIFT, BURST = 12 * 12, 6 * 12, 12
BURST_STREAM = "inputs x3 for 1 h"
# The goals: false firings per 1000 stationary windows at most this.
FALSE_GOAL = 0.5
SPAN_CONFIG = {
    "task": "decisions",
    "comparator": {"kind": "exact"},
    "window_seconds": SPAN_WINDOW,
    "fixed_cost_per_day": FIXED_COST_PER_DAY,
    "rollback": {
        "rules": [
            {"metric": "net_savings", "op": ">=", "threshold": 0},
            {"metric": "input_shift", "op": "<=", "threshold": 0.25},
        ]
    },
}


@dataclass(frozen=True)
class Traffic:
    """Each window's expected requests, input-length factor, degrade rate and edge price
    multiplier."""

    rate: np.ndarray
    factor: np.ndarray
    degrade: np.ndarray
    edge: np.ndarray

    @classmethod
    def steady(cls, windows: int) -> Traffic:
        return cls(
            np.full(windows, float(PER_WINDOW)),
            np.ones(windows),
            np.full(windows, DEGRADE),
            np.ones(windows),
        )


def simulate(rng: np.random.Generator, traffic: Traffic, config: TaskConfig) -> list[SpanWindow]:
    """One stream of closed windows as the span rules read them, from requests drawn one by
    one and priced as the window metrics price them."""
    n = rng.poisson(traffic.rate)
    at = np.repeat(np.arange(len(n)), n)
    tokens_in = np.maximum(1, rng.lognormal(math.log(400), 0.8, at.size) * traffic.factor[at])
    tokens_in = tokens_in.astype(int)
    tokens_out = rng.lognormal(math.log(150), 0.6, at.size).astype(int)
    cloud, edge = config.prices.cloud, config.prices.edge
    baseline = (tokens_in * cloud["in"] + tokens_out * cloud["out"]) / 1000
    edge_cost = (tokens_in * edge["in"] + tokens_out * edge["out"]) / 1000 * traffic.edge[at]
    to_cloud = (rng.random(at.size) < traffic.degrade[at]) | (rng.random(at.size) < SHADOW_RATE)
    windows = len(n)
    sums = [
        np.bincount(at, weights=v, minlength=windows)
        for v in (edge_cost, baseline * to_cloud, baseline)
    ]
    inputs = np.split(tokens_in, np.cumsum(n)[:-1])
    return [
        SpanWindow(
            i,
            int(n[i]),
            float(sums[0][i]),
            float(sums[1][i]),
            float(sums[2][i]),
            tuple(lengths.histogram(inputs[i])),
            0,
        )
        for i in range(windows)
    ]


def week_baseline(rng: np.random.Generator) -> Baseline:
    """A week of the steady traffic's input lengths: what the task was graded on."""
    tokens = rng.lognormal(math.log(400), 0.8, WEEK_WINDOWS * PER_WINDOW).astype(int)
    return Baseline(tuple(lengths.histogram(np.maximum(1, tokens))), 0, "a week of traffic")


@dataclass(frozen=True)
class SpanFire:
    at: int
    # How many windows the stage held when the rule fired.
    age: int


def span_firings(
    rule: ResolvedRule, windows: Sequence[SpanWindow], baseline: Baseline
) -> list[SpanFire]:
    """Every window whose close fires the rule, the stage restarted after each (so a rule
    that fires is judged afresh from the next window)."""
    span = span_of(rule)
    out: list[SpanFire] = []
    origin = 0
    for at in range(len(windows)):
        if at < origin:
            continue
        inside = windows[max(origin, at - span + 1) : at + 1]
        if rule.metric == "net_savings":
            verdict = judge_net_savings(
                inside,
                rule,
                at=at,
                origin=origin,
                window_seconds=SPAN_WINDOW,
                fixed_cost_per_day=FIXED_COST_PER_DAY,
            )
        else:
            verdict = judge_input_shift(
                inside, rule, baseline, at=at, origin=origin, window_seconds=SPAN_WINDOW
            )
        if verdict.verdict == "breach":
            out.append(SpanFire(at, at - origin + 1))
            origin = at + 1
    return out


def span_of(rule: ResolvedRule) -> int:
    assert rule.span_seconds is not None
    return rule.span_seconds // SPAN_WINDOW


def ramp(windows: int, start: int, width: int, before: float, after: float) -> np.ndarray:
    """`before` until `start`, then a straight slide to `after` over `width` windows (a
    step when width is 1) and `after` from there on."""
    done = np.clip((np.arange(windows) - start + 1) / width, 0.0, 1.0)
    return before + (after - before) * done


def change_streams() -> dict[str, tuple[Traffic, int]]:
    """Each change stream: a day of steady traffic, then the change, followed for a day;
    with the window the change starts at."""
    windows, start = 2 * DAY_WINDOWS, DAY_WINDOWS
    out = {}
    for name, width in (("costly step", 1), ("costly drift, 12 h", COST_DRIFT)):
        traffic = Traffic.steady(windows)
        out[name] = (
            Traffic(
                traffic.rate,
                traffic.factor,
                ramp(windows, start, width, DEGRADE, COSTLY_DEGRADE),
                ramp(windows, start, width, 1.0, COSTLY_EDGE),
            ),
            start,
        )
    for name, width in (("inputs x3 step", 1), ("inputs x3 drift, 6 h", LENGTH_DRIFT)):
        traffic = Traffic.steady(windows)
        factor = np.exp(ramp(windows, start, width, 0.0, math.log(LONG)))
        out[name] = (Traffic(traffic.rate, factor, traffic.degrade, traffic.edge), start)
    traffic = Traffic.steady(windows)
    burst = traffic.factor.copy()
    burst[start : start + BURST] = LONG
    out[BURST_STREAM] = (Traffic(traffic.rate, burst, traffic.degrade, traffic.edge), start)
    return out


def span_rules(args: argparse.Namespace) -> None:
    """The span rules on cost and input-length streams: the second part of the tables."""
    config = parse_config(SPAN_CONFIG)
    rules = config.rollback.resolved_rules()
    stationary: dict[tuple[str, ResolvedRule], list[SpanFire]] = {}
    changes: dict[tuple[str, ResolvedRule], list[list[int]]] = {}
    net_per_day: dict[str, list[float]] = {"steady": [], "costly": []}
    peaks: list[float] = []
    for seed in range(args.seeds):
        rng = np.random.default_rng([args.seed, seed])
        baseline = week_baseline(rng)
        for name, traffic in stationary_streams(rng).items():
            windows = simulate(rng, traffic, config)
            if name == "steady":
                net_per_day["steady"].append(net_savings_per_day(windows))
            for rule in rules:
                stationary.setdefault((name, rule), []).extend(
                    span_firings(rule, windows, baseline)
                )
        for name, (traffic, start) in change_streams().items():
            windows = simulate(rng, traffic, config)
            if name == "costly step":
                net_per_day["costly"].append(net_savings_per_day(windows[start:]))
            if name == BURST_STREAM:
                peaks.append(whole_span_peak(rules, windows, baseline))
            for rule in rules:
                changes.setdefault((name, rule), []).append(
                    [f.at - start + 1 for f in span_firings(rule, windows, baseline)]
                )

    print(
        "Span rules at their defaults: net_savings >= 0 over 24 h at 95%, input_shift <= 0.25 "
        f"over 2 h; {SPAN_WINDOW // 60}-minute windows, {args.seeds} seeds of each stream.\n"
        f"Net savings a day (median over seeds; fixed costs {FIXED_COST_PER_DAY:g} a day): "
        f"steady {statistics.median(net_per_day['steady']):.2f}, after the costly step "
        f"{statistics.median(net_per_day['costly']):.2f}.\n"
        "Stationary streams, a week each: firings per 1000 windows; young = firings in a "
        "stage younger than the rule's span.\n"
    )
    rows = [
        f"{'stationary stream':<18}{'rule':<13}{'windows':>8}{'firings':>9}{'per 1000':>10}"
        f"{'young':>7}  goal"
    ]
    total = args.seeds * WEEK_WINDOWS
    for (name, rule), fires in stationary.items():
        rate = 1000 * len(fires) / total
        young = sum(f.age < span_of(rule) for f in fires)
        rows.append(
            f"{name:<18}{rule.metric:<13}{total:>8}{len(fires):>9}{rate:>10.2f}{young:>7}  "
            f"<= {FALSE_GOAL} per 1000: {'met' if rate <= FALSE_GOAL else 'MISSED'}"
        )
    table(rows)
    print(
        "Changes after a day of steady traffic, followed for a day: caught = seeds with a "
        "firing from the change on; delay = median windows (and minutes) from the change's "
        "first window to the first firing, [fastest, slowest]; early = firings before the "
        "change.\n"
    )
    rows = [
        f"{'change stream':<22}{'rule':<13}{'caught':>7}{'delay':>7}{'minutes':>9}"
        f"{'range':>12}{'early':>7}  goal"
    ]
    for (name, rule), found in changes.items():
        caught = [min(d for d in fires if d >= 1) for fires in found if any(d >= 1 for d in fires)]
        early = sum(d < 1 for fires in found for d in fires)
        shown = f"{'-':>7}{'-':>9}{'-':>12}"
        if caught:
            middle = statistics.median(caught)
            spread = f"[{min(caught)}, {max(caught)}]"
            shown = f"{middle:>7.1f}{middle * SPAN_WINDOW / 60:>9.0f}{spread:>12}"
        rows.append(
            f"{name:<22}{rule.metric:<13}{f'{len(caught)}/{len(found)}':>7}{shown}{early:>7}  "
            f"{change_goal(name, rule, caught, len(found))}"
        )
    table(rows)
    line = config.alerts.input_shift
    print(
        f"The one-hour burst: the 2 h span's index against the baseline peaks at "
        f"{statistics.median(peaks):.2f} (median over seeds); the alert line {line:g} is reached "
        f"in {sum(p >= line for p in peaks)}/{len(peaks)} seeds: the input_shift alert opens, "
        "no rule rolls back.\n"
    )


def table(rows: list[str]) -> None:
    print(rows[0])
    print("-" * max(len(r) for r in rows))
    for row in rows[1:]:
        print(row)
    print()


def stationary_streams(rng: np.random.Generator) -> dict[str, Traffic]:
    """A week of steady traffic, and of traffic with a daily cycle (30 to 170 requests a
    window) whose stage starts at a random time of day."""
    steady = Traffic.steady(WEEK_WINDOWS)
    hour = rng.uniform(0, DAY_WINDOWS)
    daily = PER_WINDOW * (
        1 + 0.7 * np.cos(2 * np.pi * (np.arange(WEEK_WINDOWS) + hour) / DAY_WINDOWS)
    )
    return {
        "steady": steady,
        "daily cycle": Traffic(daily, steady.factor, steady.degrade, steady.edge),
    }


def net_savings_per_day(windows: Sequence[SpanWindow]) -> float:
    savings = sum(w.savings for w in windows)
    return (savings - FIXED_COST_PER_DAY * len(windows) / DAY_WINDOWS) * DAY_WINDOWS / len(windows)


def whole_span_peak(
    rules: Sequence[ResolvedRule], windows: Sequence[SpanWindow], baseline: Baseline
) -> float:
    """The highest index of a 2 h span against the baseline over the stream."""
    span = span_of(next(r for r in rules if r.metric == "input_shift"))
    return max(
        lengths.psi(
            lengths.add(w.input_hist for w in windows[at - span + 1 : at + 1]), baseline.counts
        )
        or 0.0
        for at in range(span - 1, len(windows))
    )


def change_goal(name: str, rule: ResolvedRule, caught: list[int], seeds: int) -> str:
    """The goal a change stream has for a rule, and whether it is met ("-" for none)."""
    if name == "inputs x3 step" and rule.metric == "input_shift":
        met = len(caught) == seeds and max(caught) <= span_of(rule)
        return f"caught within its span ({span_of(rule)} windows): {'met' if met else 'MISSED'}"
    if name == BURST_STREAM:
        return f"no rollback: {'met' if not caught else 'MISSED'}"
    return "-"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=400)
    parser.add_argument("--windows", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=8, help="span rules: seeds per stream")
    parser.add_argument("--only", choices=("rates", "spans"), help="run one part")
    args = parser.parse_args()
    if args.only != "spans":
        rate_rules(args)
    if args.only != "rates":
        span_rules(args)


if __name__ == "__main__":
    main()
