"""The compiled text reader as the service runs it: `conservation.read` and the Masker give
exactly what their Python references (`read_python`, `Masker._mask_python`) give — on every
table case of text_conservation in both languages, every redaction case, the simulator's
replies, and texts drawn from the readers' own alphabets. The parts are held to their
references one by one in test_native_{counts,numbers,spans,mask}.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare import native
from controlplane.compare.comparators import compare
from controlplane.compare.redaction import Masker, redact_payload
from controlplane.sim.profiles import generate
from tests.ingest import test_linear_time, test_redaction, test_text_conservation
from tests.ingest.native_support import (
    PIECES,
    any_texts,
    assert_reads_alike,
    require_compiled_reader,
)


@pytest.fixture(autouse=True)
def compiled() -> None:
    require_compiled_reader()


def _masked(texts: list[str], compiled: bool) -> tuple[list[str], dict[Any, str], dict[str, int]]:
    """The texts masked in order by one Masker (shared numbering), and its numbering."""
    masker = Masker()
    kept = native.READER
    if not compiled:
        native.READER = None
    try:
        out = [masker.text(t) for t in texts]
    finally:
        native.READER = kept
    return out, masker._placeholders, masker._counts


def assert_same_masks(texts: list[str]) -> None:
    assert _masked(texts, compiled=True) == _masked(texts, compiled=False), texts


TABLE_TEXTS = sorted(
    {
        side
        for case in test_text_conservation.CASES
        for side in (case[1], case[2])
        if isinstance(side, str)
    }
)
REDACTION_TEXTS = [text for text, _ in test_redaction.CASES]


@pytest.mark.parametrize("text", TABLE_TEXTS)
def test_every_table_text_reads_the_same(text: str) -> None:
    assert_reads_alike(text)
    assert_same_masks([text])


@pytest.mark.parametrize(
    ("why", "edge", "cloud", "expected", "failed"),
    test_text_conservation.CASES,
    ids=[c[0] for c in test_text_conservation.CASES],
)
def test_every_table_case_compares_the_same(
    why: str, edge: Any, cloud: Any, expected: str, failed: set[str]
) -> None:
    spec = test_text_conservation.SPEC
    compiled = compare(spec, edge, cloud)
    kept = native.READER
    native.READER = None
    try:
        python = compare(spec, edge, cloud)
    finally:
        native.READER = kept
    assert (compiled.outcome, compiled.diff) == (python.outcome, python.diff)
    assert compiled.outcome == expected


@pytest.mark.parametrize("text", REDACTION_TEXTS)
def test_every_redaction_case_masks_the_same(text: str) -> None:
    assert_same_masks([text])
    assert_reads_alike(text)


def test_the_redaction_cases_through_one_masker_number_alike() -> None:
    # One Masker across all of them: placeholders numbered across texts, as in a payload.
    assert_same_masks(REDACTION_TEXTS + REDACTION_TEXTS[::-1])


def test_payloads_redact_the_same() -> None:
    payload = {
        "input": {"ann@example.com": REDACTION_TEXTS[:5], "n": 3},
        "edge_output": " ".join(REDACTION_TEXTS),
        "cloud_output": REDACTION_TEXTS[5:],
        "diff": {"failed": ["numbers"], "numbers": {"edge": ["13800138000"]}},
        "edge_error_message": "timeout for ann@example.com",
    }
    compiled = redact_payload(payload)
    kept = native.READER
    native.READER = None
    try:
        python = redact_payload(payload)
    finally:
        native.READER = kept
    assert compiled == python


def test_the_simulators_replies_read_and_mask_the_same() -> None:
    rows = generate("reply_rewrite", 400, seed=11, now=datetime(2026, 12, 1, tzinfo=UTC))
    replies = [
        side["output"]
        for row in rows
        for side in (row["edge"], row["cloud"])
        if isinstance(side["output"], str)
    ]
    # As they come, and run together into texts of ~3,000 characters.
    long_texts = [" ".join(replies[i : i + 30]) for i in range(0, len(replies), 30)]
    for text in replies + long_texts:
        assert_reads_alike(text)
    assert_same_masks(replies[:200])
    assert_same_masks(long_texts)


# Both alphabets: the linear-time tests' fragments (a lone surrogate among them: JSON lets
# one through) and the pieces the compiled reader's part tests draw from.
FRAGMENTS = sorted(set(test_linear_time.FRAGMENTS) | set(PIECES))
drawn = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)


@settings(max_examples=600, deadline=None)
@given(drawn)
def test_drawn_texts_read_and_mask_the_same(text: str) -> None:
    assert_reads_alike(text)
    assert_same_masks([text])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(drawn, any_texts), min_size=1, max_size=4))
def test_drawn_texts_through_one_masker_number_alike(texts: list[str]) -> None:
    assert_same_masks(texts)
    for text in texts:
        assert_reads_alike(text)
