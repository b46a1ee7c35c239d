"""Hostile review of step 18 (issue 28): the faster ingest, flag polls and windows tried as
a hostile routing service or user would, against the answers the code gave before. Each
test pins one defect, marked xfail (strict) until it is fixed, and is kept as its
regression test then."""

from __future__ import annotations

import unicodedata
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select

from controlplane.catalog.schemas import TaskConfig
from controlplane.compare.fingerprint import normalise_text_python
from controlplane.db import get_engine, session_scope
from controlplane.metrics.service import compute_window
from controlplane.models import Result, Task, WindowMetrics
from controlplane.rollout.configs import apply_config
from tests.ingest.native_support import native
from tests.windowdata import T0

# --- input identity ----------------------------------------------------------------------

# Texts already in NFKC, as most Greek, Arabic, Hebrew, Hindi and Vietnamese inputs are.
ALREADY_NFKC = {
    "greek": "Καλημέρα σας, θα ήθελα να επιστρέψω την παραγγελία μου.",
    "arabic": "مرحبا، أريد إرجاع طلبي من فضلك.",
    "hindi": "नमस्ते, मैं अपना ऑर्डर वापस करना चाहता हूँ।",
    "vietnamese": "Xin chào, tôi muốn trả lại đơn hàng của tôi.",
}


@pytest.mark.parametrize("language", sorted(ALREADY_NFKC))
def test_a_text_already_in_nfkc_is_not_normalised_word_by_word(
    language: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = native("_normal")
    text = ALREADY_NFKC[language]
    assert unicodedata.is_normalized("NFKC", text)
    calls: list[str] = []

    def counted(form: str, piece: str) -> str:
        calls.append(piece)
        return unicodedata.normalize(form, piece)

    monkeypatch.setattr(module, "normalize", counted)
    assert module.normal(text) == normalise_text_python(text)
    # The reference normalises the whole text once; the compiled path should not do worse.
    assert len(calls) <= 1, calls


# --- windows -----------------------------------------------------------------------------

ONE_BUCKET = {
    "task": "one_bucket",
    "comparator": {"kind": "label", "labels": ["a", "b"]},
    # No boundaries: every result in one bucket, "0+". The config accepts it.
    "length_buckets": [],
    "window_seconds": 60,
}


def _result(i: int, tokens: int, outcome: str) -> dict[str, Any]:
    ts = T0 + timedelta(seconds=5 * i)
    return {
        "request_id": f"one-{i}",
        "ts": ts,
        "received_at": ts,
        "input_tokens": tokens,
        "decision": "edge",
        "served": "cloud",
        "degraded": False,
        "config_version": 1,
        "bucket": "0+",
        "comparator": "label",
        "comparator_version": 1,
        "edge_ran": True,
        "cloud_ran": True,
        "outcome": outcome,
        "edge_valid": True,
    }


def test_a_task_with_one_length_bucket_still_gets_its_windows(db_url: str) -> None:
    assert TaskConfig.model_validate(ONE_BUCKET).length_buckets == []
    engine = get_engine(db_url)
    with session_scope(engine) as session:
        apply_config(session, ONE_BUCKET, actor="test")
        task_id = session.scalar(select(Task.id).where(Task.name == "one_bucket"))
        # Three results: two agree, one conflicts.
        rows = [_result(0, 10, "agree"), _result(1, 20, "agree"), _result(2, 30, "conflict")]
        session.execute(insert(Result), [{"task_id": task_id, **row} for row in rows])
    with session_scope(engine) as session:
        compute_window(session, task_id=task_id, window_start=T0, now=T0 + timedelta(hours=1))
    with session_scope(engine) as session:
        got = {
            m.bucket: (m.n_results, m.n_pairs, m.n_agree, m.n_conflict)
            for m in session.scalars(select(WindowMetrics))
        }
    # Hand-counted: 3 results, 3 pairs, 2 agree, 1 conflict, in "0+" and in "all".
    assert got == {"0+": (3, 3, 2, 1), "all": (3, 3, 2, 1)}
