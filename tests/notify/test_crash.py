"""The outbox survives crashes: an event committed by a process that dies before sending
arrives once another runner starts; a runner killed mid-send leaves the delivery to be
sent again under the same delivery id. A receiver that dedupes acts on each id once."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import select

from controlplane.client import verify_signature
from controlplane.client.tls import default_tls
from controlplane.db import get_engine, session_scope
from controlplane.models import OutboxEvent, WebhookDelivery
from controlplane.models.base import utcnow
from controlplane.notify.delivery import deliver_pending
from tests.liveapi import WAIT, ApiServer, output, run_python, start_python, wait_until
from tests.notify.conftest import SECRET, clean_env, webhook_settings
from tests.notify.receiver import Receiver

# Writes one event and is killed by the kick its commit sends, before anything is sent. Its
# delivery thread only wakes when kicked, and the killer is the first kicker.
COMMIT_THEN_DIE = """
import os, signal, sys
from controlplane.client import verify_signature
from controlplane.db import get_engine, session_scope
from controlplane.notify.delivery import DeliveryThread, add_kicker
from controlplane.notify.outbox import add_event
from controlplane.settings import get_settings

settings = get_settings()
add_kicker(lambda: os.kill(os.getpid(), signal.SIGKILL))
engine = get_engine(settings.database_url)
DeliveryThread(engine, settings).start()
with session_scope(engine) as session:
    add_event(session, kind="decision", task="ticket_classify",
              document={"kind": "decision", "task": "ticket_classify", "action": "rollback"})
print("still alive")
"""

# One delivery pass; the test kills it while the receiver holds the request.
ONE_PASS = """
from controlplane.db import get_engine
from controlplane.notify.delivery import deliver_pending
from controlplane.settings import get_settings

settings = get_settings()
deliver_pending(get_engine(settings.database_url), settings)
print("finished")
"""


def _rows(url: str) -> list[WebhookDelivery]:
    with session_scope(get_engine(url)) as session:
        return list(session.scalars(select(WebhookDelivery)))


def test_an_event_committed_before_a_crash_is_delivered_once_after_restart(
    db_url: str, tmp_path: Path
) -> None:
    receiver = Receiver(statuses=[503])  # the first attempt after the restart fails
    settings = {
        "SHADOWPLANE_WEBHOOK_URLS": receiver.url,
        "SHADOWPLANE_WEBHOOK_SECRET": SECRET,
        "SHADOWPLANE_WEBHOOK_POLL_SECONDS": "0.2",
        "SHADOWPLANE_WEBHOOK_BACKOFF_SECONDS": "0.2",
    }
    env = clean_env(SHADOWPLANE_DATABASE_URL=db_url, SHADOWPLANE_TICK_SECONDS="0", **settings)
    try:
        (tmp_path / "crashed").mkdir()
        crashed = run_python(
            COMMIT_THEN_DIE,
            {**env, "SHADOWPLANE_WEBHOOK_POLL_SECONDS": "600"},
            tmp_path / "crashed",
        )
        assert crashed.returncode == -9, crashed.stderr
        assert "still alive" not in crashed.stdout
        with session_scope(get_engine(db_url)) as session:
            assert session.scalar(select(OutboxEvent.kind)) == "decision"  # committed
        assert receiver.received == []

        # Restart: the API's embedded delivery thread finds the event and delivers it.
        server = ApiServer(db_url, tmp_path / "api.log", settings=settings)
        server.launch()
        try:
            proc = server.proc
            assert proc is not None
            wait_until(
                lambda: len(receiver.received) >= 2 or proc.poll() is not None,
                "the delivery after the restart",
            )
            assert proc.poll() is None, server.log()
            assert httpx.get(f"{server.base}/healthz", verify=default_tls()).status_code == 200
        finally:
            server.stop()
        got = receiver.received
        assert [r.status for r in got] == [503, 200]
        # The retry after the failure carries the same delivery id, and a signature.
        assert got[0].delivery_id == got[1].delivery_id
        assert got[1].document["delivery_id"] == got[1].delivery_id
        assert verify_signature(SECRET, got[1].headers, got[1].body)
        assert list(receiver.processed) == [got[0].delivery_id]
        [row] = _rows(db_url)
        assert (row.status, row.attempts, row.delivery_id) == ("delivered", 2, got[0].delivery_id)

        # Another runner later sends nothing more: delivered is delivered.
        again = deliver_pending(
            get_engine(db_url), webhook_settings(db_url, receiver), now=utcnow() + timedelta(days=1)
        )
        assert (again.fanned_out, again.delivered, len(receiver.received)) == (0, 0, 2)
    finally:
        receiver.close()


def test_a_runner_killed_mid_send_is_followed_by_a_resend_with_the_same_delivery_id(
    db_url: str, tmp_path: Path
) -> None:
    receiver = Receiver(hang=True)
    env = clean_env(
        SHADOWPLANE_DATABASE_URL=db_url,
        SHADOWPLANE_WEBHOOK_URLS=receiver.url,
        SHADOWPLANE_WEBHOOK_SECRET=SECRET,
        SHADOWPLANE_WEBHOOK_TIMEOUT_SECONDS="60",
    )
    try:
        from controlplane.notify.outbox import add_event

        with session_scope(get_engine(db_url)) as session:
            add_event(session, kind="alert", task="t", document={"kind": "alert", "task": "t"})
        runner = start_python(ONE_PASS, env, tmp_path)
        try:
            assert len(receiver.wait(1, timeout=60)) == 1, output(tmp_path)
        finally:
            runner.signal(signal.SIGKILL)
            code = runner.wait(WAIT)
        assert code == -9 and "finished" not in output(tmp_path).stdout
        receiver.answer()
        first = receiver.received[0]
        assert receiver.processed == {}  # it never answered: the sender cannot know

        settings = webhook_settings(db_url, receiver)
        engine = get_engine(db_url)
        # While the dead runner's lease lasts, nobody sends it again...
        assert deliver_pending(engine, settings).delivered == 0
        assert len(receiver.received) == 1
        # ...then the next runner does, under the same delivery id, once.
        later = utcnow() + timedelta(minutes=5)
        assert deliver_pending(engine, settings, now=later).delivered == 1
        assert deliver_pending(engine, settings, now=later + timedelta(hours=1)).delivered == 0
        second = receiver.received[1]
        assert second.delivery_id == first.delivery_id
        assert first.document["event_id"] == second.document["event_id"]
        assert list(receiver.processed) == [first.delivery_id]
        [row] = _rows(db_url)
        assert (row.status, row.attempts) == ("delivered", 2)
    finally:
        receiver.close()
