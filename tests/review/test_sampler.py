"""The review sampler: strata and quotas per bucket, inclusion probabilities (with the
payload's keep probability), the same draw on a rerun, at most one item per result, no
queue under `payload_policy: none`, and the regression sample of a rollback's windows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import delete, func, select, update

from controlplane.catalog.service import task_runtimes
from controlplane.db import session_scope
from controlplane.models import Payload, Result, ReviewItem, Task, Window
from controlplane.models.review import PRIORITY_BREACHING, PRIORITY_OTHER, PRIORITY_REGRESSION
from controlplane.review import sampler
from controlplane.review.allocation import STRATA, WEIGHTS, allocate
from controlplane.review.regression import queue_regression, regression_allocation
from controlplane.review.sampler import sample_closed_windows
from controlplane.rollout.configs import apply_config
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_api, make_result
from tests.windowdata import post_all

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
WINDOW, LATENESS = 60, 30
BUCKETS = {"0-127": 60, "128-511": 300}
# Request ids name the bucket by a key without dashes.
BUCKET_KEYS = {"short": "0-127", "mid": "128-511"}
# Per bucket: how many results of each shape one window holds.
SHAPES = {
    "conflict": 30,
    "edge_error": 4,
    "invalid": 3,
    "low_confidence": 6,
    "cloud_decided": 10,
    "agree": 40,
    "edge_only": 5,
    "cloud_error": 3,
}


def config(name: str, **overrides: Any) -> dict[str, Any]:
    return {
        "task": name,
        "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
        "window_seconds": WINDOW,
        "allowed_lateness_seconds": LATENESS,
        "length_buckets": [128, 512],
        "keep_agreeing_rate": 1.0,
        **overrides,
    }


def shaped(task: str, shape: str, request_id: str, ts: datetime, tokens: int) -> dict[str, Any]:
    edge: dict[str, Any] | None = {"output": "refund", "confidence": 0.9, "model": "small@3"}
    cloud: dict[str, Any] | None = {"output": "refund", "model": "large@7"}
    decision = "edge"
    if shape == "conflict":
        edge = {**edge, "output": "exchange"}
    elif shape == "edge_error":
        edge = {"output": None, "error": "timeout", "error_message": "edge timed out"}
    elif shape == "invalid":
        edge = {**edge, "output": "nonsense"}
    elif shape == "low_confidence":
        edge = {**edge, "confidence": 0.3}
    elif shape == "cloud_decided":
        decision = "cloud"
    elif shape == "edge_only":
        cloud = None
    elif shape == "cloud_error":
        cloud = {"output": None, "error": "timeout"}
    return make_result(
        request_id=request_id,
        task=task,
        ts=ts.isoformat(),
        input_tokens=tokens,
        decision=decision,
        served="edge" if cloud is None else "cloud",
        input={"text": f"help with {request_id}"},
        edge=edge,
        cloud=cloud,
    )


def window_results(task: str, start: datetime, k: int = 0) -> list[dict[str, Any]]:
    out = []
    n = 0
    for key, bucket in BUCKET_KEYS.items():
        for shape, count in SHAPES.items():
            for i in range(count):
                ts = start + timedelta(seconds=k * WINDOW + (n % 590) * 0.1)
                rid = f"{task}-{k}-{key}-{shape}-{i}"
                out.append(shaped(task, shape, rid, ts, BUCKETS[bucket]))
                n += 1
    return out


def shape_of(request_id: str) -> tuple[str, str]:
    _, key, shape, _ = request_id.rsplit("-", 3)
    return BUCKET_KEYS[key], shape


def close(api: Api, k: int = 0) -> Any:
    return run_pass(api.engine, T0 + timedelta(seconds=(k + 1) * WINDOW + LATENESS))


def items(api: Api, task: str) -> list[ReviewItem]:
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == task))
        return list(
            session.scalars(
                select(ReviewItem).where(ReviewItem.task_id == tid).order_by(ReviewItem.id)
            )
        )


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(session, config("review_task"), actor="test")
            apply_config(session, config("half_kept", keep_agreeing_rate=0.5), actor="test")
            apply_config(session, config("no_text", payload_policy="none"), actor="test")
            apply_config(
                session, config("small_quota", review={"quota_per_window": 4}), actor="test"
            )
        yield api


def expected_counts() -> dict[tuple[str, str], int]:
    return {(b, shape): n for b in BUCKETS for shape, n in SHAPES.items() if shape in STRATA}


def test_strata_quotas_and_inclusion_probabilities(api: Api) -> None:
    post_all(api, window_results("review_task", T0))
    report = close(api)
    assert report.failed == []
    got = items(api, "review_task")
    assert report.sampled == len(got) == 20
    counts = expected_counts()
    alloc = allocate(20, counts, list(BUCKETS))
    drawn = Counter(shape_of(i.request_id) for i in got)
    # Every stratum's share reaches both buckets: drawn per bucket.
    assert alloc.pooled == {} and drawn == alloc.cells
    per_stratum = Counter(s for _, s in drawn.elements())
    assert per_stratum == {
        "conflict": 6,
        "edge_error": 4,
        "invalid": 3,
        "low_confidence": 3,
        "cloud_decided": 2,
        "agree": 2,
    }
    # Every stratum of every bucket is measured, conflicts most.
    assert set(drawn) == set(counts)
    assert all(drawn[(b, "conflict")] == max(drawn.values()) for b in BUCKETS)
    for item in got:
        bucket, shape = shape_of(item.request_id)
        # Each result sits in the stratum its shape puts it in (first match), in its bucket.
        assert (item.bucket, item.reason) == (bucket, shape)
        single = shape in ("edge_error", "invalid")
        assert item.kind == ("single" if single else "pair")
        assert item.layer == ("anomaly" if single else "boundary")
        # k drawn of N candidates, times the keep probability (1 here).
        assert item.inclusion_probability == pytest.approx(
            alloc.cells[(bucket, shape)] / counts[(bucket, shape)]
        )
        assert item.window_start == T0 and item.state == "queued" and item.reviews_needed == 1
        assert item.input["text"] == f"help with {item.request_id}"
        assert item.cloud_output == "refund"
        assert item.result_id is not None
    # Results nobody can review (one side only, a cloud error) are never drawn.
    assert not {"edge_only", "cloud_error"} & {s for _, s in drawn}
    # Both orders of the pair are used.
    assert {i.a_is_edge for i in got if i.kind == "pair"} == {True, False}
    with session_scope(api.engine) as session:
        assert (
            session.scalar(
                select(func.count())
                .select_from(Window)
                .where(Window.review_sampled.is_(False), Window.closed_at.is_not(None))
            )
            == 0
        )


def test_keep_probability_multiplies_the_draws_probability(api: Api) -> None:
    post_all(api, window_results("half_kept", T0))
    close(api)
    got = items(api, "half_kept")
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == "half_kept"))
        kept = Counter(
            shape_of(rid)
            for rid in session.scalars(
                select(Result.request_id)
                .join(Payload, Payload.result_id == Result.id)
                .where(Result.task_id == tid)
            )
        )
        keep = dict(
            session.execute(
                select(Result.request_id, Payload.keep_probability)
                .join(Payload, Payload.result_id == Result.id)
                .where(Result.task_id == tid)
            ).all()
        )
    # Agreeing payloads are kept about half the time, the rest always.
    assert 0 < kept[("0-127", "agree")] < SHAPES["agree"]
    assert kept[("0-127", "conflict")] == SHAPES["conflict"]
    candidates = {cell: n for cell, n in kept.items() if cell[1] in STRATA}
    alloc = allocate(20, candidates, list(BUCKETS))
    assert alloc.pooled == {}
    assert Counter(shape_of(i.request_id) for i in got) == alloc.cells
    for item in got:
        cell = shape_of(item.request_id)
        assert item.request_id in keep  # only results whose payload was kept
        assert item.inclusion_probability == pytest.approx(
            alloc.cells[cell] / candidates[cell] * keep[item.request_id]
        )
        assert keep[item.request_id] == (0.5 if cell[1] in ("agree", "cloud_decided") else 1.0)


def test_a_rerun_draws_the_same_items_and_never_twice(api: Api) -> None:
    post_all(api, window_results("review_task", T0))
    close(api)
    first = sorted(i.request_id for i in items(api, "review_task"))
    # Closing again queues nothing: the window is sampled.
    assert close(api).sampled == 0
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == "review_task"))
        # Run the sampler again over the same window with its flag cleared: every draw is a
        # result already queued, so nothing is added.
        session.execute(update(Window).where(Window.task_id == tid).values(review_sampled=False))
    with session_scope(api.engine) as session:
        assert sample_closed_windows(session, tid, T0 + timedelta(hours=1)) == 0
    assert sorted(i.request_id for i in items(api, "review_task")) == first
    # With the items gone, the same seed draws the same results.
    with session_scope(api.engine) as session:
        session.execute(delete(ReviewItem).where(ReviewItem.task_id == tid))
        session.execute(update(Window).where(Window.task_id == tid).values(review_sampled=False))
    with session_scope(api.engine) as session:
        assert sample_closed_windows(session, tid, T0 + timedelta(hours=1)) == 20
    assert sorted(i.request_id for i in items(api, "review_task")) == first


def test_windows_draw_differently_and_small_quotas_go_to_conflicts_first(api: Api) -> None:
    for k in range(2):
        post_all(api, window_results("review_task", T0, k))
        post_all(api, window_results("small_quota", T0, k))
        close(api, k)
    by_window: dict[datetime, set[str]] = {}
    for item in items(api, "review_task"):
        by_window.setdefault(item.window_start, set()).add(item.request_id.split("-", 2)[2])
    assert len(by_window) == 2 and all(len(v) == 20 for v in by_window.values())
    # Different seeds: the second window's draw is not the first's.
    first, second = by_window.values()
    assert first != second
    # A quota of 4: the first four strata get one item each, each drawn from the whole
    # stratum (both buckets), with probability 1 / the stratum's candidates.
    small = items(api, "small_quota")
    assert Counter((i.window_start, i.reason) for i in small) == {
        (T0 + timedelta(seconds=WINDOW * k), reason): 1
        for k in range(2)
        for reason in ("conflict", "edge_error", "invalid", "low_confidence")
    }
    for item in small:
        assert item.inclusion_probability == pytest.approx(1 / (2 * SHAPES[item.reason]))


def test_no_queue_without_kept_text(api: Api) -> None:
    post_all(api, window_results("no_text", T0))
    report = close(api)
    assert report.failed == []
    assert items(api, "no_text") == []
    with session_scope(api.engine) as session:
        tid = session.scalar(select(Task.id).where(Task.name == "no_text"))
        window = session.scalars(select(Window).where(Window.task_id == tid)).one()
        assert window.closed_at is not None and window.review_sampled is True


def _regression(api: Api, decision_id: int, cell: str, k: int = 0, **review: Any) -> int:
    """queue_regression for window k of review_task (the config's review section changed
    by `review`)."""
    with session_scope(api.engine) as session:
        task = session.scalars(select(Task).where(Task.name == "review_task")).one()
        cfg = task_runtimes(session, {"review_task"})["review_task"].config
        cfg = cfg.model_copy(update={"review": cfg.review.model_copy(update=review)})
        start = T0 + timedelta(seconds=k * WINDOW)
        return queue_regression(
            session,
            task,
            cfg,
            decision_id=decision_id,
            rule="agreement >= 0.9 per bucket",
            cell=cell,
            ranges=[(start, start + timedelta(seconds=WINDOW))],
        )


def test_regression_queues_a_stratified_sample_breaching_cell_first(api: Api) -> None:
    post_all(api, window_results("review_task", T0))
    close(api)
    sampled = {i.request_id: i for i in items(api, "review_task")}
    assert _regression(api, 7, "128-511", regression_items=0) == 0
    assert all(i.layer != "regression" for i in items(api, "review_task"))

    done = _regression(api, 7, "128-511")
    got = items(api, "review_task")
    regression = [i for i in got if i.layer == "regression"]
    counts = expected_counts()
    wanted = regression_allocation(100, counts, ["128-511"], list(BUCKETS))
    # At most review.regression_items (100) of the 186 reviewable results, as split by
    # regression_allocation (tests/review/test_regression_sample.py has this split by hand):
    # 80 of the breaching bucket, 20 of the other.
    assert done == len(regression) == 100
    assert Counter(shape_of(i.request_id) for i in regression) == wanted
    assert sum(1 for i in regression if i.bucket == "128-511") == 80
    assert len({i.request_id for i in got}) == len(got)  # one item per result
    provenance = {
        "decision_id": 7,
        "rule": "agreement >= 0.9 per bucket",
        "cell": "128-511",
        "window_start": "2026-11-30T03:00:00Z",
        "window_end": "2026-11-30T03:01:00Z",
    }
    for item in regression:
        assert item.provenance == provenance
        # The breaching cell first in the queue, then the rest of the sample.
        assert item.priority == (
            PRIORITY_BREACHING if item.bucket == "128-511" else PRIORITY_REGRESSION
        )
        if item.request_id in sampled:
            # Moved, not duplicated: same item, its own reason and probability.
            before = sampled[item.request_id]
            assert (item.id, item.reason) == (before.id, before.reason)
            assert item.inclusion_probability == before.inclusion_probability
        else:
            # k drawn of the N of its (bucket, stratum), times the keep probability (1).
            cell = shape_of(item.request_id)
            assert item.reason == "regression"
            assert item.inclusion_probability == pytest.approx(wanted[cell] / counts[cell])
            assert item.kind == ("single" if cell[1] in ("edge_error", "invalid") else "pair")
    # Sampled items the draw did not take stay where the sampler put them.
    assert all(
        i.priority == PRIORITY_OTHER and i.provenance is None
        for i in got
        if i.layer != "regression"
    )
    # The draw is the k smallest hashes of each (bucket, stratum), seeded by task and window.
    with session_scope(api.engine) as session:
        sampler.register_hash(session)
        seed = sampler.seed_of("review_task", T0)
        hashes = dict(
            session.execute(
                select(Result.request_id, sampler.draw_hash(Result.id, seed)).where(
                    Result.request_id.like("review_task-0-%")
                )
            ).all()
        )
    for cell, k in wanted.items():
        in_cell = sorted((h, rid) for rid, h in hashes.items() if _cell(rid) == cell)
        drawn = {i.request_id for i in regression if shape_of(i.request_id) == cell}
        assert drawn == {rid for _, rid in in_cell[:k]}

    # The same firing again draws the same results: nothing new, nothing moved.
    assert _regression(api, 7, "128-511") == 0
    assert [(i.id, i.layer, i.priority) for i in items(api, "review_task")] == [
        (i.id, i.layer, i.priority) for i in got
    ]
    # A second rollback over another window has a sample of its own, with cell all: every
    # judged bucket is its breaching cell.
    post_all(api, window_results("review_task", T0, k=1))
    close(api, k=1)
    assert _regression(api, 8, "all", k=1, regression_items=30) == 30
    second = [
        i for i in items(api, "review_task") if i.provenance and i.provenance["decision_id"] == 8
    ]
    assert len(second) == 30 and {i.priority for i in second} == {PRIORITY_BREACHING}
    assert {i.bucket for i in second} == set(BUCKETS)


def _cell(request_id: str) -> tuple[str, str] | None:
    cell = shape_of(request_id)
    return cell if cell[1] in STRATA else None


cells = st.dictionaries(
    st.tuples(st.sampled_from(["0-127", "128-511", "512+"]), st.sampled_from(STRATA)),
    st.integers(0, 60),
    max_size=18,
)


@given(quota=st.integers(0, 80), counts=cells)
def test_allocate_spends_the_quota_within_the_candidates(
    quota: int, counts: dict[tuple[str, str], int]
) -> None:
    buckets = ["0-127", "128-511", "512+"]
    alloc = allocate(quota, counts, buckets)
    available = sum(counts.values())
    spent = sum(alloc.cells.values()) + sum(alloc.pooled.values())
    assert spent == min(quota, available)
    assert all(0 < n <= counts[c] for c, n in alloc.cells.items())
    strata = [s for s in STRATA if any(n for (_, t), n in counts.items() if t == s)]
    served = {s for _, s in alloc.cells} | set(alloc.pooled)
    if quota >= len(strata):
        # Every stratum with candidates is measured.
        assert served == set(strata)
    else:
        # The first strata in order (conflicts first) are.
        assert served == set(strata[:quota])
    for stratum in served:
        present = [b for b in buckets if counts.get((b, stratum), 0) > 0]
        # Every candidate of a measured stratum has a chance, and the chances add up to
        # the stratum's share.
        chances = [alloc.probability((b, stratum)) for b in present]
        assert all(0 < p <= 1 for p in chances)
        share = alloc.pooled.get(stratum) or sum(
            n for (_, t), n in alloc.cells.items() if t == stratum
        )
        expected = sum(alloc.probability((b, stratum)) * counts[(b, stratum)] for b in present)
        assert expected == pytest.approx(share)
        assert (stratum in alloc.pooled) == (share < len(present))
    # Heavier strata never get less than lighter ones where neither ran out.
    shares = {
        s: alloc.pooled.get(s) or sum(n for (_, t), n in alloc.cells.items() if t == s)
        for s in served
    }
    sizes = {s: sum(n for (_, t), n in counts.items() if t == s) for s in served}
    for a in served:
        for b in served:
            if WEIGHTS[a] > WEIGHTS[b] and shares[a] < sizes[a] and shares[b] < sizes[b]:
                assert shares[a] >= shares[b]


@pytest.mark.parametrize("task", ["review_task", "small_quota"])
@pytest.mark.parametrize("front", [(2.0, 30.0), (0.0, 0.5)])
def test_the_draw_is_the_front_of_the_hash_order(
    api: Api, monkeypatch: pytest.MonkeyPatch, front: tuple[float, float], task: str
) -> None:
    """Each cell's draw (each pooled stratum's, with a small quota) is its k candidates of
    smallest hash, whether the statement's front of the hash order held enough of them or
    (a tiny front) the draw read them all."""
    monkeypatch.setattr(sampler, "FRONT", front)
    post_all(api, window_results(task, T0))
    with session_scope(api.engine) as session:
        found = session.scalars(select(Task).where(Task.name == task)).one()
        cfg = task_runtimes(session, {task})[task].config
        end = T0 + timedelta(seconds=WINDOW)
        alloc, chosen = sampler.draw(session, found, cfg, T0, end, [128, 512])
        every = sampler._drawn_rows(session, found, cfg, T0, end, [128, 512], None)
    labels = ["0-127", "128-511", "512+"]
    by_cell: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for row in every:
        if row.id is not None:
            cell = (labels[row.cell // 8], STRATA[row.cell % 8])
            by_cell.setdefault(cell, []).append((row.h, row.id))
    assert alloc.counts == expected_counts() == {c: len(v) for c, v in by_cell.items()}
    expected = [
        (rid, cell) for cell, k in alloc.cells.items() for _, rid in sorted(by_cell[cell])[:k]
    ]
    for stratum, k in alloc.pooled.items():
        pool = sorted((h, rid, c) for c, v in by_cell.items() if c[1] == stratum for h, rid in v)
        expected += [(rid, c) for _, rid, c in pool[:k]]
    assert len(expected) == cfg.review.quota_per_window
    assert bool(alloc.pooled) == (task == "small_quota")
    assert sorted(chosen) == sorted(expected)
