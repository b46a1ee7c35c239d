"""Hostile review of grading every task from its own traffic and of the cloud's own noise
floor (asked repeats, free repeats by input hash, the repeat columns, the windows and the
grade that read them, the CLI that shows it), on real PostgreSQL. Each test held one
defect found by sending strange but valid traffic, as a routing service may. Fixed, and
plain tests now: a free repeat pair hidden by a later result of the batch or by answers
too long to compare, a span that dropped the window at its start, a score the CLI showed
on the wrong side of its band, a review note that read other windows than the grade.
Still strict xfails (design, not yet changed): two answers to one input arriving out of
order make no pair, and one popular input decides the noise floor."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text, update
from typer.testing import CliRunner

from controlplane.catalog.service import apply_config, runtime_or_404
from controlplane.cli import app
from controlplane.db import get_engine, session_scope
from controlplane.grading import service
from controlplane.models import Task
from controlplane.review.noise import noisy_now
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.evalsets.helpers import cli_env
from tests.grading.test_service import Row, add_windows, register
from tests.windowdata import post_all

VETO = 0.7
SAME = {"text": "Where is my parcel 77?"}


def at(second: int) -> str:
    """A time on 2026-11-30 from 02:00:00, `second` seconds on."""
    return (datetime(2026, 11, 30, 2, 0, tzinfo=UTC) + timedelta(seconds=second)).isoformat()


def repeat_columns(api: Api) -> dict[str, tuple[Any, Any]]:
    """request id → (repeat_source, repeat_outcome) of every stored result."""
    with api.engine.connect() as conn:
        rows = conn.execute(text("SELECT request_id, repeat_source, repeat_outcome FROM results"))
        return {r[0]: (r[1], r[2]) for r in rows}


def accepted(api: Api, results: list[dict[str, Any]]) -> int:
    report = api.post_results({"results": results}).json()
    assert report["rejected"] == [], report
    return int(report["accepted"])


# --- free repeats: pairs never counted ---------------------------------------------------


def test_a_later_result_in_the_same_batch_hides_an_older_results_free_repeat(
    pg_api: Api,
) -> None:
    """Stored: x0 at 02:00:10, then x1..x4 at 02:01:41..02:01:44, all the same input,
    all answered `refund` by the cloud. A router then posts one batch of two results of
    that input: `a` at 02:00:20 (ten seconds after x0, well within the default
    duplicate_seconds of a day) and `b` at 02:03:20. `a`'s latest earlier answer is x0:
    expected repeat ("duplicate", "agree"). Observed (None, None): the one read per task
    takes the 4 newest answers up to 02:03:20 (x1..x4, all after `a`), and x0 is never
    seen. Posted alone, `a` pairs with x0 (the same traffic, another batching)."""
    api = pg_api
    assert accepted(api, [make_result(request_id="x0", input=SAME, ts=at(10))]) == 1
    later = [make_result(request_id=f"x{i}", input=SAME, ts=at(100 + i)) for i in range(1, 5)]
    assert accepted(api, later) == 4
    batch = [
        make_result(request_id="a", input=SAME, ts=at(20)),
        make_result(request_id="b", input=SAME, ts=at(200)),
    ]
    assert accepted(api, batch) == 2
    # The same traffic for another input, `a2` posted alone: it pairs with its x0.
    other = {"text": "Where is my parcel 78?"}
    assert accepted(api, [make_result(request_id="y0", input=other, ts=at(10))]) == 1
    more = [make_result(request_id=f"y{i}", input=other, ts=at(100 + i)) for i in range(1, 5)]
    assert accepted(api, more) == 4
    assert accepted(api, [make_result(request_id="a2", input=other, ts=at(20))]) == 1
    stored = repeat_columns(api)
    assert stored["a2"] == ("duplicate", "agree")
    assert stored["b"] == ("duplicate", "agree")
    assert stored["a"] == ("duplicate", "agree"), stored


def test_answers_without_a_print_hide_the_answer_a_free_repeat_is_scored_against(
    pg_api: Api,
) -> None:
    """x0 at 02:00:10 answered `refund`; x1..x4 at 02:00:11..14, same input, the cloud
    answered with 140,000 characters (past compare_max_chars: stored, not compared, no
    print). `a` at 02:00:30 answers `refund`: its latest earlier comparable answer is
    x0, expected ("duplicate", "agree"). Observed (None, None): the read's LIMIT 4 per
    hash is spent on x1..x4, whose missing prints are filtered out after it."""
    api = pg_api
    assert accepted(api, [make_result(request_id="x0", input=SAME, ts=at(10))]) == 1
    long = "refund " * 20_000
    for i in range(1, 5):
        loud = make_result(request_id=f"x{i}", input=SAME, ts=at(10 + i), cloud={"output": long})
        assert accepted(api, [loud]) == 1
    with api.engine.connect() as conn:
        printed = conn.execute(
            text("SELECT count(*) FROM results WHERE jsonb_typeof(cloud_print) = 'object'")
        ).scalar_one()
    assert printed == 1  # only x0 holds a print
    assert accepted(api, [make_result(request_id="a", input=SAME, ts=at(30))]) == 1
    assert repeat_columns(api)["a"] == ("duplicate", "agree")


@pytest.mark.xfail(
    strict=True,
    reason="a free repeat is only ever looked for backwards in ts from the result being "
    "stored: when the later result of two with the same input arrives first (a retry, "
    "a late batch), neither is ever paired, so the noise floor depends on arrival order",
)
def test_two_answers_to_one_input_arriving_out_of_order_make_no_repeat_pair(
    pg_api: Api,
) -> None:
    """Two results of the same input, 20 seconds apart, the cloud answering `refund` then
    `exchange` (a conflict the noise floor must hear). Sent in ts order (x then y) they
    make one repeat pair (y's, a conflict). Sent in the other order, as a router's retry
    or a late batch delivers them (q at 02:00:30 first, then p at 02:00:10; and in one
    batch [s at 02:00:30, r at 02:00:10]): expected one repeat pair each time, as
    docs/http-api.md says ("a later result ... within duplicate_seconds after an earlier
    one, stored or earlier in the same batch, is scored against the latest such answer").
    Observed: no pair at all either way; the cloud's disagreement is never counted."""
    api = pg_api
    in_order = [
        make_result(request_id="x", input={"text": "in order"}, ts=at(10)),
        make_result(
            request_id="y", input={"text": "in order"}, ts=at(30), cloud={"output": "exchange"}
        ),
    ]
    for result in in_order:
        assert accepted(api, [result]) == 1
    late = {"text": "out of order"}
    assert (
        accepted(
            api, [make_result(request_id="q", input=late, ts=at(30), cloud={"output": "exchange"})]
        )
        == 1
    )
    assert accepted(api, [make_result(request_id="p", input=late, ts=at(10))]) == 1
    one_batch = {"text": "one batch, reversed"}
    batch = [
        make_result(request_id="s", input=one_batch, ts=at(30), cloud={"output": "exchange"}),
        make_result(request_id="r", input=one_batch, ts=at(10)),
    ]
    assert accepted(api, batch) == 2
    stored = repeat_columns(api)
    assert stored["y"] == ("duplicate", "conflict")
    assert [stored["p"], stored["q"]].count((None, None)) == 1, stored
    assert [stored["r"], stored["s"]].count((None, None)) == 1, stored


# --- the noise floor: one popular input decides it -------------------------------------

LABELS = ["refund", "exchange", "complaint", "inquiry"]


@pytest.mark.xfail(
    strict=True,
    reason="every resend of one input within duplicate_seconds is a free repeat pair "
    "counted as an independent pair: one popular input (a greeting, or a router cache "
    "answering it) outvotes the cloud's noise measured on every other input, lifts "
    "self-agreement past the signal and the grade to offload",
)
def test_one_popular_input_decides_the_cloud_noise_floor_and_the_tier(pg_api: Api) -> None:
    """1,000 distinct tickets over 20 hours, 100 of them with an asked `cloud_repeat`, 30
    of which the cloud answers differently: self-agreement 70%, far under the 95% signal.
    Besides them 2,000 requests of one input, "hi", all answered `inquiry` (as a routing
    service's answer cache would): 1,999 free repeat pairs of that one text. Expected: the
    grade still signals determinism (the cloud disagrees with itself on 30% of the inputs
    it was asked twice; one text repeated is not 1,999 independent measurements) and the
    task is not offload. Observed: self-agreement 98.6% over 2,099 pairs, lower bound
    98.0%, determinism score 1.0, no signal, tier offload."""
    api = pg_api
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    name = "noise_hot"
    with session_scope(api.engine) as session:
        apply_config(
            session,
            {
                "task": name,
                "comparator": {"kind": "label", "labels": LABELS},
                "window_seconds": 3600,
                "allowed_lateness_seconds": 60,
            },
            actor="test",
        )
        session.execute(
            text("UPDATE task_config_versions SET created_at = :t"), {"t": now - timedelta(days=2)}
        )
    rng = random.Random(3)
    results: list[dict[str, Any]] = []
    hours = 20 * 3600

    def base(i: int, n: int, text_: str, label: str) -> dict[str, Any]:
        return {
            "request_id": f"{name}-{len(results)}",
            "task": name,
            "ts": (now - timedelta(seconds=hours * (n - i) / n)).isoformat(),
            "input_tokens": 120,
            "decision": "edge",
            "served": "cloud",
            "input": {"text": text_},
            "edge": {"output": label, "latency_ms": 40.0},
            "cloud": {"output": label, "latency_ms": 380.0},
        }

    for i in range(1000):
        label = rng.choice(LABELS)
        result = base(i, 1000, f"ticket {i}: my order {1000 + i} is late", label)
        if i % 10 == 0:
            again = label if (i // 10) % 10 >= 3 else next(x for x in LABELS if x != label)
            result["cloud_repeat"] = {"output": again, "latency_ms": 390.0}
        results.append(result)
    for i in range(2000):
        results.append(base(i, 2000, "hi", "inquiry"))
    post_all(api, results)
    assert run_pass(api.engine, now + timedelta(seconds=120)).failed == []

    answer = api.client.get(f"/v1/tasks/{name}/grade", headers=api.headers("read"))
    assert answer.status_code == 200, answer.text
    found = answer.json()
    determinism = found["dimensions"]["determinism"]
    # What was counted: 100 asked pairs (70 agreeing) and 1,999 free repeats of "hi".
    assert found["span"]["repeat_pairs"] == 2099, found["span"]
    assert determinism["signal"] is True, determinism
    assert found["tier"] != "offload", (found["tier"], found["score"])


# --- the span's edges ----------------------------------------------------------------------


def test_a_span_drops_the_window_at_its_start_and_still_divides_by_the_whole_span(
    pg_url: str,
) -> None:
    """A task with daily windows (window_seconds 86400, allowed) and grading.span `1d`,
    every minimum 0. Yesterday's window holds 24,000 results (1,000 an hour), today's,
    at 00:15 UTC, 250 (its first quarter hour). Graded at 00:15 as the daily job grades:
    expected about a day of traffic (the last 24 hours: at least 20,000 results, about
    24,000 calls a day). Observed: span.results 250 and "250 calls a day", the frequency
    score near 0: yesterday's window starts 15 minutes before the span and is left out."""
    engine = get_engine(pg_url)
    today = datetime(2026, 12, 10, tzinfo=UTC)
    config = {
        "task": "daily_windows",
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": 86400,
        "grading": {"span": "1d", "min_results": 0, "min_repeat_pairs": 0, "min_days": 0},
    }
    task_id = register(engine, config, versions={1: today - timedelta(days=30)})
    add_windows(
        engine,
        task_id,
        [
            Row(
                today - timedelta(days=1),
                1,
                n=24_000,
                p50=120.0,
                p95=200.0,
                tokens=3e6,
                pairs=240,
                agree=240,
            ),
            Row(today, 1, n=250, p50=120.0, p95=200.0, tokens=31_250.0, pairs=3, agree=3),
        ],
        seconds=86400,
    )
    with session_scope(engine) as session:
        found = service.grade_task(
            session, "daily_windows", veto=VETO, now=today + timedelta(minutes=15)
        )
    per_day = found["dimensions"]["frequency"]["value"]["per_day"]
    assert found["span"]["results"] >= 20_000, (found["span"], per_day)
    assert per_day >= 20_000, per_day


# --- what the CLI shows ---------------------------------------------------------------


def test_the_cli_never_prints_a_score_on_the_other_side_of_its_tier_band(pg_url: str) -> None:
    """A task graded on its error cost alone (the other weights 0, every minimum 0),
    error_cost 0.251: score 0.749, tier shadow (docs/grading.md: offload at or above
    0.75). The API answers 0.749. Expected: the CLI's line shows a score that is under
    0.75 (0.749). Observed: `cli_band  shadow   0.75  no danger signal` — a person reading it sees a
    score at the offload band and a task kept in shadow."""
    engine = get_engine(pg_url)
    with session_scope(engine) as session:
        apply_config(
            session,
            {
                "task": "cli_band",
                "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
                "error_cost": 0.251,
                "grading": {
                    "weights": {
                        "input_length": 0,
                        "determinism": 0,
                        "frequency": 0,
                        "error_cost": 1,
                    },
                    "min_results": 0,
                    "min_repeat_pairs": 0,
                    "min_days": 0,
                },
            },
            actor="test",
        )
    with cli_env(pg_url):
        done = CliRunner().invoke(app, ["grade", "--task", "cli_band"])
        as_json = CliRunner().invoke(app, ["grade", "--task", "cli_band", "--json"])
    assert done.exit_code == 0 and as_json.exit_code == 0, done.output + as_json.output
    assert '"score": 0.749' in as_json.output or '"score":0.749' in as_json.output
    line = next(line for line in done.output.splitlines() if line.startswith("cli_band"))
    _, tier, score, *_ = line.split()
    assert tier == "shadow"
    assert float(score) < 0.75, line


# --- the review note reads other windows than the grade ------------------------------------


def test_after_an_input_shift_the_review_note_names_the_noisy_fields_the_grade_names(
    pg_url: str,
) -> None:
    """json_fields task (amount, note). Before an input shift 3 days ago: 48 hourly
    windows with 10 repeat pairs each, `note` differing on 5 of them (50%). Since the
    shift: 48 windows with 10 pairs each, no field differing. The grade (since the shift)
    lists no noisy field; expected the blind review note's reading (noisy_now) to list
    the same, as docs/review.md says it is read "as the grade reads them". Observed:
    noisy_now lists `note` at 25% of 960 pairs, over both sides of the shift."""
    engine = get_engine(pg_url)
    now = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
    shift = now - timedelta(days=3)
    config = {
        "task": "shifted_fields",
        "comparator": {
            "kind": "json_fields",
            "fields": {"amount": "number", "note": "string"},
        },
        "window_seconds": 3600,
        "grading": {"min_results": 0, "min_repeat_pairs": 0, "min_days": 0},
    }
    task_id = register(engine, config, versions={1: now - timedelta(days=30)})
    before = [
        Row(
            shift - timedelta(hours=h),
            1,
            n=100,
            p50=100.0,
            p95=150.0,
            tokens=1e4,
            pairs=10,
            agree=5,
            diffs={"note": 5},
        )
        for h in range(1, 49)
    ]
    after = [
        Row(
            shift + timedelta(hours=h),
            1,
            n=100,
            p50=100.0,
            p95=150.0,
            tokens=1e4,
            pairs=10,
            agree=10,
            diffs={},
        )
        for h in range(0, 48)
    ]
    add_windows(engine, task_id, before + after)
    with session_scope(engine) as session:
        session.execute(update(Task).where(Task.id == task_id).values(shifted_at=shift))
    with session_scope(engine) as session:
        found = service.grade_task(session, "shifted_fields", veto=VETO, now=now)
        note = noisy_now(session, runtime_or_404(session, "shifted_fields"), now)
    assert found["span"]["since"] == shift.isoformat()
    assert found["noisy"] == []
    assert note == found["noisy"], note
