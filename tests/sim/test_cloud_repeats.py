"""The simulator's cloud self-agreement profiles (pure): asked a second time for the same
input, each example task's cloud disagrees with itself at its designed rate — judged by
the task's own comparator, as ingest judges `cloud` against `cloud_repeat` — and the
invoice cloud's noise falls on its free-text field only."""

from __future__ import annotations

import functools
import math
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import yaml
from sqlalchemy import select

from controlplane.catalog.examples import FOLDER
from controlplane.client import wants_repeat
from controlplane.compare.comparators import compare
from controlplane.db import session_scope
from controlplane.keys.service import create_key
from controlplane.models import Result
from controlplane.sim.profiles import LONG_TICKET, generate
from controlplane.sim.runner import stream
from tests.conftest import Api
from tests.sim.test_simulator import live_api  # noqa: F401  (the live API fixture)

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
N = 20000
EXAMPLES = FOLDER


def _spec(task: str) -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLES / f"{task}.yaml").read_text())["comparator"])


@functools.cache
def _repeated(task: str) -> list[dict[str, Any]]:
    """N results of the task (seed 5), every one asked twice."""
    return generate(task, N, seed=5, now=NOW, repeat_rate=1.0)


def _within(count: int, n: int, p: float) -> bool:
    """Whether `count` of `n` draws lies in the two-sided 99.9% normal interval of a
    binomial(n, p) (z = 3.29)."""
    half = 3.29 * math.sqrt(n * p * (1 - p))
    return n * p - half <= count <= n * p + half


def _outcomes(task: str, results: list[dict[str, Any]]) -> list[Any]:
    spec = _spec(task)
    return [compare(spec, r["cloud_repeat"]["output"], r["cloud"]["output"]) for r in results]


def test_the_ticket_cloud_relabels_one_ticket_in_a_hundred_and_more_long_ones() -> None:
    results = _repeated("ticket_classify")
    assert all("cloud_repeat" in r for r in results)
    short = [r for r in results if r["input_tokens"] < LONG_TICKET]
    long = [r for r in results if r["input_tokens"] >= LONG_TICKET]
    short_conflicts = sum(c.outcome == "conflict" for c in _outcomes("ticket_classify", short))
    long_conflicts = sum(c.outcome == "conflict" for c in _outcomes("ticket_classify", long))
    # Designed: 1% of repeats on short tickets, 4% on tickets of 2048 tokens or more.
    assert _within(short_conflicts, len(short), 0.01), short_conflicts
    assert _within(long_conflicts, len(long), 0.04), (long_conflicts, len(long))
    assert long_conflicts / len(long) > short_conflicts / len(short)
    assert all(c.outcome != "invalid" for c in _outcomes("ticket_classify", results))


def test_the_invoice_cloud_rewords_its_note_on_a_fifth_of_repeats_and_nothing_else() -> None:
    assert _spec("invoice_extract")["fields"]["note"] == "string"
    results = _repeated("invoice_extract")
    outcomes = _outcomes("invoice_extract", results)
    changed = Counter(name for c in outcomes if c.diff for name in c.diff["fields"])
    assert set(changed) == {"note"}
    assert Counter(c.outcome for c in outcomes)["conflict"] == changed["note"]
    assert _within(changed["note"], N, 0.2), changed
    for r in results:
        first, second = r["cloud"]["output"], r["cloud_repeat"]["output"]
        assert {k: first[k] for k in ("amount", "currency", "invoice_id")} == {
            k: second[k] for k in ("amount", "currency", "invoice_id")
        }
        assert isinstance(second["note"], str) and second["note"].strip()
    # A reworded note is a real change of text, not of spacing or case.
    rewordings = [r for r, c in zip(results, outcomes, strict=True) if c.outcome == "conflict"]
    assert all(
        r["cloud"]["output"]["note"].lower() != r["cloud_repeat"]["output"]["note"].lower()
        for r in rewordings
    )


def test_the_reply_cloud_rephrases_itself_and_breaks_sentences_on_a_seventh() -> None:
    results = _repeated("reply_rewrite")
    outcomes = _outcomes("reply_rewrite", results)
    failed = Counter(name for c in outcomes if c.diff for name in c.diff["failed"])
    # Designed: an extra courtesy sentence on 15% of repeats, a long one on a third of those.
    assert set(failed) == {"sentences", "length_ratio"}, failed
    assert _within(failed["sentences"], N, 0.15), failed
    assert _within(failed["length_ratio"], N, 0.05), failed
    # It rephrases itself: most second answers are other words with the same meaning.
    agreeing = [r for r, c in zip(results, outcomes, strict=True) if c.outcome == "agree"]
    reworded = sum(r["cloud"]["output"] != r["cloud_repeat"]["output"] for r in agreeing)
    assert reworded == len(agreeing) > 0.8 * N


def test_repeats_follow_the_rate_by_request_id_and_change_nothing_else() -> None:
    n = 5000  # three streams of invoices: fewer than N
    plain = generate("invoice_extract", n, seed=6, now=NOW)
    some = generate("invoice_extract", n, seed=6, now=NOW, repeat_rate=0.2)
    asked = [r for r in some if "cloud_repeat" in r]
    assert _within(len(asked), n, 0.2), len(asked)
    # Chosen by request id, as a router chooses: the same requests on every call.
    assert {r["request_id"] for r in asked} == {
        r["request_id"] for r in plain if wants_repeat("invoice_extract", r["request_id"], 0.2)
    }
    assert [{k: v for k, v in r.items() if k != "cloud_repeat"} for r in some] == plain
    # The same request gets the same second answer.
    again = generate("invoice_extract", n, seed=6, now=NOW, repeat_rate=0.2)
    assert [r.get("cloud_repeat") for r in again] == [r.get("cloud_repeat") for r in some]
    assert not any("cloud_repeat" in r for r in plain)
    # The second answer is a cloud side of the same request: same model, same tokens.
    for r in asked:
        repeat, cloud = r["cloud_repeat"], r["cloud"]
        assert repeat["model"] == cloud["model"]
        assert repeat["input_tokens"] == cloud["input_tokens"] == r["input_tokens"]
        assert repeat["latency_ms"] >= 50


def test_the_simulated_router_asks_for_repeats_at_the_flags_rate(
    live_api: tuple[str, Api],  # noqa: F811  (the fixture imported above)
) -> None:
    """Over HTTP, routed by the flags: the requests the client's wants_repeat picks at the
    flag's repeat_rate (and only those) are stored with a repeat pair, scored by the task's
    comparator, differing on the note alone."""
    base, api = live_api
    with session_scope(api.engine) as session:
        _, key = create_key(session, name="router", scopes=["ingest", "flags:read"], actor="test")
    config = yaml.safe_load((EXAMPLES / "invoice_extract.yaml").read_text())
    config["grading"] = {"repeat_rate": 0.3}
    assert api.client.post("/v1/tasks", json=config, headers=api.headers()).status_code == 201
    assert (
        api.client.get("/v1/flags/invoice_extract", headers=api.headers()).json()["repeat_rate"]
        == 0.3
    )
    totals = stream(base, key, ["invoice_extract"], rate=300, duration=2, flag_stream=False)
    t = totals["invoice_extract"]
    assert t.accepted == t.generated > 0 and not t.rejected, t.errors
    with session_scope(api.engine) as session:
        rows = session.execute(
            select(
                Result.request_id, Result.repeat_source, Result.repeat_outcome, Result.repeat_diff
            )
        ).all()
    assert len(rows) == t.generated
    asked = {r.request_id for r in rows if r.repeat_source == "asked"}
    assert asked == {
        r.request_id for r in rows if wants_repeat("invoice_extract", r.request_id, 0.3)
    }
    assert _within(len(asked), len(rows), 0.3), (len(asked), len(rows))
    outcomes = Counter(r.repeat_outcome for r in rows if r.request_id in asked)
    assert set(outcomes) == {"agree", "conflict"}, outcomes
    assert {name for r in rows if r.repeat_diff for name in r.repeat_diff} == {"note"}
