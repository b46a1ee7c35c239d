"""A task's grade as the dashboard shows it (docs/grading.md): its tier in one line (the
Overview's and the Task page's), the four dimensions as bars against the tiers'
thresholds with the error cost's veto marked apart, each dimension's signal and sentence,
what would change the tier, the fields the cloud itself changes, and what an insufficient
grade is missing. Plain functions of the kept grade document, no Streamlit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from shadowplane_dashboard import charts
from shadowplane_dashboard.formats import NONE, count, decimal, line, moment, number, percent

Row = Mapping[str, Any]

NOT_GRADED = "not graded yet"
# The dimensions in the document's order, with the names a reader sees.
DIMENSIONS = {
    "input_length": "input length",
    "determinism": "determinism",
    "error_cost": "error cost",
    "frequency": "frequency",
}
# The error cost's bar is 1 − error cost (suitability, as it enters the weighted sum).
ERROR_COST_BAR = "error cost (1 − cost)"
WEIGHTED = "weighted score"
# The bars' colours by state: the danger signal orange, the veto red (as a decision).
STATES = {
    "no signal": "#4c78a8",
    "danger signal": "#ff7f0e",
    "veto": charts.EVENT_COLOURS["decision"],
    WEIGHTED: "#555555",
}
BARS = charts.Bars(
    x="score",
    y="dimension",
    title="Suitability for the edge per dimension (0–1) against the tiers' thresholds",
    x_title="score (1 = fully suitable)",
    color="state",
    colours=STATES,
)


def tier_line(grade: Row | None) -> str:
    """The grade in one line: "grade: shadow (0.68) — input length: P95 is 8.4x P50 …";
    an insufficient grade names what is missing; "not graded yet" without a grade."""
    if grade is None:
        return f"grade: {NOT_GRADED}"
    tier = line(grade["tier"])
    score = "" if grade.get("score") is None else f" ({decimal(grade['score'])})"
    why = grade.get("missing") if grade["tier"] == "insufficient" else grade.get("reasons")
    said = "; ".join(line(r) for r in why or [])
    if grade["tier"] == "insufficient" and said:
        said = f"missing {said}"
    return f"grade: {tier}{score}" + (f" — {said}" if said else "")


def bar_label(name: str) -> str:
    return ERROR_COST_BAR if name == "error_cost" else DIMENSIONS[name]


def state(name: str, dimension: Row) -> str:
    if name == "error_cost" and dimension.get("veto"):
        return "veto"
    return "danger signal" if dimension.get("signal") else "no signal"


def bar_frame(grade: Row) -> pd.DataFrame:
    """One bar per dimension with a score (the error cost's is 1 − error cost), then the
    weighted score when the grade has one: columns dimension, score, state."""
    rows = []
    # In the dimensions' own order (a stored document's keys may come back sorted).
    for name in DIMENSIONS:
        dimension = grade["dimensions"].get(name)
        if dimension is None or dimension.get("score") is None:
            continue
        rows.append(
            {
                "dimension": bar_label(name),
                "score": dimension["score"],
                "state": state(name, dimension),
            }
        )
    if grade.get("score") is not None:
        rows.append({"dimension": WEIGHTED, "score": grade["score"], "state": WEIGHTED})
    return pd.DataFrame(rows, columns=["dimension", "score", "state"])


def thresholds(config: Row) -> dict[str, float]:
    """The tiers' score bands as the bars' rules: label → position."""
    tiers = config["grading"]["tiers"]
    return {
        f"shadow ≥ {number(tiers['shadow'])}": float(tiers["shadow"]),
        f"offload ≥ {number(tiers['offload'])}": float(tiers["offload"]),
    }


def veto_tick(veto: float) -> pd.DataFrame:
    """Where the veto sits on the error cost's bar: at 1 − veto (an error cost at or above
    the veto keeps the task on the cloud whatever its score)."""
    return pd.DataFrame(
        {
            "dimension": [ERROR_COST_BAR],
            "at": [1.0 - veto],
            "label": [f"veto: error cost ≥ {number(veto)}"],
        }
    )


def heading(grade: Row) -> str:
    span = grade.get("span") or {}
    score = NONE if grade.get("score") is None else decimal(grade["score"])
    return (
        f"Tier **{line(grade['tier'])}**, weighted score {score}, computed "
        f"{moment(grade['computed_at'])} from {count(span.get('results', 0))} results and "
        f"{count(span.get('repeat_pairs', 0))} repeat pairs between {moment(span.get('since'))} "
        f"and {moment(span.get('until'))}."
    )


def _measured(name: str, value: Any) -> str:
    """What a dimension's sentence does not already say of its measured value: the share
    of repeat pairs inside the schema."""
    if name == "determinism" and isinstance(value, Mapping) and value.get("in_schema") is not None:
        return f"{percent(value['in_schema'])} of repeat pairs in the schema"
    return ""


def dimension_lines(grade: Row, veto: float) -> str:
    """Each dimension: its score, its measured value, whether it signals danger, and its
    sentence; the error cost's veto said apart."""
    out = []
    for name, label in DIMENSIONS.items():
        dimension = grade["dimensions"].get(name)
        if dimension is None:
            continue
        score = dimension.get("score")
        shown = NONE if score is None else decimal(score)
        if name == "error_cost":
            shown = f"1 − {number(dimension['value'])} = {shown}"
        signal = " · **danger signal**" if dimension.get("signal") else ""
        measured = _measured(name, dimension.get("value"))
        out.append(
            f"- **{label}** — score {shown}{signal}"
            + (f" · {measured}" if measured else "")
            + f": {line(dimension.get('reason', ''))}"
        )
    cost = grade["dimensions"].get("error_cost")
    if cost is not None:
        out.append(veto_line(cost, veto))
    return "\n".join(out)


def veto_line(cost: Row, veto: float) -> str:
    actions = ", ".join(line(a) for a in cost.get("irreversible_actions") or []) or "none"
    if cost.get("veto"):
        said = (
            f"**Veto**: error cost {number(cost['value'])} is at or above {number(veto)}, "
            "so the task stays on the cloud whatever the other dimensions score"
        )
    else:
        said = (
            f"Veto: not applied (error cost {number(cost['value'])} is below {number(veto)}); "
            "it is judged before any weighting, and no score overrides it"
        )
    return f"\n{said}. Irreversible actions: {actions}."


def to_change_lines(grade: Row) -> str:
    return "\n".join(f"- {line(s)}" for s in grade.get("to_change") or [])


def noisy_lines(grade: Row) -> str | None:
    """The fields (checks) the cloud itself changes on more than the noisy-field rate of
    its repeats, with the rate; None when none is."""
    noisy = grade.get("noisy") or []
    if not noisy:
        return None
    return "\n".join(
        f"- **{line(n['name'])}** — {percent(n['rate'])} "
        f"({count(n['count'])} of {count(n['pairs'])} repeat pairs)"
        for n in noisy
    )


def missing_lines(grade: Row) -> str | None:
    """What an insufficient grade lacks, one line each; None when nothing is missing."""
    missing = grade.get("missing") or []
    if not missing:
        return None
    return "\n".join(f"- {line(m)}" for m in missing)
