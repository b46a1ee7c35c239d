"""The window scans read results again while a transaction that was writing when they last
read is still open (a batch that drew its ids before one pass may commit after the next),
say once who holds them back past five minutes, and move on when it ends. Real PostgreSQL;
the holder is a second connection of the test's own."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from sqlalchemy import text

from controlplane.db import session_scope
from controlplane.metrics.service import RESULTS_SCAN
from controlplane.models import ScanMark
from controlplane.models.base import utcnow
from controlplane.scheduler import run_pass
from tests.conftest import Api, make_result
from tests.windowdata import T0, post_all

pytestmark = pytest.mark.integration


def _mark(api: Api) -> tuple[int, int]:
    with session_scope(api.engine) as session:
        mark = session.get(ScanMark, RESULTS_SCAN)
        assert mark is not None
        return mark.previous_id, mark.last_id


def test_an_open_writer_holds_the_scans_back_until_it_ends(
    pg_metrics_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    api = pg_metrics_api
    later = utcnow() + timedelta(minutes=6)  # the pass's clock: the writer looks 6 min old
    post_all(api, [make_result(request_id="a", task="metrics_task", ts=T0.isoformat())])
    run_pass(api.engine, later)
    with api.engine.connect() as holder:
        holder.execute(text("SELECT pg_current_xact_id()"))  # a transaction id, held open
        post_all(api, [make_result(request_id="b", task="metrics_task", ts=T0.isoformat())])
        with caplog.at_level(logging.WARNING, logger="shadowplane.metrics"):
            for _ in range(3):
                run_pass(api.engine, later)
        held = _mark(api)
        # Still reading from before the holder began: the result posted meanwhile is not
        # past the mark the scans start from.
        assert held[0] < held[1], held
        said = [
            r.getMessage() for r in caplog.records if "holds the window scans" in r.getMessage()
        ]
        assert said, caplog.text
        assert len(said) == len(set(said)), said  # once for each holder
        # Ours (or another test's, begun before it and still open): named by its pid.
        assert all(" (pid " in line for line in said), said
        holder.rollback()
    # Once it has ended (and any other test's short transactions with it), the scans move on.
    deadline = time.monotonic() + 20
    while _mark(api)[0] < held[1]:
        assert time.monotonic() < deadline, f"the scan mark never moved past {held}"
        run_pass(api.engine, later)
        time.sleep(0.2)
