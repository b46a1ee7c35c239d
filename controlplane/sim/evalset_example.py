"""The example eval set export in the repository (`evalsets/example/`), produced by a
deterministic simulated run: seeded traffic of two tasks over four windows — ticket_classify
in canary under the long-ticket regression, so its agreement rule rolls it back and the
breaching windows' results are queued for the `regression` layer — a pass closing and
sampling each window, a simulated reviewer labelling every item blind with the simulator's
known truth, backfill, export.

Everything runs in process on a fresh SQLite file at fixed clocks, so the same code writes
the same bytes (tests/evalsets/test_example.py regenerates it and compares):

    python -m controlplane.sim.evalset_example evalsets/example
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, update
from sqlalchemy.orm import Session

from controlplane.compare.jsonutil import dumps
from controlplane.db import in_transaction, make_engine, session_scope
from controlplane.evalsets import actions as evalset_actions
from controlplane.evalsets import service as evalsets
from controlplane.ingest import service as ingest
from controlplane.ingest.schemas import IngestReport
from controlplane.ingest.validation import validate_body
from controlplane.migrate import upgrade
from controlplane.models import Task
from controlplane.review import actions as review
from controlplane.rollout.actions import promote
from controlplane.rollout.configs import apply_tasks
from controlplane.scheduler import run_pass
from controlplane.sim.profiles import generate
from controlplane.sim.reviewer import SimulatedReviewer

SEED = 8
WINDOW = 300
WINDOWS = 4
# The end of the simulated traffic: four 5-minute windows end here.
END = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
START = END - timedelta(seconds=WINDOW * WINDOWS)
REVIEWER = "sim-reviewer"
CONFIGS: list[dict[str, Any]] = [
    {
        "task": "ticket_classify",
        "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
        "review": {"quota_per_window": 4},
        # A small canary: the long bucket's agreement is judged on few results per window.
        "rollback": {
            "min_samples": 20,
            "rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "scope": "per_bucket"}],
        },
        "promotion": {"canary_steps": [50]},
    },
    {
        "task": "invoice_extract",
        "comparator": {
            "kind": "json_fields",
            "fields": {"amount": "number", "currency": "string"},
            "required": ["amount", "currency"],
        },
        "review": {"quota_per_window": 3},
    },
]
# (task, results, scenario): long tickets make the edge miss often on the long bucket.
TRAFFIC = [("ticket_classify", 1200, "long_tickets"), ("invoice_extract", 160, "none")]


WINDOW_SPAN = timedelta(seconds=WINDOW)


def _ts(result: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(result["ts"])


def _store(engine: Engine, results: list[dict[str, Any]], received_at: datetime) -> None:
    """Ingest the results as the API would, received at `received_at`."""
    for start in range(0, len(results), 500):
        valid, rejected = validate_body(dumps({"results": results[start : start + 500]}), 1000)

        def store(session: Session, v: Any = valid, r: Any = rejected) -> IngestReport:
            return ingest.ingest(session, v, list(r), received_at)

        report = in_transaction(engine, store)
        if report.rejected:
            raise RuntimeError(f"the simulated results were refused: {report.rejected}")


def seed(engine: Engine, *, labelled: int | None = None) -> int:
    """Run the simulated rollout on a migrated database: register the tasks, canary
    ticket_classify, store and close four windows (the third breaching one rolls it back),
    label the first `labelled` review items (all when None) blind as a reviewer who knows
    the truth, and backfill. Returns how many items were labelled; the rest wait in the
    queue (the dashboard's tests and benchmark start from here)."""
    apply_tasks(engine, CONFIGS, actor="sim")
    promote(engine, "ticket_classify", actor="sim", reason="example canary", veto=0.7, force=True)
    # The canary began before the simulated traffic (a promotion is stamped with the wall
    # clock; the example's clocks are fixed).
    with session_scope(engine) as session:
        session.execute(update(Task).values(stage_changed_at=START - timedelta(hours=1)))
    sent: list[dict[str, Any]] = []
    for task, n, scenario in TRAFFIC:
        sent += generate(
            task, n, seed=SEED, now=END, span_seconds=WINDOW * WINDOWS, scenario=scenario
        )
    clock = END
    for k in range(WINDOWS):
        end = START + timedelta(seconds=(k + 1) * WINDOW)
        # The routers report each window's results as it ends; a pass closes the window
        # past its lateness, samples it for review, and the rules judge it (the third
        # breaching window rolls the canary back).
        _store(engine, [r for r in sent if end - WINDOW_SPAN <= _ts(r) < end], end)
        clock = end + timedelta(seconds=150)
        run_pass(engine, clock, veto=0.7)
    reviewer = SimulatedReviewer(sent)
    done = 0
    while labelled is None or done < labelled:
        item = review.claim(engine, None, REVIEWER, clock)
        if item is None:
            break
        verdict = reviewer.label(item["task"], item)
        review.label(
            engine,
            item["id"],
            REVIEWER,
            verdict=verdict.verdict,
            failure_class=verdict.failure_class,
            corrected=verdict.corrected,
            now=clock,
        )
        done += 1
    evalset_actions.backfill(engine, actor="sim")
    return done


def build(directory: Path) -> evalsets.Exported:
    """Run the simulation on a fresh database and export its eval sets to `directory`."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'example.db'}"
        upgrade(url)
        engine = make_engine(url)
        try:
            seed(engine)
            with session_scope(engine) as session:
                return evalsets.export(session, directory)
        finally:
            engine.dispose()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "evalsets/example")
    done = build(target)
    for path, count, digest in done.files:
        print(f"{target / path}: {count} items, sha256 {digest}")
