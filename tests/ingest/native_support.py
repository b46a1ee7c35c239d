"""What the compiled reader's equivalence tests share: its modules, loaded or failed with
the reason, and texts drawn from the readers' own alphabets."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
from hypothesis import strategies as st


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
