"""The Task page's cost and input lengths as data: what the two span rules (net_savings,
input_shift) and the input-shift alert read, the charts drawn of it, and the sentences
written above them; the re-grade banner; a span rollback's evidence in words. Plain
functions of `controlplane.rollout.taskview.span_evidence`'s answer, no Streamlit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from controlplane.rollout.explain import duration
from shadowplane_dashboard import charts
from shadowplane_dashboard.formats import (
    count,
    decimal,
    level,
    line,
    moment,
    money,
    number,
    percent,
    whole,
)

Row = Mapping[str, Any]

# The cost components drawn per window, by column of the cost rows, in the legend's order.
COMPONENTS = {
    "edge_cost": "paid edge",
    "cloud_cost": "paid cloud",
    "baseline_cost": "cloud baseline",
    "fixed_cost": "fixed share",
    "net_savings": "net savings",
}
COST = charts.Chart(
    "amount",
    "Cost per window: paid, the cloud baseline, the fixed share and net savings",
    "per window",
    color="component",
    percent=False,
)
BASELINE_BARS = charts.Histogram("Baseline input lengths", "input tokens", "#7f7f7f", "baseline")
NOW_BARS = charts.Histogram("Input lengths now", "input tokens", "#1f77b4", "now")


# --- cost ---------------------------------------------------------------------------------


def cost_frame(cost: Row) -> pd.DataFrame:
    """One row per window and component (`component`, `amount`) for the cost chart."""
    frame = pd.DataFrame(cost["windows"])
    if frame.empty:
        return frame
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    return charts.long_form(
        frame, {column: {"component": label} for column, label in COMPONENTS.items()}, "amount"
    )


def _over(cost: Row, seconds: bool) -> str:
    """The span the figures cover, in words (its ends to the second when `seconds`)."""
    terms = cost["terms"]
    elapsed = duration(int(terms["span_seconds"]))
    since = {
        None: f"Over the last {elapsed}",
        "stage": f"Over the {elapsed} since the stage began",
        "first_window": f"Over the {elapsed} since the task's first window",
    }[cost["cut"]]
    return (
        f"{since} (from {moment(cost['since'], seconds=seconds)} to "
        f"{moment(cost['until'], seconds=seconds)}: "
        f"{count(terms['windows'])} windows with results, {count(terms['results'])} results)"
    )


def _saved(savings: float) -> str:
    if savings >= 0:
        return f"saved {money(savings)} against the cloud baseline"
    return f"cost {money(-savings)} more than the cloud baseline"


def _itemised(terms: Row) -> str:
    """The fixed costs item by item, the largest first (a stored document keeps no order):
    " (gpu 4.50, routing 1.50)", or nothing when the config does not itemise them."""
    found = terms.get("fixed_costs") or {}
    if not found:
        return ""
    largest = sorted(found.items(), key=lambda item: -item[1])
    return " (" + ", ".join(f"{line(k)} {money(v)}" for k, v in largest) + ")"


def cost_sentence(cost: Row, *, seconds: bool = False) -> str:
    """What offloading saved over the span against the cloud alone, the fixed costs of the
    same span, and the net with its interval and per day: the net_savings rule's sum."""
    terms = cost["terms"]
    items = _itemised(terms)
    interval = (
        f" ({level(terms['interval'])} interval {money(terms['low'])} to {money(terms['high'])})"
        if terms.get("high") is not None
        else ""
    )
    per_day = terms["net_savings"] * 86400 / terms["span_seconds"]
    return (
        f"{_over(cost, seconds)} offloading {_saved(terms['savings'])}: paid {money(terms['paid'])} "
        f"(edge {money(terms['edge_cost'])}, cloud {money(terms['cloud_cost'])}) against "
        f"{money(terms['baseline_cost'])} for the cloud alone. Fixed costs "
        f"{money(terms['fixed_cost'])} for those {duration(int(terms['span_seconds']))}"
        f"{items}, at {money(cost['fixed_cost_per_day'])} a day; net savings "
        f"**{money(terms['net_savings'])}**{interval}, {money(per_day)} a day."
    )


def cost_rule_sentence(cost: Row, *, stage: str, rule_threshold: float | None) -> str:
    """What the net_savings rule says now; or that none is set, or that it does not judge
    in this stage (`rule_threshold`: the task's rule's, None without one)."""
    if rule_threshold is None:
        return (
            "No net_savings rule is set: cost never rolls this task back. A team that knows "
            "its fixed costs adds one to rollback.rules (metric net_savings, op >=, a "
            f"threshold in money over its span, 24h by default); fixed_cost_per_day is "
            f"{money(cost['fixed_cost_per_day'])} now, set it to the edge's real fixed costs "
            "first."
        )
    rule = cost["rule"]
    if rule is None:
        return (
            f"The net_savings rule judges in shadow, canary and full only; the task is "
            f"{line(stage)}."
        )
    name = f"The net_savings rule ({line(rule['name'])}"
    name += ", notify mode: a notice, never a rollback)" if rule["mode"] == "notify" else ")"
    terms = cost["terms"]
    if rule["verdict"] == "insufficient":
        return f"{name} cannot judge yet: {line(rule['why'])}."
    high, threshold = money(terms["high"]), number(rule["threshold"])
    what = f"its {level(terms['interval'])} interval reaches at most {high}"
    if rule["verdict"] == "breach":
        return (
            f"{name} is breached: {what}, below {threshold}. In canary and full it rolls "
            "the task back; in shadow it leaves a notice."
        )
    return f"{name} holds: {what}, not below {threshold}."


# --- input lengths ------------------------------------------------------------------------


def _shares(counts: Sequence[int]) -> list[float]:
    n = sum(counts)
    return [c / n if n else 0.0 for c in counts]


def held_bins(lengths: Row) -> list[int]:
    """The bins from the first to the last that either histogram holds (all fifteen when
    neither holds any): both charts draw the same bins."""
    base = (lengths["baseline"] or {}).get("counts") or []
    held = [i for i, n in enumerate(lengths["now"]) if n or (i < len(base) and base[i])]
    if not held:
        return list(range(len(lengths["bins"])))
    return list(range(held[0], held[-1] + 1))


def histogram_frames(lengths: Row) -> tuple[pd.DataFrame | None, pd.DataFrame]:
    """The baseline's bars (None without a baseline) and now's, share per bin of the same
    bins (`bin`, `share`, `count`)."""
    bins = held_bins(lengths)

    def frame(counts: Sequence[int]) -> pd.DataFrame:
        shares = _shares(counts)
        return pd.DataFrame(
            {
                "bin": [lengths["bins"][i] for i in bins],
                "share": [shares[i] for i in bins],
                "count": [int(counts[i]) for i in bins],
            }
        )

    baseline = lengths["baseline"]
    return (frame(baseline["counts"]) if baseline else None), frame(lengths["now"])


def histogram_top(*frames: pd.DataFrame | None) -> float:
    """The share axis's top for both charts: the tallest bar of either, at least 1%."""
    return max([0.01, *(float(f["share"].max()) for f in frames if f is not None and len(f))])


def _tokens(value: float | None) -> str:
    return "no data" if value is None else f"about {whole(value)} tokens"


def baseline_words(baseline: Row, *, seconds: bool = False) -> str:
    """Where the baseline came from and what it holds."""
    since = (
        f", {moment(baseline['start'], seconds=seconds)} to "
        f"{moment(baseline['end'], seconds=seconds)}"
        if baseline.get("start") and baseline.get("end")
        else ""
    )
    return f"{line(baseline['source'])} ({count(baseline['n'])} results{since})"


def lengths_sentence(task: str, lengths: Row, *, seconds: bool = False) -> str:
    """The span's input lengths against the baseline: medians, the index, the share over
    the cap; or that there is no baseline, and what makes one."""
    span = duration(int(lengths["span_seconds"]))
    now = (
        f"Over the last {span} (to {moment(lengths['until'], seconds=seconds)}, "
        f"{count(lengths['results'])} "
        f"results) inputs are {_tokens(lengths['median_now'])} at the median"
    )
    baseline = lengths["baseline"]
    if baseline is None:
        return (
            f"{now}. There is no baseline to compare them with yet: it is the input lengths "
            "a task was graded and promoted on, kept when it leaves shadow, else those of its "
            f"latest offload grade. Grade the task (`shadowplane grade --task {task}`) to have "
            "one."
        )
    psi = lengths["psi"]
    index = f"population stability index **{decimal(psi)}**" if psi is not None else "no index"
    over = (
        f" {percent(lengths['over_cap_now'])} of inputs are over the cap now, "
        f"{percent(lengths['over_cap_baseline'])} in the baseline."
        if lengths["over_cap_now"] is not None and lengths["over_cap_baseline"] is not None
        else ""
    )
    return (
        f"{now}, against {_tokens(lengths['median_baseline'])} in the baseline, "
        f"{baseline_words(baseline, seconds=seconds)}: {index} (0 is the same shape; 0.1 is "
        f"a moderate shift, 0.25 a large one).{over}"
    )


def alert_sentence(lengths: Row) -> str:
    """Where the input-shift alert stands on the same span."""
    line_at = decimal(lengths["alert_line"])
    opens = f"The input-shift alert opens at an index of {line_at}"
    if lengths["baseline"] is None or lengths["psi"] is None:
        return f"{opens}; without a baseline it has nothing to compare."
    needed = lengths["alert_min_results"]
    if lengths["results"] < needed:
        return f"{opens} over at least {count(needed)} results; the span holds fewer."
    side = "at or above" if lengths["psi"] >= lengths["alert_line"] else "below"
    return f"{opens}: the index is {side} it."


def shift_rule_sentence(lengths: Row, *, stage: str, rule_threshold: float | None) -> str:
    """What the input_shift rule says now, with the quarters' indexes it reads; or that
    none is set, or that it does not judge in this stage."""
    if rule_threshold is None:
        return "No input_shift rule is set: a shift opens the alert but never rolls this task back."
    rule = lengths["rule"]
    if rule is None:
        return (
            f"The input_shift rule judges in shadow, canary and full only; the task is "
            f"{line(stage)}."
        )
    name = f"The input_shift rule ({line(rule['name'])}"
    name += ", notify mode: a notice, never a rollback)" if rule["mode"] == "notify" else ")"
    threshold = decimal(rule["threshold"])
    how = (
        f"{name} fires when the whole span's index and each of its four quarters' are above "
        f"{threshold} (a burst shorter than half the span never fires)"
    )
    quarters = ", ".join(decimal(q["psi"]) for q in rule.get("quarters") or [])
    read = (
        f": the span's index is {decimal(rule['statistic'])}"
        + (f", its quarters' {quarters}" if quarters else "")
        if rule["statistic"] is not None
        else ""
    )
    if rule["verdict"] == "insufficient":
        return f"{how}. It cannot judge yet{read}: {line(rule['why'])}."
    if rule["verdict"] == "breach":
        return (
            f"{how}. It is breached{read}. In canary and full it rolls the task back and "
            "marks it for a re-grade; in shadow it leaves a notice."
        )
    return f"{how}. It holds{read}."


# --- the re-grade mark --------------------------------------------------------------------


def regrade_banner(task: str, state: Row) -> str | None:
    """What the re-grade mark means and what clears it (None: the task has no mark). A
    task's name holds no character Markdown reads inside a code span (catalog.TASK_NAME)."""
    if not state.get("needs_regrade"):
        return None
    since = moment(state.get("shifted_at"))
    return (
        f"**Re-grade needed.** The inputs of {line(task)} shifted: an input_shift rollback "
        f"marked it at {since}. Promotion is refused, forced or not, until a grade over "
        f"traffic since {since} says offload; such a grade clears the mark "
        f"(`shadowplane grade --task {task}` once that traffic is in). Re-grade, "
        "don't re-tune thresholds."
    )


# --- a span rollback's evidence -----------------------------------------------------------


def span_lines(evidence: Row) -> str:
    """A span rule's rollback evidence as a list: the money of a net_savings firing, or
    the index, quarters and medians of an input_shift firing."""
    span = evidence.get("span") or {}
    seconds = int(span.get("span_seconds") or 0)
    over = duration(seconds) if seconds else "the span"
    if evidence.get("how") == "net_savings":
        items = _itemised(span)
        interval = (
            f"; {level(span['interval'])} interval {money(span['low'])} to {money(span['high'])}"
            if span.get("high") is not None
            else ""
        )
        return "\n".join(
            [
                f"- cloud baseline {money(span['baseline_cost'])} − paid {money(span['paid'])} "
                f"(edge {money(span['edge_cost'])}, cloud {money(span['cloud_cost'])}) = "
                f"savings {money(span['savings'])}",
                f"- fixed costs {money(span['fixed_cost'])} for {over}{items}",
                f"- net savings **{money(span['net_savings'])}** over "
                f"{count(span['results'])} results in {count(span['windows'])} windows{interval}",
            ]
        )
    source = line(span.get("baseline_source") or "the baseline")
    out = [
        f"- population stability index **{decimal(span.get('psi'))}** over {over} "
        f"({count(span.get('results') or 0)} results) against {source} "
        f"({count(span.get('baseline_n') or 0)} results)",
    ]
    out += [
        f"- quarter {k}: index {decimal(q['psi'])} over {count(q['results'])} results"
        for k, q in enumerate(span.get("quarters") or [], start=1)
    ]
    return "\n".join(out)


def span_bins(evidence: Row) -> pd.DataFrame | None:
    """An input_shift firing's two histograms as shares per bin (the bins either holds);
    None for a net_savings firing."""
    span = evidence.get("span") or {}
    if evidence.get("how") != "input_shift" or not span.get("now") or not span.get("baseline"):
        return None
    lengths = {
        "bins": span["bins"],
        "now": span["now"],
        "baseline": {"counts": span["baseline"]},
    }
    baseline, now = histogram_frames(lengths)
    assert baseline is not None
    return pd.DataFrame({"tokens": now["bin"], "baseline": baseline["share"], "now": now["share"]})


def longest_inputs(evidence: Row) -> str | None:
    """The request ids an input_shift firing kept as examples (its longest inputs)."""
    examples = evidence.get("examples") or []
    if evidence.get("how") != "input_shift" or not examples:
        return None
    return "Longest inputs of the span (request ids): " + ", ".join(line(e) for e in examples)
