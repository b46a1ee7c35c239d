"""Scoring one result (pure): pairs, outcomes, buckets and which payloads are kept."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.catalog.schemas import parse_config
from controlplane.catalog.service import TaskRuntime
from controlplane.ingest.scoring import IngestContext, is_pair, keep_draw, score
from controlplane.ingest.validation import parse_result
from tests.conftest import make_result

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def runtime(**overrides: Any) -> TaskRuntime:
    config = parse_config(
        {
            "task": "ticket_classify",
            "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
            **overrides,
        }
    )
    spec = config.comparator.model_dump(mode="json")
    return TaskRuntime(7, "ticket_classify", "shadow", 3, config, spec, 1)


def scored(**overrides: Any) -> Any:
    return score(parse_result(make_result(**overrides)), runtime(), NOW)


@pytest.mark.parametrize(
    ("edge", "cloud", "pair"),
    [
        ({"output": "refund"}, {"output": "refund"}, True),
        ({"output": "refund", "valid": False}, {"output": "refund"}, False),
        ({"output": None, "error": "timeout"}, {"output": "refund"}, False),
        ({"output": "refund"}, {"output": None, "error": "rate_limited"}, False),
        ({"output": "refund"}, None, False),
    ],
)
def test_what_is_a_pair(edge: Any, cloud: Any, pair: bool) -> None:
    item = parse_result(
        make_result(
            edge=edge, cloud=cloud, decision="edge", served="edge" if cloud is None else "cloud"
        )
    )
    assert is_pair(item) is pair


def test_row_carries_versions_bucket_and_outcome() -> None:
    s = scored(input_tokens=2048, edge={"output": "Exchange "}, cloud={"output": "exchange"})
    assert s.row["task_id"] == 7 and s.row["config_version"] == 3
    assert s.row["bucket"] == "2048+"
    assert s.row["outcome"] == "agree" and s.row["comparator"] == "label"
    assert s.row["received_at"] == NOW


def test_naive_and_offset_times_are_stored_in_utc() -> None:
    naive = scored(ts="2026-11-30T02:00:00")
    assert naive.row["ts"] == datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    offset = scored(ts="2026-11-30T10:00:00+08:00")
    assert offset.row["ts"] == datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    assert offset.row["ts"].utcoffset() == timedelta(0)
    assert scored(ts=None).row["ts"] == NOW


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"edge": {"output": "exchange"}}, "conflict"),
        ({"edge": {"output": "cancel"}}, "invalid"),
        ({"edge": {"output": None, "error": "timeout"}}, "edge error"),
        ({"edge": {"output": "refund", "valid": False}}, "valid false"),
        ({"cloud": {"output": None, "error": "exception"}}, "cloud error"),
        ({"edge": {"output": "refund", "confidence": 0.3}}, "low confidence"),
        ({"degraded": True, "degrade_reason": "low_confidence"}, "degraded"),
    ],
)
def test_notable_results_always_keep_their_payload(overrides: dict[str, Any], reason: str) -> None:
    s = scored(**overrides)
    assert s.payload is not None, reason
    assert s.payload["keep_probability"] == 1.0


def test_agreeing_payloads_follow_the_keep_draw() -> None:
    kept = [scored(request_id=f"r-{i}") for i in range(2000)]
    probabilities = {s.payload["keep_probability"] for s in kept if s.payload}
    assert probabilities == {0.05}
    share = sum(s.payload is not None for s in kept) / len(kept)
    assert 0.03 < share < 0.07
    # The draw is fixed by identity: a resend decides the same way.
    assert all(
        (keep_draw("ticket_classify", f"r-{i}") < 0.05) == (kept[i].payload is not None)
        for i in range(2000)
    )


def test_none_policy_keeps_nothing_even_for_conflicts() -> None:
    item = parse_result(make_result(edge={"output": "exchange"}))
    s = score(item, runtime(payload_policy="none"), NOW, IngestContext(id_hash_key=b"k" * 32))
    assert s.payload is None
    assert s.row["outcome"] == "conflict"


def test_keep_draw_is_uniform() -> None:
    draws = [keep_draw("t", f"req-{i}") for i in range(20000)]
    for cut in (0.01, 0.05, 0.25, 0.5, 0.9):
        assert abs(sum(d < cut for d in draws) / len(draws) - cut) < 0.01


def test_a_masked_degrade_reason_fits_its_column_with_whole_placeholders() -> None:
    """A 200-character degrade_reason that masking lengthens is cut to its column's 200
    characters before a placeholder it would split, and says so (it kept `…<EMAIL_1` of
    the nineteenth address, which read as the first)."""
    reason = ("x " + " ".join(f"a{i}@b.io" for i in range(40)))[:200]
    item = parse_result(make_result(degraded=True, served="cloud", degrade_reason=reason))
    context = IngestContext(id_hash_key=b"k" * 32)
    stored = score(item, runtime(payload_policy="redacted"), NOW, context).row["degrade_reason"]
    assert len(stored) <= 200 and "@" not in stored
    head, mark = stored.rsplit("…", 1)
    assert mark.startswith("<TRUNCATED_") and mark.endswith(">"), stored[-30:]
    assert "<" not in re.sub(r"<[A-Z]+_[0-9]+>", "", head), stored[-40:]
