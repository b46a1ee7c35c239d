"""README, "Running it in production": "page on `shadowplane_window_close_lag_seconds` and
on a task moving to `rolled_back`". The close lag grows with the clock for as long as
nothing closes windows (workers, beat or Redis down) — it does not fall back to 0 at every
window, which would keep a page from ever firing — and is 0 once a pass has closed them; a
rollback shows on `/metrics` as the task's stage `rolled_back`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.db import session_scope
from controlplane.metrics.service import lag
from controlplane.scheduler import run_pass
from tests.conftest import Api
from tests.windowdata import LATENESS, WINDOW


def close_lag(api: Api, now: datetime) -> float:
    with session_scope(api.engine) as session:
        return {item.task: item.close_lag_seconds for item in lag(session, now)}["metrics_task"]


def test_the_close_lag_grows_with_the_clock_while_nothing_closes_windows(
    metrics_api: Api,
) -> None:
    api = metrics_api
    start = datetime.now(UTC)
    # Nothing has run: after ten windows the lag is far past one window, and grows second
    # for second (checked at steps that are not whole windows).
    at = [start + timedelta(seconds=10 * WINDOW + k * (WINDOW + 7)) for k in range(4)]
    lags = [close_lag(api, t) for t in at]
    assert lags[0] > 8 * WINDOW, lags
    for k in range(1, 4):
        assert lags[k] - lags[0] == pytest.approx((at[k] - at[0]).total_seconds()), lags
    # A pass closes every window due: nothing waits.
    run_pass(api.engine, at[-1])
    assert close_lag(api, at[-1]) == 0
    # Then nothing again: the lag counts from the first window the pass left open.
    later = at[-1] + timedelta(seconds=5 * WINDOW)
    waited = close_lag(api, later)
    assert 3 * WINDOW < waited <= 5 * WINDOW + LATENESS, waited
    assert close_lag(api, later + timedelta(seconds=WINDOW)) == pytest.approx(waited + WINDOW)


def stage_samples(api: Api, task: str) -> dict[str, float]:
    text = api.client.get("/metrics", headers=api.headers("read")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return {
        s.labels["stage"]: s.value
        for s in families["shadowplane_task_stage"].samples
        if s.labels["task"] == task
    }


def test_a_rollback_shows_on_metrics_as_the_stage_rolled_back(metrics_api: Api) -> None:
    api = metrics_api
    admin = api.headers("admin")
    body = {"reason": "canary by hand", "force": True}
    assert api.client.post("/v1/tasks/ticket_classify/promote", json=body, headers=admin).is_success
    assert stage_samples(api, "ticket_classify") == {"canary": 1}
    rollback = {"reason": "the pager went off"}
    response = api.client.post("/v1/tasks/ticket_classify/rollback", json=rollback, headers=admin)
    assert response.status_code == 200, response.text
    assert stage_samples(api, "ticket_classify") == {"rolled_back": 1}
