"""What the compiled reader's equivalence tests share: its modules, loaded or failed with
the reason, texts drawn from the readers' own alphabets, and the parity harness (a reading
alike on drawn texts; alike and in linear time on hostile ones)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compare import native as reader
from controlplane.compare.conservation import Reading, read, read_python
from tests.ingest import test_linear_time, test_redaction, test_text_conservation

T = TypeVar("T")


def native(name: str) -> ModuleType:
    """controlplane.compare.<name>, the compiled module, or a failure saying how to build it
    (scripts/test builds it: a missing build must fail the suite, not skip it)."""
    try:
        return importlib.import_module(f"controlplane.compare.{name}")
    except ImportError as exc:
        pytest.fail(
            f"the compiled reader's {name} is not built ({exc}): "
            "run `.venv/bin/python setup.py build_ext --inplace` (scripts/test does)"
        )


# Pieces the readers look for, so drawn texts hit their cases (and their near misses)
# far more often than uniform characters would.
# fmt: off
PIECES = [
    *"0123456789",
    *"０１２３４５６７８９．，％",
    *"〇零一二两三四五六七八九十百千万亿点第",
    "百分之", "个", "元", "天", "到", "至", "、", "-", "~",
    *"不没无未非别莫勿否", "没有", "非常", "无论", "不过", "对不起", "差不多",
    "no", "not", "No", "NOT", "never", "none", "nothing", "nor", "without", "cannot",
    "can't", "don’t", "unable", "piano", "n't",
    *"“”「」『』《》\"'()（）[]【】",
    "Acme", "Bank", "of", "the", "America", "Hi", "Dear", "John", "Dec", "Tue", "Mr", "U.S",
    "O'Neil", "I", "AB12", "INV-2024-001", "SO-1380013", "3pm", "5th", "10kg", "x",
    "@", ".", "-", "_", "+", ":", "/", "%", ",", "com", "example", "www.", "https://",
    "ann@example.com", "138 0013 8000", "+86 13800138000", "(010) 12345678", "400-123-4567",
    "192.168.1.1", "fe80::1:2:3", "110101199003071234", "4111 1111 1111 1111", "123-45-6789",
    "<EMAIL_1>", "<NUM_2>", "<TRUNCATED_9>", "<ID_13800138000>",
    " ", "  ", "\t", "\n", "\u00a0", "\u200b", "\u3000",
    *"。！？!?.…", "...", "……",
    "١٣٨", "٠", "९", "＠", "é", "Ж", "Ω",
    "a", "b", "Z", "é", "中", "文", "的", "是", "percent", "per cent", "%",
    "1,000", ",000", "12,345,67", "1.5", "2.5万", "3亿", "5 %", "PerCent", "percentage",
    "一点儿", "一点点", "一会儿", "统一", "万一", "十分", "千万", "三心二意", "第一时间",
    "两千五", "一万二", "一千零五", "二〇二六", "点五", "１，０００", "٣.٥", "0" * 29,
    "0086", "(555) 123-4567", "010-12345678", "+44 (20) 7946", "josé@exämple.com", "a@b.c",
    "http://x.io/a?b=c),", "AT&T", "Johnson & Johnson", "van", "de", "Sept", "Thurs", "’",
    "iPhone", "NASA", "12GB", "_AB12_", "users'", "don't",
]
# fmt: on

texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
# Mostly the pieces, sometimes any character at all.
any_texts = st.lists(
    st.one_of(st.sampled_from(PIECES), st.characters(codec="utf-8")), max_size=40
).map("".join)


def require_compiled_reader() -> None:
    """Fail unless the compiled reader is the one running (these tests hold it to the Python
    one)."""
    if reader.READER is None:
        pytest.fail(
            f"the compiled text reader is not running ({reader.reader_name()}): build it "
            "(`.venv/bin/python setup.py build_ext --inplace`; scripts/test does) and leave "
            f"{reader.ENV} unset or `native`"
        )


def assert_reads_alike(text: str) -> None:
    """`read` (the compiled reader) and `read_python` give the same Reading, the Counters in
    the same order too (the diff lists them)."""
    compiled, python = read(text), read_python(text)
    assert isinstance(compiled, Reading)
    assert compiled == python, (text, compiled, python)
    assert list(compiled.negations.items()) == list(python.negations.items()), text
    assert list(compiled.numbers.items()) == list(python.numbers.items()), text


def alike_on(
    strategy: st.SearchStrategy[T], check: Callable[[T], None], examples: int = 400
) -> Callable[[], None]:
    """A property test: `check` (the compiled reader reads as the Python one) holds on
    `examples` draws of `strategy`. Bound to a test_* name in a test module."""

    @settings(max_examples=examples, deadline=None)
    @given(strategy)
    def test(drawn: T) -> None:
        check(drawn)

    return test


def assert_alike_in_linear_time(
    compiled: Callable[[str], object],
    build: Callable[[int], str],
    what: str,
    *,
    alike: Callable[[str], None] | None = None,
    collect: bool = True,
) -> None:
    """On the texts `build` makes: `alike` holds on one of 2,000 characters (the Python
    reader is quadratic on some families: a short one), and `compiled` reads 10 times the
    text in at most NATIVE_MAX_GROWTH times as long (test_linear_time)."""
    small, large = build(test_linear_time.SMALL), build(test_linear_time.LARGE)
    assert (len(small), len(large)) == (test_linear_time.SMALL, test_linear_time.LARGE), what
    if alike is not None:
        alike(build(2_000))
    test_linear_time.assert_grows_linearly(
        compiled,
        small,
        large,
        what,
        small_calls=10,
        max_growth=test_linear_time.NATIVE_MAX_GROWTH,
        collect=collect,
    )


def table_texts(*more: str) -> list[str]:
    """The readers' table texts (every text of the conservation and redaction tables) and
    `more`, sorted, each once."""
    return sorted(
        {
            side
            for case in test_text_conservation.CASES
            for side in (case[1], case[2])
            if isinstance(side, str)
        }
        | {text for text, _ in test_redaction.CASES}
        | set(more)
    )
