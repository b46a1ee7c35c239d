"""The outbox: one delivery per (event, URL), retried with backoff under the same delivery
id, given up after the attempts (kept visible), each delivery sent once by many runners."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select, update

from controlplane.db import get_engine, session_scope
from controlplane.models import OutboxEvent, WebhookDelivery
from controlplane.models.base import utcnow
from controlplane.notify.delivery import deliver_pending, receiver
from controlplane.notify.delivery import log as delivery_log
from controlplane.notify.outbox import add_event
from tests.conftest import make_api
from tests.notify.conftest import webhook_settings
from tests.notify.receiver import Receiver


def _event(url: str, task: str = "ticket_classify", n: int = 0) -> int:
    with session_scope(get_engine(url)) as session:
        return add_event(
            session,
            kind="alert",
            task=task,
            document={"kind": "alert", "task": task, "action": "alert_opened", "n": n},
        )


def _deliveries(url: str) -> list[WebhookDelivery]:
    with session_scope(get_engine(url)) as session:
        return list(session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)))


def test_an_event_rolled_back_with_its_transaction_is_never_sent(
    db_url: str, receiver: Receiver
) -> None:
    engine = get_engine(db_url)
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        add_event(session, kind="decision", task="t", document={"kind": "decision"})
        raise RuntimeError("the decision failed")
    assert deliver_pending(engine, webhook_settings(db_url, receiver)).fanned_out == 0
    assert receiver.received == []
    with pytest.raises(ValueError, match="kind"):
        with session_scope(engine) as session:
            add_event(session, kind="gossip", task="t", document={})


def test_each_url_gets_its_delivery_and_a_failure_is_retried_after_backoff_with_the_same_id(
    db_url: str,
) -> None:
    failing, healthy = Receiver(statuses=[500]), Receiver()
    try:
        settings = webhook_settings(db_url, failing, healthy, webhook_backoff_seconds=2.0)
        engine = get_engine(db_url)
        event_id = _event(db_url)
        now = utcnow()
        first = deliver_pending(engine, settings, now=now)
        assert (first.fanned_out, first.delivered, first.retrying) == (1, 1, 1)
        # Within the backoff nothing is sent again; after it, the same delivery id is.
        assert deliver_pending(engine, settings, now=now + timedelta(seconds=1.5)).retrying == 0
        assert len(failing.received) == 1
        again = deliver_pending(engine, settings, now=now + timedelta(seconds=2.5))
        assert (again.fanned_out, again.delivered) == (0, 1)
        ids = [r.delivery_id for r in failing.received]
        assert len(ids) == 2 and ids[0] == ids[1]
        assert [r.status for r in failing.received] == [500, 200]
        assert list(failing.processed) == ids[:1]
        assert healthy.received[0].delivery_id != ids[0]
        assert {r.document["event_id"] for r in failing.received + healthy.received} == {event_id}

        rows = {d.url: d for d in _deliveries(db_url)}
        assert (rows[failing.url].status, rows[failing.url].attempts) == ("delivered", 2)
        assert rows[failing.url].delivery_id == ids[0]
        assert (rows[healthy.url].status, rows[healthy.url].attempts) == ("delivered", 1)
        # Nothing is due any more, whenever the next pass runs.
        later = deliver_pending(engine, settings, now=now + timedelta(days=1))
        assert (later.delivered, later.retrying, len(failing.received)) == (0, 0, 2)
    finally:
        failing.close()
        healthy.close()


class Lines(logging.Handler):
    """The messages of one logger, on a handler of the test's own (pytest's caplog handler
    also sits on every logger that does not propagate, once an app configured them)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_delivery_that_keeps_failing_is_given_up_and_stays_visible(db_url: str) -> None:
    down = Receiver(statuses=[503] * 10)
    logged = Lines()
    try:
        for api in make_api(db_url):
            delivery_log.addHandler(logged)
            settings = webhook_settings(
                db_url, down, webhook_max_attempts=3, webhook_backoff_seconds=1.0
            )
            _event(db_url, task="ticket_classify")
            _event(db_url, task="invoice_extract")
            now = utcnow()
            outcomes = [
                deliver_pending(api.engine, settings, now=now + timedelta(seconds=s)).as_dict()
                for s in (0, 1.5, 4)
            ]
            # Waits double: 1 s after the first failure, 2 s after the second.
            assert [(o["retrying"], o["failed"]) for o in outcomes] == [(2, 0), (2, 0), (0, 2)]
            assert len(down.received) == 6
            # Each failure is logged with the receiver's host and port only: a webhook URL's
            # path (Slack's, say) is its secret.
            failures = [line for line in logged.lines if "failed" in line]
            assert len(failures) == 6
            host = down.url.split("/")[2]
            assert all(host in line and down.url not in line for line in failures), failures

            _event(db_url, task="ticket_classify")  # one more, not sent yet: pending
            answer = api.client.get(
                "/v1/webhooks/deliveries", params={"status": "failed"}, headers=api.headers()
            )
            assert answer.status_code == 200, answer.text
            listed = answer.json()
            assert [d["task"] for d in listed["deliveries"]] == [
                "invoice_extract",
                "ticket_classify",
            ]
            for item in listed["deliveries"]:
                assert (item["status"], item["attempts"], item["url"]) == ("failed", 3, down.url)
                assert item["last_error"].startswith("answered 503")
                assert item["kind"] == "alert" and item["next_attempt_at"] is None
            assert listed["counts"] == {"pending": 0, "delivered": 0, "failed": 2}
            assert {r.delivery_id for r in down.received} == {
                d["delivery_id"] for d in listed["deliveries"]
            }
            assert (
                api.client.get("/v1/webhooks/deliveries", headers=api.headers("read")).status_code
                == 403
            )
            assert (
                api.client.get(
                    "/v1/webhooks/deliveries", params={"status": "lost"}, headers=api.headers()
                ).status_code
                == 422
            )

            # The new event's delivery fails once (pending, to retry); /metrics counts both.
            deliver_pending(api.engine, settings, now=now + timedelta(seconds=5))
            metrics = api.client.get("/metrics", headers=api.headers("read"))
            samples = {
                s.labels.get("status"): s.value
                for family in text_string_to_metric_families(metrics.text)
                if family.name == "shadowplane_webhook_deliveries"
                for s in family.samples
            }
            assert samples == {"pending": 1.0, "failed": 2.0}
            pending = api.client.get(
                "/v1/webhooks/deliveries", params={"status": "pending"}, headers=api.headers()
            ).json()["deliveries"]
            assert [(d["attempts"], d["next_attempt_at"] is not None) for d in pending] == [
                (1, True)
            ]
    finally:
        delivery_log.removeHandler(logged)
        down.close()


def test_a_url_taken_out_of_the_settings_is_not_sent_to(db_url: str, receiver: Receiver) -> None:
    gone = Receiver(statuses=[500])
    try:
        engine = get_engine(db_url)
        _event(db_url)
        now = utcnow()
        deliver_pending(engine, webhook_settings(db_url, receiver, gone), now=now)
        assert len(gone.received) == 1
        deliver_pending(engine, webhook_settings(db_url, receiver), now=now + timedelta(hours=1))
        assert len(gone.received) == 1 and len(receiver.received) == 1
        rows = {d.url: d for d in _deliveries(db_url)}
        assert rows[gone.url].status == "failed"
        assert "no longer in SHADOWPLANE_WEBHOOK_URLS" in (rows[gone.url].last_error or "")
    finally:
        gone.close()


def test_events_from_before_the_backlog_are_not_sent(db_url: str, receiver: Receiver) -> None:
    old = _event(db_url)
    with session_scope(get_engine(db_url)) as session:
        session.execute(
            update(OutboxEvent)
            .where(OutboxEvent.id == old)
            .values(created_at=utcnow() - timedelta(days=8))
        )
    recent = _event(db_url)
    report = deliver_pending(get_engine(db_url), webhook_settings(db_url, receiver))
    assert (report.fanned_out, report.delivered) == (2, 1)
    assert [r.document["event_id"] for r in receiver.received] == [recent]


def test_several_runners_at_once_send_each_delivery_once(db_url: str, receiver: Receiver) -> None:
    for n in range(40):
        _event(db_url, n=n)
    settings = webhook_settings(db_url, receiver)
    engine = get_engine(db_url)
    start = threading.Barrier(4)
    reports: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            start.wait()
            reports.append(deliver_pending(engine, settings).as_dict())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=runner) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    ids = [r.delivery_id for r in receiver.received]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert sorted(r.document["n"] for r in receiver.received) == list(range(40))
    assert sum(r["delivered"] for r in reports) == 40
    assert sum(r["fanned_out"] for r in reports) == 40
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 40
        assert session.scalar(select(func.max(WebhookDelivery.attempts))) == 1


@pytest.mark.parametrize(
    ("url", "logged"),
    [
        ("https://hooks.slack.com/services/T0/B0/secret", "hooks.slack.com"),
        ("http://user:pass@10.0.0.5:8080/hook?token=secret", "10.0.0.5:8080"),
        ("http://[::1]:9000/x", "[::1]:9000"),
    ],
)
def test_logs_name_a_webhooks_receiver_by_host_and_port_only(url: str, logged: str) -> None:
    assert receiver(url) == logged
