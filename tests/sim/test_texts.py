"""The simulator's input texts (pure): tickets, invoice scans and reply contexts in both
languages whose content matches the truth the cloud answers, a long ticket's deciding
sentence in its middle, lengths that follow the input tokens up to a cap, every text its
own; and reply wordings that tell no side."""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from controlplane.compare.redaction import mask_text
from controlplane.sim import texts
from controlplane.sim.profiles import LONG_TICKET, REWRITES, generate, wordings
from controlplane.sim.reviewer import judge

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
N = 3000
CJK = re.compile("[\u4e00-\u9fff]")


@functools.cache
def _results(task: str) -> list[dict[str, Any]]:
    return generate(task, N, seed=9, now=NOW)


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", template)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else ".+?" for i, p in enumerate(parts)))


DECIDING = {
    label: [_pattern(t) for by_language in languages.values() for t in by_language]
    for label, languages in texts.DECIDING.items()
}


def _middle(ticket: texts.Ticket) -> float:
    """Where the deciding sentence's centre sits, as a share of the text."""
    return (ticket.text.index(ticket.deciding) + len(ticket.deciding) / 2) / len(ticket.text)


def test_a_long_tickets_deciding_sentence_sits_in_its_middle() -> None:
    rng = random.Random(1)
    seen = Counter()
    for _ in range(400):
        label = rng.choice(list(texts.DECIDING))
        ticket = texts.ticket(rng, label, rng.randrange(LONG_TICKET, 4 * LONG_TICKET))
        seen[ticket.language] += 1
        assert 0.35 < _middle(ticket) < 0.65, (ticket.language, _middle(ticket))
        assert ticket.text.count(ticket.deciding) == 1
    assert min(seen[language] for language in texts.LANGUAGES) > 100


def test_a_ticket_asks_for_what_its_label_names_and_nothing_else() -> None:
    for r in _results("ticket_classify"):
        text, truth = r["input"]["text"], r["cloud"]["output"]
        asks = {
            label for label, patterns in DECIDING.items() if any(p.search(text) for p in patterns)
        }
        assert asks == {truth}, (truth, asks, text[:300])


def test_an_invoice_scan_holds_the_amount_currency_and_id_the_cloud_extracts() -> None:
    for r in _results("invoice_extract"):
        text, truth = r["input"]["text"], r["cloud"]["output"]
        total = f"{truth['currency']} {texts.money(round(truth['amount'] * 100))}"
        assert re.search(f"(Total due |价税合计：){re.escape(total)}\n", text), (total, text[:600])
        assert f"{truth['invoice_id']}\n" in text


def test_a_reply_context_holds_the_replys_facts_in_its_language() -> None:
    """Every number and email of the cloud's reply stands in the conversation it rewrites
    (the agent's draft), and a Chinese reply has a Chinese context."""
    for r in _results("reply_rewrite"):
        text, reply = r["input"]["text"], r["cloud"]["output"]
        facts = re.findall(r"[\w.]+@[\w.]+\w|\d+", reply)
        assert facts and all(fact in text for fact in facts), (reply, text[-300:])
        assert bool(CJK.search(text)) == bool(CJK.search(reply))


@pytest.mark.parametrize("task", ["ticket_classify", "invoice_extract", "reply_rewrite"])
def test_texts_are_unique_in_both_languages_and_follow_the_tokens_to_a_cap(task: str) -> None:
    results = _results(task)
    inputs = [r["input"]["text"] for r in results]
    assert len(set(inputs)) == len(inputs)
    chinese = sum(bool(CJK.search(t)) for t in inputs) / len(inputs)
    assert 0.25 < chinese < 0.75, chinese
    assert max(len(t.encode()) for t in inputs) <= 12_000
    for r, text in zip(results, inputs, strict=True):
        language = "zh" if CJK.search(text) else "en"
        target = texts.target_chars(r["input_tokens"], language)
        if 800 <= target < texts.MAX_CHARS[language]:
            assert 0.7 < len(text) / target < 1.3, (task, r["input_tokens"], len(text), target)
    if task == "reply_rewrite":  # stored redacted: still one text each
        assert len({mask_text(t) for t in inputs}) == len(inputs)


def test_either_side_words_a_reply_either_way() -> None:
    """The edge's faithful answers and the cloud's are drawn from the same wordings: each
    side uses a reply's first wording about half the time, and their lengths match; the
    simulated reviewer takes every wording as right."""
    results = [r for r in _results("reply_rewrite") if r["edge"]["output"] is not None]
    firsts = {group[0] for group in REWRITES}

    def first_share(side: str) -> float:
        used = [_wording_of(r[side]["output"]) for r in results]
        known = [u for u in used if u is not None]
        return sum(u in firsts for u in known) / len(known)

    assert abs(first_share("edge") - 0.5) < 0.05 and abs(first_share("cloud") - 0.5) < 0.05
    edge = sum(len(r["edge"]["output"]) for r in results) / len(results)
    cloud = sum(len(r["cloud"]["output"]) for r in results) / len(results)
    assert abs(edge - cloud) / cloud < 0.03
    fill = {"amount": 90, "amount2": 126, "phone": "13800138000", "email": "a@example.com"}
    fill["order"] = "SO-1234567"
    for reply in range(len(REWRITES)):
        said = [w[0].format(**fill) for w in wordings(reply)]
        assert all(judge("reply_rewrite", truth, other) is None for truth in said for other in said)
        slips = [s.format(**fill) for w in wordings(reply) for s in w[1:] if s]
        assert all(judge("reply_rewrite", said[0], s) == "meaning_changed" for s in slips)


def _wording_of(text: str) -> str | None:
    for group in REWRITES:
        for template in group[:2]:
            if _pattern(template).fullmatch(text):
                return template
    return None
