"""README, "Settings" and "Webhook receivers": a receiver that does not answer within
`SHADOWPLANE_WEBHOOK_TIMEOUT_SECONDS` is a failed attempt, retried under the same delivery
id; retries wait `SHADOWPLANE_WEBHOOK_BACKOFF_SECONDS`, doubling, at most
`SHADOWPLANE_WEBHOOK_BACKOFF_MAX_SECONDS`."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from controlplane.db import get_engine, session_scope
from controlplane.models import WebhookDelivery
from controlplane.models.base import utcnow
from controlplane.notify.delivery import deliver_pending
from controlplane.notify.outbox import add_event
from tests.notify.conftest import webhook_settings
from tests.notify.receiver import Receiver


def _event(url: str) -> None:
    with session_scope(get_engine(url)) as session:
        add_event(
            session,
            kind="alert",
            task="ticket_classify",
            document={"kind": "alert", "task": "ticket_classify", "action": "alert_opened"},
        )


def _delivery(url: str) -> WebhookDelivery:
    with session_scope(get_engine(url)) as session:
        rows = list(session.scalars(select(WebhookDelivery)))
        assert len(rows) == 1
        session.expunge(rows[0])
        return rows[0]


def test_retries_wait_the_first_backoff_doubling_up_to_the_cap(db_url: str) -> None:
    failing = Receiver(statuses=[500] * 6)
    try:
        settings = webhook_settings(
            db_url,
            failing,
            webhook_backoff_seconds=1.0,
            webhook_backoff_max_seconds=4.0,
            webhook_max_attempts=10,
        )
        engine = get_engine(db_url)
        _event(db_url)
        now = utcnow()
        waits = []
        for _ in range(5):
            report = deliver_pending(engine, settings, now=now)
            assert report.retrying == 1, report
            due = _delivery(db_url).next_attempt_at
            waits.append((due - now).total_seconds())
            now = due
        assert waits == [1.0, 2.0, 4.0, 4.0, 4.0]
        assert len({r.delivery_id for r in failing.received}) == 1
    finally:
        failing.close()


def test_a_receiver_that_does_not_answer_in_time_is_a_failed_attempt_retried_later(
    db_url: str,
) -> None:
    silent = Receiver(hang=True)
    try:
        settings = webhook_settings(
            db_url, silent, webhook_timeout_seconds=0.3, webhook_backoff_seconds=2.0
        )
        engine = get_engine(db_url)
        _event(db_url)
        now = utcnow()
        report = deliver_pending(engine, settings, now=now)
        assert (report.delivered, report.retrying) == (0, 1), report
        delivery = _delivery(db_url)
        assert delivery.status == "pending" and "Timeout" in (delivery.last_error or "")
        assert delivery.next_attempt_at == now + timedelta(seconds=2)
        # It answers now: the retry, under the same delivery id, is delivered.
        silent.answer()
        report = deliver_pending(engine, settings, now=now + timedelta(seconds=2))
        assert report.delivered == 1, report
        ids = {r.delivery_id for r in silent.received}
        assert ids == {delivery.delivery_id} and len(silent.received) == 2
    finally:
        silent.close()
