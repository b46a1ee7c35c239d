"""shadowplane_dashboard.task.views: what the Task page's sections say, from plain data, no render."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shadowplane_dashboard.formats import line
from shadowplane_dashboard.task import views

NAMES = ["ticket_classify", "invoice_extract"]
STEP = {
    "window_start": "2026-11-30T02:55:00+00:00",
    "window_end": "2026-11-30T03:00:00+00:00",
    "num": 12.0,
    "den": 40.0,
    "estimate": 0.3,
    "contribution": 1.234,
    "counted": 1.0,
    "sum": 5.5,
}
WINDOW = {**STEP, "bound": 0.21, "threshold": 0.15, "verdict": "breach"}


def test_rolled_back_tasks_come_first() -> None:
    found = [
        {"task": "b", "stage": "shadow"},
        {"task": "z", "stage": "rolled_back"},
        {"task": "a", "stage": "canary"},
    ]
    assert views.rolled_back_first(found) == ["z", "a", "b"]


@pytest.mark.parametrize(
    ("asked", "linked", "current", "picked"),
    [
        (None, None, None, "ticket_classify"),  # nothing asked: the first task
        ("invoice_extract", None, None, "invoice_extract"),  # a link is followed
        (
            "invoice_extract",
            "invoice_extract",
            "ticket_classify",
            "ticket_classify",
        ),  # a pick wins over the link already followed
        (
            "invoice_extract",
            "ticket_classify",
            "ticket_classify",
            "invoice_extract",
        ),  # a new link wins
        ("gone", None, "gone", "ticket_classify"),  # an unknown pick falls back
    ],
)
def test_pick(asked: str | None, linked: str | None, current: str | None, picked: str) -> None:
    assert views.pick(asked, NAMES, linked=linked, current=current) == picked


def test_an_unknown_task_is_echoed_short_and_escaped() -> None:
    said = views.unknown_task("x" * 500, NAMES)
    assert said.count("x") == views.ASKED_SHOWN and "…" in said
    assert "of the 2 tasks" in said
    assert "\\[" in views.unknown_task("[a](b)", NAMES)


def test_a_cusum_run_as_table_and_text() -> None:
    evidence = {"steps": [STEP, {**STEP, "counted": 0.0}], "cap": 2, "h": 5, "min_effect": 0.1}
    decision = {"evidence": evidence}
    assert views.evidence_kind(decision) == "steps"
    table = views.step_rows(evidence)
    assert list(table["window"]) == ["2026-11-30 02:55 – 03:00 UTC"] * 2
    assert list(table["counts"]) == ["12/40"] * 2
    # Rates in percent and the evidence signed, as the text writes them.
    assert list(table["estimate"]) == ["30.0%"] * 2
    assert list(table["evidence"]) == ["+1.23"] * 2 and list(table["sum"]) == ["5.50"] * 2
    assert "12/40 = 30.0%, evidence +1.23, counted +1.00, sum **5.50**" in views.step_lines(
        evidence
    )
    assert "each window counts at most 2" in views.cusum_explained(evidence)
    assert "fires at h = 5" in views.cusum_explained(evidence)
    assert views.omitted_steps(evidence) is None
    assert "began 1,200 windows" in str(views.omitted_steps({**evidence, "steps_omitted": 1200}))
    # Only the windows that added to the sum get example results.
    assert views.bad_windows(decision) == [STEP]


def test_windows_of_ten_seconds_are_written_to_the_second() -> None:
    """A task with 10-second windows: each window reads with its seconds, in the table and
    the text (to the minute, two windows read "20:29 UTC – 20:29")."""
    ten = {
        **WINDOW,
        "window_start": "2026-11-30T20:29:10+00:00",
        "window_end": "2026-11-30T20:29:20+00:00",
    }
    assert list(views.window_rows({"windows": [ten]})["window"]) == [
        "2026-11-30 20:29:10 – 20:29:20 UTC"
    ]
    assert views.window_lines({"windows": [ten]}).startswith(
        "- 2026-11-30 20:29:10 – 20:29:20 UTC: 12/40"
    )
    assert views.example_heading(ten, "all") == (
        "Example results of 2026-11-30 20:29:10 – 20:29:20 UTC (all)"
    )


def test_verdicts_per_window_as_table_and_text() -> None:
    evidence = {"windows": [WINDOW, {**WINDOW, "verdict": "ok"}], "confidence": 0.95}
    decision = {"evidence": evidence}
    assert views.evidence_kind(decision) == "windows"
    table = views.window_rows(evidence)
    assert list(table["95% bound"]) == ["21.0%", "21.0%"]
    assert list(table["verdict"]) == ["breach", "ok"]
    assert "12/40 = 30.0%, 95% bound 21.0%, threshold 0.15: **breach**" in views.window_lines(
        evidence
    )
    assert views.bound_name({"confidence": "point"}) == "bound"
    assert views.bad_windows(decision) == [WINDOW]


def test_a_promotion_says_whether_the_gate_passed() -> None:
    decision = {
        "evidence": {"gate": {"passed": False, "reasons": ["too few pairs"]}, "forced": True}
    }
    assert views.evidence_kind(decision) == "gate"
    assert views.gate_passed(decision["evidence"]) == (
        "The gate did not pass then: too few pairs. It was forced past the gate (audited)."
    )
    assert views.gate_passed({}) is None
    assert views.evidence_kind({"evidence": None}) is None


def test_the_decision_heading() -> None:
    decision = {
        "created_at": datetime(2026, 11, 30, 3, 1, tzinfo=UTC),
        "action": "rollback",
        "actor": "policy",
        "stage_before": "canary",
        "stage_after": "rolled_back",
        "rule": "agreement",
        "bucket": "512+",
    }
    assert views.decision_heading(decision) == (
        r"**2026-11-30 03:01 UTC** · rollback by **policy** (canary → rolled\_back) · "
        r"rule agreement in 512\+"
    )
    assert views.decision_heading({**decision, "rule": None, "stage_before": None}).endswith(
        r"(— → rolled\_back)"
    )
    # On the page of a task whose windows are shorter than a minute: to the second.
    assert views.decision_heading(decision, seconds=True).startswith("**2026-11-30 03:01:00 UTC**")


def test_alerts_and_eval_runs_read_their_times_as_the_page_does() -> None:
    """The alerts' and a blocked model's runs' tables give times as every sentence does
    (they were raw stored values, microseconds and +00:00)."""
    opened = datetime(2026, 11, 30, 20, 29, 14, 123456, tzinfo=UTC)
    alert = {
        "opened_at": opened,
        "kind": "no_traffic",
        "state": "open",
        "message": "m",
        "acknowledged_by": None,
    }
    assert views.alert_rows([alert], seconds=True).to_dict("records") == [
        {
            "opened": "2026-11-30 20:29:14 UTC",
            "kind": "no_traffic",
            "state": "open",
            "message": "m",
            "acknowledged_by": None,
        }
    ]
    assert views.alert_lines([alert]) == "- 2026-11-30 20:29 UTC · no\\_traffic (open): m"
    run = {"layer": "l", "accuracy": 0.9, "n": 10, "correct": 9, "current": True, "actor": "a"}
    [row] = views.run_rows([{**run, "created_at": opened.isoformat()}]).to_dict("records")
    assert row == {**run, "accuracy": "90.0%", "run at": "2026-11-30 20:29 UTC"}


def test_the_gate_and_its_buckets() -> None:
    gate = {
        "passed": False,
        "windows": 3,
        "stage": "shadow",
        "reasons": ["agreement below 0.9"],
        "buckets": {
            "0-511": {
                "verdict": "fail",
                "results": 50,
                "pairs": 40,
                "agreement": 0.8,
                "agreement_low": 0.7,
                "edge_fail_rate": 0.02,
                "edge_fail_rate_high": None,
            }
        },
    }
    assert views.gate_sentence(gate) == (
        "The gate does not pass over the last 3 windows closed in shadow: agreement below 0\\.9."
    )
    assert views.gate_sentence({**gate, "passed": True, "reasons": []}).endswith("in shadow.")
    rows = views.gate_rows(gate)
    assert rows[0]["bucket"] == "0-511"
    assert views.gate_lines(rows) == (
        "- 0\\-511: **fail** — 40 pairs, agreement 80.0% (lower bound 70.0%)"
    )
    # The table in percent, as the sentences write it.
    assert views.gate_table(rows).to_dict("records") == [
        {
            "bucket": "0-511",
            "verdict": "fail",
            "results": 50,
            "pairs": 40,
            "agreement": "80.0%",
            "lower bound": "70.0%",
            "edge failures": "2.0%",
            "upper bound": "—",
        }
    ]


def test_shown_reads_buckets_and_the_judged_versions_buckets() -> None:
    shown = views.Shown(
        "sqlite://",
        "t",
        {},
        {"length_buckets": [512]},
        versions=[{"version": 1, "config": {"length_buckets": [128, 1024]}}],
    )
    assert shown.buckets == ["0-511", "512+"]
    assert shown.cell_bounds({"evidence": {"config_version": 1}}) == (128, 1024)
    assert shown.cell_bounds({"evidence": {"config_version": 7}}) == (512,)
    assert shown.events.empty


def test_what_changed_between_versions() -> None:
    changes = [{"path": "review.quota_per_window", "before": 8, "after": 12}]
    assert views.what_changed(1, 2, changes) == (
        "What changed from version 1 to 2:\n- review\\.quota\\_per\\_window: 8 → 12"
    )
    assert views.what_changed(1, 2, []) == "Versions 1 and 2 hold the same config."


@pytest.mark.parametrize(
    ("stage", "offered"),
    [
        ("shadow", {"promote", "rollback"}),
        ("full", {"rollback"}),
        ("cloud", {"promote"}),
        ("rolled_back", {"rearm"}),
    ],
)
def test_the_moves_an_admin_is_offered_at_each_stage(stage: str, offered: set[str]) -> None:
    moves = views.moves({"stage": stage, "stage_words": f"{stage} (words)"})
    assert [kind for kind, _, _ in moves] == ["promote", "rollback", "rearm"]
    assert {kind for kind, _, disabled in moves if not disabled} == offered
    assert moves[0][1] == f"Promote from {stage.replace('_', chr(92) + '_')} \\(words\\)"


def test_evidence_that_rounds_to_nothing_has_no_sign() -> None:
    tiny = {"steps": [{**STEP, "contribution": -0.001, "counted": -0.0, "sum": 0.0}]}
    assert "evidence 0.00, counted 0.00, sum **0.00**" in views.step_lines(tiny)


RESULT = {
    "request_id": "r-1",
    "ts": "2026-11-30T02:56:00+00:00",
    "input_tokens": 300,
    "comparison": {"outcome": None},
    "served": "cloud",
    "degraded": True,
    "degrade_reason": "edge pool down",
}


def test_an_example_result_names_the_sides_the_router_did_not_run_and_why() -> None:
    """Without it a result whose edge was not run reads like one whose edge was lost."""
    plain = views.example_line(RESULT)
    assert "not run" not in plain
    skipped = views.example_line(
        {**RESULT, "skipped": {"cloud_repeat": None, "edge": "pool *edge-gpu* full"}}
    )
    assert skipped == (
        plain + f", the edge not run ({line('pool *edge-gpu* full')}), "
        "the cloud's repeat not run (its reason not kept)"
    )
    assert views.example_line({**RESULT, "skipped": None}) == plain
    # A reason kept but empty is not one the policy dropped.
    for empty in ("", "  "):
        said = views.example_line({**RESULT, "skipped": {"edge": empty}})
        assert said == plain + ", the edge not run (no reason given)"
