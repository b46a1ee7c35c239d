"""The promotion gate (docs/evidence.md, "Rollouts") and the stage order, without I/O.

`verdict` judges the last `min_windows` windows closed in the stage, bucket by bucket,
from their stored metric rows and the rules' outcomes on them; `grade_block` says what the
task's grade (docs/grading.md) lets through when it leaves `shadow`; `next_stage` says where
a promotion goes from a stage.
"""

from __future__ import annotations

from typing import Any

from controlplane.catalog.schemas import TaskConfig
from controlplane.errors import ActionError
from controlplane.grading.grade import DIMENSIONS, LABELS
from controlplane.metrics.fields import ALL
from controlplane.metrics.stats import wilson
from controlplane.rollout.explain import rule_name
from controlplane.rollout.policy import CellOutcome, Windows, judged_buckets


def verdict(
    task: str, stage: str, config: TaskConfig, windows: Windows, outcomes: list[CellOutcome]
) -> dict[str, Any]:
    """The gate from the stage's windows and the rules' outcomes on them."""
    promotion = config.promotion
    recent = windows[-promotion.min_windows :]
    judged = judged_buckets(config.length_buckets, config.max_input_tokens)
    reasons: list[str] = []
    if len(recent) < promotion.min_windows:
        reasons.append(
            f"{len(recent)} of the {promotion.min_windows} windows needed have closed in {stage}"
        )
    buckets: dict[str, Any] = {}
    fail_limit = next(
        (
            r.threshold
            for r in config.rollback.rules
            if r.metric == "offload_fail_rate" and r.op == "<="
        ),
        None,
    )
    for bucket in [*judged, ALL]:
        members = judged if bucket == ALL else [bucket]
        rows = [w[b] for _, w in recent for b in members if b in w]
        results = sum(r["n_results"] for r in rows)
        agree, pairs = sum(r["n_agree"] for r in rows), sum(r["n_pairs"] for r in rows)
        fails, runs = sum(r["n_edge_fails"] for r in rows), sum(r["n_edge_runs"] for r in rows)
        interval = wilson(agree, pairs)
        fail_interval = wilson(fails, runs)
        view: dict[str, Any] = {
            "results": results,
            "pairs": pairs,
            "agreement": agree / pairs if pairs else None,
            "agreement_low": interval[0] if interval else None,
            "edge_fail_rate": fails / runs if runs else None,
            "edge_fail_rate_high": fail_interval[1] if fail_interval else None,
            "verdict": "pass",
        }
        if bucket != ALL and results == 0:
            view["verdict"] = "no traffic"
        elif pairs < promotion.min_samples_per_bucket:
            view["verdict"] = "insufficient evidence"
            reasons.append(
                f"bucket {bucket}: insufficient evidence, {pairs} pairs of the "
                f"{promotion.min_samples_per_bucket} needed"
            )
        elif interval is not None and interval[0] < promotion.agreement_lower_bound:
            view["verdict"] = "fail"
            reasons.append(
                f"bucket {bucket}: agreement lower bound {interval[0]:.1%} is under "
                f"{promotion.agreement_lower_bound:.1%}"
            )
        if fail_limit is not None and fail_interval is not None and fail_interval[1] > fail_limit:
            view["verdict"] = "fail"
            reasons.append(
                f"bucket {bucket}: edge failure rate upper bound {fail_interval[1]:.1%} is over "
                f"{fail_limit:.1%}"
            )
        buckets[bucket] = view
    # Shadow is meant to cost: its net savings never hold a promotion out of it.
    firing = [
        o
        for o in outcomes
        if o.firing is not None
        and o.rule.mode != "off"
        and not (stage == "shadow" and o.rule.metric == "net_savings")
    ]
    for o in firing:
        reasons.append(f"rule {rule_name(o.rule)} would fire in {o.cell}")
    return {
        "task": task,
        "stage": stage,
        "passed": not reasons,
        "windows": len(recent),
        "reasons": reasons,
        "buckets": buckets,
    }


def grade_block(grade: dict[str, Any], config: TaskConfig) -> dict[str, Any] | None:
    """What the task's grade says about leaving `shadow`: None when its tier is `offload`;
    else the refusal, its `reason` naming the dimension (or what is missing), and whether
    `force` may override it: for `shadow`, `insufficient` and a `keep_cloud` by score, never
    for `forbid` nor for a `keep_cloud` by the error-cost veto."""
    tier = grade["tier"]
    if tier == "offload":
        return None
    vetoed = bool(grade["dimensions"]["error_cost"]["veto"])
    return {
        "tier": tier,
        "score": grade.get("score"),
        "reason": _grade_reason(grade, config),
        "forceable": tier != "forbid" and not (tier == "keep_cloud" and vetoed),
        "reasons": grade["reasons"],
        "missing": grade["missing"],
        "to_change": grade.get("to_change", []),
        "computed_at": grade["computed_at"],
    }


def _grade_reason(grade: dict[str, Any], config: TaskConfig) -> str:
    """One sentence naming what keeps the tier from `offload`: what is missing; the forbid
    or the veto; the dimensions with a danger signal; or, with none, the weakest one."""
    if grade["tier"] == "insufficient":
        return "too little traffic to grade the task: " + "; ".join(grade["missing"])
    if grade["reasons"]:
        return "; ".join(grade["reasons"])
    dimensions = grade["dimensions"]
    scored = [d for d in DIMENSIONS if dimensions[d].get("score") is not None]
    weakest = min(scored, key=lambda d: dimensions[d]["score"])
    return (
        f"score {grade['score']:.3f} is under the offload band "
        f"{config.grading.tiers.offload:g}; weakest: {LABELS[weakest]} "
        f"(score {dimensions[weakest]['score']:.2f}): {dimensions[weakest]['reason']}"
    )


def grade_evidence(grade: dict[str, Any]) -> dict[str, Any]:
    """What a decision keeps of the grade it was judged on."""
    keep = ("tier", "score", "computed_at", "span", "reasons", "missing")
    return {name: grade.get(name) for name in keep}


def next_stage(stage: str, canary_step: int, config: TaskConfig) -> tuple[str, int]:
    """Where a promotion from `stage` goes: (stage, canary step). ActionError 409 when none."""
    steps = config.promotion.canary_steps
    if stage == "cloud":
        return "shadow", 0
    if stage == "shadow":
        return ("canary", 0) if steps else ("full", 0)
    if stage == "canary":
        if canary_step + 1 < len(steps):
            return "canary", canary_step + 1
        return "full", 0
    raise ActionError(
        409,
        f"stage: {stage!r} cannot be promoted"
        + (
            "; a rolled-back task is re-armed first (POST /v1/tasks/{task}/rearm)"
            if stage == "rolled_back"
            else ""
        ),
    )
