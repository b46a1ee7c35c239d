"""The one-call compiled reader (`_spans.read`, what `conservation.read` runs) gives the
fields of `read_python`'s Reading, in order: on every table text, texts drawn from the
readers' alphabets (the rest it hands to the number reader is blanked in place, so a text
with spans and one without are both drawn), and after its own earlier calls (the text it
read is left as it was)."""

from __future__ import annotations

from collections import Counter

import pytest

from controlplane.compare.conservation import read_python
from tests.ingest.native_support import alike_on, any_texts, native, table_texts, texts

TABLE_TEXTS = table_texts(
    "",
    "一起去，一样好，统一，十分 ３５％ 三个",  # blanked by the number reader, no spans
    "订单 SO-2901826 预计3天内送达，请拨打 15768748905，一起 user1@example.com",
    "Call +86 138 0013 8000 or (555) 123-4567; INV-2024-001 is 10kg, 3pm.",
)


def assert_reads_as_python(text: str) -> None:
    kept = str(text)
    got = native("_spans").read(text)
    want = read_python(text)
    fields = (want.sentences, want.length, want.negations, want.numbers, want.spans)
    assert got == fields, (text, got, fields)
    for found, expected in ((got[2], want.negations), (got[3], want.numbers)):
        assert type(found) is Counter
        assert list(found.items()) == list(expected.items()), text  # the diff lists them
    assert type(got[4]) is frozenset
    assert text == kept


@pytest.mark.parametrize("text", TABLE_TEXTS, ids=range(len(TABLE_TEXTS)))
def test_every_table_text_reads_as_python(text: str) -> None:
    assert_reads_as_python(text)


def test_each_call_reads_its_own_text() -> None:
    """Calls in a row give what each gives alone (no state kept between them)."""
    sequence = ["SO-1 一起 3个", "Hi Ann, 5 apples", "SO-1 一起 3个", ""]
    alone = [native("_spans").read(t) for t in reversed(sequence)][::-1]
    assert [native("_spans").read(t) for t in sequence] == alone


test_drawn_pieces_read_as_python = alike_on(texts, assert_reads_as_python)
test_any_characters_read_as_python = alike_on(any_texts, assert_reads_as_python)
