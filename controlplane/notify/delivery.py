"""Delivering the outbox: at least once, signed, with backoff; failures kept visible.

`deliver_pending` is one pass: fan new events out to the configured URLs, then claim and
send every due delivery once. A Celery job runs it (beat every few seconds, and a kick
after each commit that wrote an event); in the embedded mode `DeliveryThread` runs it in
the API process; `shadowplane tick` runs one pass after its own.

At least once: an attempt is counted and leased before it is sent and recorded after. A
runner that dies in between leaves the delivery pending; it is sent again, with the same
delivery id, once the lease runs out. Receivers dedupe on `X-Shadowplane-Delivery`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from functools import partial
from urllib.parse import urlsplit

import httpx
import orjson
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from controlplane.client.tls import default_tls
from controlplane.compare.jsonutil import dumps
from controlplane.db import in_transaction, session_scope
from controlplane.models.base import utcnow
from controlplane.notify import repository
from controlplane.notify.documents import webhook_body
from controlplane.notify.repository import Claimed
from controlplane.notify.signing import DELIVERY_HEADER, SIGNATURE_HEADER, signature
from controlplane.settings import Settings

log = logging.getLogger("shadowplane.webhooks")
# The Celery job's name (shadowplane_workers/jobs.py), and the queue the workers consume (shadowplane_workers/app.py).
DELIVER_JOB = "webhooks.deliver_pending"
JOB_QUEUE = "shadowplane"
# A claimed delivery is leased for the receiver's timeout plus this, then due again.
LEASE_GRACE = timedelta(seconds=30)
MAX_ERROR_CHARS = 500


@dataclass
class DeliveryPass:
    """What one pass did."""

    fanned_out: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


# --- kicking: wake the runner right after a commit that wrote an event -----------------

_kickers: list[Callable[[], None]] = []
_kickers_lock = threading.Lock()


def add_kicker(kicker: Callable[[], None]) -> Callable[[], None]:
    """Register what wakes a runner (the embedded thread's wake-up, a Celery send); returns
    the function that removes it again."""
    with _kickers_lock:
        _kickers.append(kicker)

    def remove() -> None:
        with _kickers_lock:
            if kicker in _kickers:
                _kickers.remove(kicker)

    return remove


def kick() -> None:
    """Wake every registered runner; never raises (the beat or the next wake-up delivers)."""
    with _kickers_lock:
        kickers = list(_kickers)
    for kicker in kickers:
        try:
            kicker()
        except Exception as exc:
            log.warning("webhook runner not woken (%s: %s)", type(exc).__name__, exc)


def celery_kicker(broker_url: str) -> Callable[[], None]:
    """A kicker that queues one delivery job on the broker, from a thread of its own so a
    slow or absent broker never holds the commit that kicked (kicks in a burst coalesce)."""
    from celery import Celery

    app = Celery("shadowplane-kick", broker=broker_url)
    app.conf.update(
        task_default_queue=JOB_QUEUE,
        broker_connection_retry_on_startup=False,
        broker_transport_options={"socket_connect_timeout": 2, "socket_timeout": 2},
    )
    return Coalescing(
        lambda: app.send_task(DELIVER_JOB, queue=JOB_QUEUE, expires=60, retry=False)
    ).kick


class Coalescing:
    """Runs `action` on a daemon thread after each `kick()`; kicks that arrive while it
    runs make one more run, not one each."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def kick(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="shadowplane-webhook-kick", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            try:
                self.action()
            except Exception as exc:
                log.warning("webhook job not queued (%s: %s)", type(exc).__name__, exc)


# --- one pass ------------------------------------------------------------------------


def backoff(settings: Settings, attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt: doubling from the base, capped."""
    seconds = settings.webhook_backoff_seconds * 2 ** min(attempts - 1, 32)
    return timedelta(seconds=min(seconds, settings.webhook_backoff_max_seconds))


def deliver_pending(
    engine: Engine,
    settings: Settings,
    *,
    now: datetime | None = None,
    limit: int = 100,
    budget_seconds: float = 60.0,
) -> DeliveryPass:
    """Fan new events out to the configured URLs, then send each due delivery once (at most
    `limit` attempts, none started after `budget_seconds`). `now` fixes the clock that
    decides what is due (tests); signatures always carry the real time."""
    report = DeliveryPass()
    urls = settings.webhook_url_list
    if not urls or not settings.webhook_secret:
        # No receivers here: the events wait for a runner that has them.
        return report

    def clock() -> datetime:
        return now or utcnow()

    with session_scope(engine) as session:
        if not repository.has_work(session, now=clock()):
            return report
    while True:
        taken = in_transaction(engine, partial(repository.fan_out, urls=urls, now=clock()))
        report.fanned_out += taken
        if taken == 0:
            break
    in_transaction(engine, partial(repository.retire_unconfigured, urls=urls, now=clock()))
    lease = timedelta(seconds=settings.webhook_timeout_seconds) + LEASE_GRACE
    deadline = time.monotonic() + budget_seconds
    with httpx.Client(
        timeout=settings.webhook_timeout_seconds, follow_redirects=False, verify=default_tls()
    ) as http:
        for _ in range(limit):
            if time.monotonic() > deadline:
                break
            at = clock()
            claimed = in_transaction(
                engine, partial(repository.claim, urls=urls, now=at, leased_until=at + lease)
            )
            if claimed is None:
                break
            error = send(http, claimed, settings)
            outcome = in_transaction(
                engine,
                partial(_record, delivery=claimed, error=error, settings=settings, now=clock()),
            )
            setattr(report, outcome, getattr(report, outcome) + 1)
    return report


def send(http: httpx.Client, delivery: Claimed, settings: Settings) -> str | None:
    """POST one delivery, signed; None when the receiver answered 2xx, else why not."""
    assert settings.webhook_secret  # Settings refuses URLs without it
    body = dumps(
        webhook_body(
            delivery.document,
            public_url=settings.public_url,
            event_id=delivery.event_id,
            delivery_id=delivery.delivery_id,
            sent_at=utcnow(),
        )
    )
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "shadowplane-webhooks",
        DELIVERY_HEADER: delivery.delivery_id,
        SIGNATURE_HEADER: signature(settings.webhook_secret, int(time.time()), body),
    }
    try:
        response = http.post(delivery.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    if response.is_success:
        return None
    return f"answered {response.status_code}: {response.text[:200]}"[:MAX_ERROR_CHARS]


def receiver(url: str) -> str:
    """A webhook's receiver as logs name it: its host and port only. The rest of the URL
    (a user and password, the path, the query) may be the webhook's secret, as Slack's are."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


def _record(
    session: Session, *, delivery: Claimed, error: str | None, settings: Settings, now: datetime
) -> str:
    """Record an attempt's outcome: delivered, retrying (due again after the backoff) or
    failed (the attempts ran out)."""
    if error is None:
        repository.mark_delivered(session, delivery=delivery, now=now)
        # An event, not the poll's chatter: one line per webhook sent (the receiver's host
        # only; a webhook URL's path or query may be its secret).
        log.info(
            orjson.dumps(
                {
                    "event": "webhook_delivered",
                    "delivery": delivery.delivery_id,
                    "kind": delivery.kind,
                    "task": delivery.task,
                    "to": receiver(delivery.url),
                    "attempt": delivery.attempts,
                }
            ).decode()
        )
        return "delivered"
    gave_up = delivery.attempts >= settings.webhook_max_attempts
    retry_at = None if gave_up else now + backoff(settings, delivery.attempts)
    repository.mark_attempt_failed(
        session, delivery=delivery, error=error, now=now, retry_at=retry_at
    )
    if retry_at is None:
        log.error(
            "webhook %s (%s on %s) to %s failed after %d attempts, given up: %s",
            delivery.delivery_id,
            delivery.kind,
            delivery.task,
            receiver(delivery.url),
            delivery.attempts,
            error,
        )
        return "failed"
    log.warning(
        "webhook %s to %s failed (attempt %d of %d, next at %s): %s",
        delivery.delivery_id,
        receiver(delivery.url),
        delivery.attempts,
        settings.webhook_max_attempts,
        retry_at.isoformat(),
        error,
    )
    return "retrying"


# --- the embedded runner ---------------------------------------------------------------


class DeliveryThread:
    """Runs `deliver_pending` on a daemon thread every `webhook_poll_seconds`, and at once
    when kicked (the embedded mode: no Redis, no Celery)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.last: DeliveryPass | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._remove_kicker: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="shadowplane-webhooks", daemon=True)

    def start(self) -> None:
        self._remove_kicker = add_kicker(self._wake.set)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._remove_kicker is not None:
            self._remove_kicker()
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.last = deliver_pending(self.engine, self.settings)
            except Exception:  # the database may be down: log, wait, try again
                log.exception("webhook delivery pass failed")
            self._wake.wait(self.settings.webhook_poll_seconds)
