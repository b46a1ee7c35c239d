"""How often a polling `FlagClient` asks: the first fetch at start, exponential backoff with
jitter on 429, 5xx and network errors (`Retry-After` honoured), back to `poll_interval`
±10% after a success, and never again after 401 or 403.

The client is given a `sleep` that records the wait it asks for and returns at once, so
the test reads the waits themselves instead of timing anything; a small fake server
answers what the test scripts, one answer per request.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import formatdate

import pytest

from controlplane.client import FlagClient
from tests.client.fake import Exchange, FakeServer, document

POLL = 0.5  # poll_interval: the backoff's base
CAP = 3.0  # max_backoff
JITTER = 0.25  # the backoff's jitter: ±25%


class Script:
    """Answers `GET /v1/flags` from a list, then like the API (200, or 304 for the ETag)."""

    def __init__(self, answers: list[tuple[int, dict[str, str]]]) -> None:
        self.answers = list(answers)
        self.lock = threading.Lock()

    def app(self, ex: Exchange) -> None:
        with self.lock:
            scripted = self.answers.pop(0) if self.answers else None
        if scripted is not None:
            code, headers = scripted
            if code != 200:
                ex.reply(code, b'{"detail": "scripted"}', headers=headers)
                return
        etag = {"ETag": '"r5"'}
        if ex.headers.get("if-none-match") == etag["ETag"]:
            ex.reply(304, headers=etag)
        else:
            ex.reply(200, document(5), headers=etag)


class Sleeper:
    """The client's `sleep`: records each wait asked for, and how many requests the server
    had seen by then; returns at once until `hold_after` waits, then holds the thread."""

    def __init__(self, fake: FakeServer, hold_after: int) -> None:
        self.fake = fake
        self.hold_after = hold_after
        self.waits: list[float] = []
        self.requests_before: list[int] = []
        self.enough = threading.Event()
        self.release = threading.Event()

    def __call__(self, seconds: float) -> None:
        self.requests_before.append(len(self.fake.requests("/v1/flags")))
        self.waits.append(seconds)
        if len(self.waits) >= self.hold_after:
            self.enough.set()
            self.release.wait(60)


@contextmanager
def _polled(script: Script, hold_after: int) -> Iterator[tuple[Sleeper, FlagClient]]:
    with FakeServer(script.app) as fake:
        sleeper = Sleeper(fake, hold_after)
        flags = FlagClient(
            fake.base,
            "k",
            stream=False,
            poll_interval=POLL,
            max_backoff=CAP,
            rng=random.Random(11),
            sleep=sleeper,
        )
        try:
            yield sleeper, flags.start()
        finally:
            sleeper.release.set()
            flags.close()


def _backoff_bounds(failures: int) -> tuple[float, float]:
    """The wait after the `failures`-th failure in a row: base·2^(k-1) up to the cap, ±25%."""
    wait = min(CAP, POLL * 2 ** (failures - 1))
    return wait * (1 - JITTER), wait * (1 + JITTER)


def test_errors_back_off_exponentially_honour_retry_after_then_polls_resume_jittered() -> None:
    script = Script(
        [
            (503, {}),
            (503, {}),
            (503, {}),
            (429, {"Retry-After": "7"}),
            (503, {}),
            (503, {}),
            (200, {}),
            (503, {}),  # one failure after a success starts the backoff again
        ]
    )
    polls = 200
    with _polled(script, hold_after=8 + polls) as (sleeper, flags):
        assert sleeper.enough.wait(60), "the client to ask for its waits"
        waits, before = sleeper.waits, sleeper.requests_before
        assert flags.status().state == "ok" and flags.status().revision == 5

    # The first fetch is at start, and every wait follows exactly one fetch.
    assert before[: 8 + polls] == list(range(1, 9 + polls))

    # 503s: the wait doubles each time (a constant backoff fails here), within the jitter.
    for k, wait in enumerate(waits[:3], start=1):
        low, high = _backoff_bounds(k)
        assert low <= wait <= high, (k, wait)
    assert waits[0] < waits[1] < waits[2]

    # 429 with Retry-After: 7 while the backoff is at most 4 x 1.25 = 5 s: the server's word.
    assert _backoff_bounds(4)[1] < 7
    assert waits[3] >= 7.0

    # More failures: the backoff stays at max_backoff, jittered, never beyond.
    for wait in waits[4:6]:
        assert CAP * (1 - JITTER) <= wait <= CAP * (1 + JITTER), wait

    # A success brings back poll_interval ±10%; the next failure backs off from the base.
    assert POLL * 0.9 <= waits[6] <= POLL * 1.1
    low, high = _backoff_bounds(1)
    assert low <= waits[7] <= high

    # Polls (304s) every poll_interval ±10%, jittered: not all equal, spread over the band.
    steady = waits[8 : 8 + polls]
    assert all(POLL * 0.9 <= w <= POLL * 1.1 for w in steady), (min(steady), max(steady))
    assert len(set(steady)) > polls // 2
    assert min(steady) < POLL * 0.97 and max(steady) > POLL * 1.03


def test_at_its_cap_the_backoff_stays_jittered() -> None:
    failures = 60
    script = Script([(503, {})] * failures)
    with _polled(script, hold_after=failures) as (sleeper, flags):
        assert sleeper.enough.wait(60), "the client to ask for its waits"
        capped = sleeper.waits[4:failures]  # from the 5th failure: min(3, 0.5 x 16) = 3 s
        assert flags.status().state == "starting" and "HTTP 503" in (flags.status().error or "")
    assert all(CAP * (1 - JITTER) <= w <= CAP * (1 + JITTER) for w in capped)
    assert len(set(capped)) > len(capped) // 2
    assert min(capped) < CAP * 0.9 and max(capped) > CAP * 1.1


def test_a_retry_after_longer_than_a_third_of_max_staleness_waits_that_third() -> None:
    # A front (a proxy, a load balancer) answering 503 with "Retry-After: 3600": honoured,
    # the client would not ask again for an hour, its copy aging past max_staleness (600 s,
    # then every task to the cloud) and a rollback made meanwhile unheard. It asks again
    # after 200 s; a shorter Retry-After is still the server's word (the test above).
    script = Script([(503, {"Retry-After": "3600"}), (429, {"Retry-After": "150"})])
    with _polled(script, hold_after=3) as (sleeper, flags):
        assert sleeper.enough.wait(60), "the client to ask for its waits"
        assert flags.max_staleness == 600
    assert sleeper.waits[0] == 200.0
    assert sleeper.waits[1] == 150.0
    assert POLL * 0.9 <= sleeper.waits[2] <= POLL * 1.1


def test_a_retry_after_given_as_a_date_is_the_wait_until_it() -> None:
    # A proxy's form (and the API's own under /ofrep): before, it was not read at all.
    when = formatdate(time.time() + 150, usegmt=True)
    script = Script([(503, {"Retry-After": when})])
    with _polled(script, hold_after=2) as (sleeper, _):
        assert sleeper.enough.wait(60), "the client to ask for its waits"
    assert 145 <= sleeper.waits[0] <= 150, sleeper.waits


@pytest.mark.parametrize("code", [401, 403])
def test_401_or_403_stops_the_polling_for_good(code: int) -> None:
    script = Script([(503, {}), (code, {})])
    with _polled(script, hold_after=1000) as (sleeper, flags):
        assert flags._thread is not None
        flags._thread.join(30)
        assert not flags._thread.is_alive(), "the thread stopped asking"
        assert sleeper.requests_before == [1]  # one wait, after the 503; none after
        low, high = _backoff_bounds(1)
        assert low <= sleeper.waits[0] <= high
        assert len(sleeper.fake.requests("/v1/flags")) == 2
        status = flags.status()
        assert (status.state, status.mode) == ("stopped", "stopped")
        assert f"HTTP {code}" in (status.error or "")
