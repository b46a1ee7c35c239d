"""The sample-ratio check, pure: the chi-square test, the tally of eligible requests, the
finding, and routers simulated with the real routing rule (`controlplane.client.routing`)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.alerts import srm
from controlplane.alerts.srm import Request, Tally, Terms
from controlplane.catalog.schemas import AlertsConfig, ConfigError, parse_config
from controlplane.client.routing import Route, route
from controlplane.client.sticky import sticky_bucket

CONFIG = AlertsConfig()
TASK = "ticket_classify"
CAP = 2000


# --- the chi-square test -------------------------------------------------------------------


def test_chi_square_matches_the_tables() -> None:
    # 60 of 100 against one half: (60-50)²/50 + (40-50)²/50 = 4, p = 0.0455
    statistic, p = srm.chi_square(60, 100, 0.5)
    assert statistic == pytest.approx(4.0)
    assert p == pytest.approx(0.0455003, abs=1e-6)
    # the 1-df critical values: 3.841 at 0.05, 10.828 at 0.001
    assert math.erfc(math.sqrt(3.841459 / 2)) == pytest.approx(0.05, abs=1e-6)
    assert math.erfc(math.sqrt(10.827566 / 2)) == pytest.approx(0.001, abs=1e-7)
    # 35 of 200 against 5%: expected 10 edge, 190 cloud
    statistic, p = srm.chi_square(35, 200, 0.05)
    assert statistic == pytest.approx(25**2 / 10 + 25**2 / 190)
    assert p < 1e-12


def test_chi_square_at_a_share_of_zero_or_one_is_exact() -> None:
    assert srm.chi_square(0, 300, 0.0) == (0.0, 1.0)
    assert srm.chi_square(300, 300, 1.0) == (0.0, 1.0)
    assert srm.chi_square(1, 300, 0.0) == (math.inf, 0.0)
    assert srm.chi_square(299, 300, 1.0) == (math.inf, 0.0)


@pytest.mark.parametrize(
    ("args", "field"),
    [((1, 0, 0.5), "n"), ((-1, 10, 0.5), "observed"), ((11, 10, 0.5), "observed"),
     ((5, 10, 1.5), "expected_share"), ((5, 10, math.nan), "expected_share")],
)  # fmt: skip
def test_chi_square_names_the_bad_argument(args: tuple[int, int, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        srm.chi_square(*args)


counts = st.integers(1, 100_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))
shares = st.floats(0.0, 1.0)


@given(counts, shares)
def test_p_is_a_probability_and_symmetric_in_the_two_sides(
    on: tuple[int, int], share: float
) -> None:
    observed, n = on
    statistic, p = srm.chi_square(observed, n, share)
    assert statistic >= 0 and 0.0 <= p <= 1.0
    mirrored = srm.chi_square(n - observed, n, 1.0 - share)
    assert mirrored[1] == pytest.approx(p, rel=1e-9, abs=1e-300)


@given(st.integers(1, 10_000), st.integers(1, 99))
def test_meeting_the_expectation_exactly_gives_p_one(n: int, percent: int) -> None:
    expected = n * percent // 100
    assert srm.chi_square(expected, n, expected / n)[1] == pytest.approx(1.0)


@given(counts, st.floats(0.01, 0.99), st.integers(1, 50))
def test_p_falls_as_the_observation_moves_away_and_as_the_same_shares_gain_requests(
    on: tuple[int, int], share: float, scale: int
) -> None:
    observed, n = on
    _, p = srm.chi_square(observed, n, share)
    farther = observed + 1 if observed >= n * share else observed - 1
    if 0 <= farther <= n:
        assert srm.chi_square(farther, n, share)[1] <= p
    assert srm.chi_square(observed * scale, n * scale, share)[1] <= p + 1e-12


# --- the tally -----------------------------------------------------------------------------

TERMS = {
    3: Terms(edge_percent=5, max_input_tokens=CAP),
    4: Terms(edge_percent=25, max_input_tokens=CAP),
    5: Terms(edge_percent=25, max_input_tokens=None, sticky_by="user"),
}


def test_the_tally_expects_per_request_from_the_bucket_and_its_version() -> None:
    requests = [
        Request(bucket=2, input_tokens=100, flag_version=3, edge_attempt=True),  # edge, expected
        Request(bucket=10, input_tokens=100, flag_version=3, edge_attempt=True),  # outside
        Request(bucket=10, input_tokens=100, flag_version=4, edge_attempt=True),  # inside at 25
        Request(bucket=20, input_tokens=100, flag_version=4, edge_attempt=False),  # kept on cloud
        Request(bucket=90, input_tokens=100, flag_version=4, edge_attempt=False),  # cloud, expected
        Request(bucket=1, input_tokens=CAP + 1, flag_version=4, edge_attempt=False),  # over cap
        Request(bucket=1, input_tokens=100, flag_version=None, edge_attempt=True),  # no version
        Request(bucket=1, input_tokens=100, flag_version=99, edge_attempt=True),  # unknown
        Request(bucket=1, input_tokens=100, flag_version=99, edge_attempt=False),  # unknown
        Request(bucket=1, input_tokens=100, flag_version=5, edge_attempt=True),  # keyed on user
        Request(bucket=1, input_tokens=9999, flag_version=5, edge_attempt=True, keyed_by="user"),
    ]
    t = srm.tally(requests, TERMS)
    assert (t.n, t.observed_edge, t.expected_edge) == (6, 4, 4)
    assert (t.to_edge, t.to_cloud) == (1, 1)
    assert (t.no_version, t.unknown, t.over_cap, t.rekeyed) == (1, ((99, 2),), 1, 1)
    assert t.versions == ((3, 5, 2), (4, 25, 3), (5, 25, 1))


requests = st.builds(
    Request,
    bucket=st.integers(0, 99),
    input_tokens=st.integers(1, 3 * CAP),
    flag_version=st.none() | st.integers(1, 6),
    edge_attempt=st.booleans(),
    keyed_by=st.sampled_from(["session", "user"]),
)


@given(st.lists(requests, max_size=300))
def test_every_request_is_judged_or_counted_as_not_judged(batch: list[Request]) -> None:
    t = srm.tally(batch, TERMS)
    assert t.n + t.no_version + t.n_unknown + t.over_cap + t.rekeyed == len(batch)
    assert sum(c for _, _, c in t.versions) == t.n
    assert 0 <= t.observed_edge <= t.n and 0 <= t.expected_edge <= t.n
    # every departure from the expectation is a request on the wrong side
    assert t.observed_edge - t.expected_edge == t.to_edge - t.to_cloud


@given(st.lists(requests, max_size=300))
def test_requests_that_follow_their_bucket_never_depart_from_the_expectation(
    batch: list[Request],
) -> None:
    def faithful(r: Request) -> Request:
        terms = TERMS.get(r.flag_version) if r.flag_version is not None else None
        follows = terms is not None and r.bucket < terms.edge_percent
        return Request(r.bucket, r.input_tokens, r.flag_version, follows, r.keyed_by)

    t = srm.tally(map(faithful, batch), TERMS)
    assert t.observed_edge == t.expected_edge and t.to_edge == t.to_cloud == 0
    if t.n:
        assert srm.chi_square(t.observed_edge, t.n, t.expected_share or 0.0)[1] == 1.0


# --- the finding ---------------------------------------------------------------------------


def test_the_finding_fires_only_in_canary_on_enough_requests_and_says_what_it_saw() -> None:
    skewed = Tally(
        n=400, observed_edge=120, expected_edge=20, to_edge=100, to_cloud=0, no_version=7,
        unknown=((99, 3),), versions=((3, 5, 400),),
    )  # fmt: skip
    found = srm.finding(skewed, CONFIG, stage="canary")
    assert found.kind == "srm" and found.firing is True
    assert (found.value, found.baseline) == (0.3, 0.05)
    for part in ("do not follow", "30.0% of 400 eligible requests", "put 5.0% on the edge", "v3, edge_percent 5: 400 requests",
                 "p < 1e-12", "alert at p < 0.001 with at least 200 requests", "100 went to the edge outside",
                 "7 reported no flag version", "3 reported a version", "(v99)"):  # fmt: skip
        assert part in found.message, part
    assert srm.finding(skewed, CONFIG, stage="full").firing is False
    assert srm.finding(skewed, CONFIG, stage="shadow").firing is False
    few = Tally(n=199, observed_edge=100, expected_edge=10, versions=((3, 5, 199),))
    assert srm.finding(few, CONFIG, stage="canary").firing is None
    assert srm.finding(Tally(no_version=500), CONFIG, stage="canary").firing is None
    fine = Tally(n=400, observed_edge=22, expected_edge=20, to_edge=2, versions=((3, 5, 400),))
    assert srm.finding(fine, CONFIG, stage="canary").firing is False
    strict = AlertsConfig(srm_p_value=0.5, srm_min_requests=1000)
    assert srm.finding(skewed, strict, stage="canary").firing is None


# --- routers simulated with the real routing rule ------------------------------------------


def flag(version: int, edge_percent: int) -> dict[str, Any]:
    return {
        "task": TASK,
        "version": version,
        "stage": "canary",
        "edge_percent": edge_percent,
        "sticky_by": "session",
        "max_input_tokens": CAP,
        "shadow_rate": 0.1,
        "killed": False,
        "default_route": "cloud",
    }


Router = Callable[[dict[str, Any] | None, str, int, bool, float], Route]


def faithful(
    flag: dict[str, Any] | None, session: str, tokens: int, eligible: bool, draw: float
) -> Route:
    return route(flag, TASK, draw=draw, session_id=session, input_tokens=tokens, eligible=eligible)


def ignores_for_30_percent_of_sessions(
    flag: dict[str, Any] | None, session: str, tokens: int, eligible: bool, draw: float
) -> Route:
    """Follows the flag except for 30% of sessions (by its own hash), which it serves from
    the edge whenever it finds them eligible, whatever the flag says."""
    followed = faithful(flag, session, tokens, eligible, draw)
    if eligible and (sticky_bucket("rogue", session) or 0) < 30:
        return Route("edge", followed.run_other, followed.flag_version, "SPLIT", "edge")
    return followed


def window(
    rng: random.Random, router: Router, flags: list[dict[str, Any]], k: int
) -> list[Request]:
    """One window of clustered traffic (about 200 sessions of 1 to 30 requests, 4 on
    average), routed request by request; the flag in force moves through `flags` during
    the window; 3% of requests come from a router without flags (no version); the edge
    degrades 10% of what it serves. Returns what ingest would store for the eligible
    requests (the router's decision was edge, the request had a session id)."""
    out: list[Request] = []
    for j in range(rng.randrange(180, 220)):
        session = f"s-{k}-{j}-{rng.getrandbits(40):x}"
        bucket = sticky_bucket(TASK, session)  # what ingest stores
        assert bucket is not None
        size = min(1 + int(rng.expovariate(1 / 3)), 30)
        for _ in range(size):
            current = flags[min(int(rng.random() * len(flags)), len(flags) - 1)]
            applied = None if rng.random() < 0.03 else current
            tokens = rng.randrange(1, 2400)
            eligible = rng.random() < 0.85
            r = router(applied, session, tokens, eligible, rng.random())
            degraded = r.served == "edge" and rng.random() < 0.1
            if eligible:
                out.append(Request(bucket, tokens, r.flag_version, r.served == "edge" or degraded))
    return out


def terms_of(flags: list[dict[str, Any]]) -> dict[int, Terms]:
    return {f["version"]: Terms(f["edge_percent"], f["max_input_tokens"]) for f in flags}


@pytest.mark.parametrize("percent", [5, 25])
def test_a_faithful_router_never_raises_the_alert_over_200_windows(percent: int) -> None:
    rng = random.Random(percent)
    # Each window sees two versions of the flag (a shadow_rate change bumps the version).
    flags = [flag(7, percent), {**flag(8, percent), "shadow_rate": 0.2}]
    naive_alarms = 0
    for k in range(200):
        t = srm.tally(window(rng, faithful, flags, k), terms_of(flags))
        assert t.n >= CONFIG.srm_min_requests, t
        assert t.no_version > 0 and t.over_cap > 0
        found = srm.finding(t, CONFIG, stage="canary")
        assert found.firing is False, found.message
        assert t.to_edge == t.to_cloud == 0
        # Judged against edge_percent alone, as if requests were independent, the same
        # traffic would page: whole sessions move together.
        naive_alarms += srm.chi_square(t.observed_edge, t.n, percent / 100)[1] < 0.001
    assert naive_alarms > 0


def test_a_faithful_router_through_a_canary_step_never_raises_the_alert() -> None:
    rng = random.Random(11)
    flags = [flag(7, 5), flag(8, 25)]  # promoted from 5% to 25% inside every window
    for k in range(200):
        t = srm.tally(window(rng, faithful, flags, k), terms_of(flags))
        assert {v for v, _, _ in t.versions} == {7, 8}
        assert srm.finding(t, CONFIG, stage="canary").firing is False


@pytest.mark.parametrize("percent", [5, 25])
def test_a_router_that_ignores_its_flag_for_30_percent_of_sessions_raises_the_alert(
    percent: int,
) -> None:
    rng = random.Random(100 + percent)
    flags = [flag(7, percent)]
    for k in range(200):
        t = srm.tally(window(rng, ignores_for_30_percent_of_sessions, flags, k), terms_of(flags))
        found = srm.finding(t, CONFIG, stage="canary")
        assert found.firing is True, (k, found.message)
        assert found.value is not None and found.baseline is not None
        assert found.value > found.baseline and t.to_edge > 0 and t.to_cloud == 0


@pytest.mark.parametrize(
    ("alerts", "field"),
    [({"srm_p_value": 0}, "alerts.srm_p_value"), ({"srm_p_value": 1}, "alerts.srm_p_value"),
     ({"srm_p_value": math.inf}, "alerts.srm_p_value"),
     ({"srm_min_requests": 0}, "alerts.srm_min_requests"),
     ({"srm_min_requests": 10_000_001}, "alerts.srm_min_requests")],
)  # fmt: skip
def test_the_task_config_bounds_the_check_and_names_the_field(
    alerts: dict[str, Any], field: str
) -> None:
    document = {"task": "bounded", "comparator": {"kind": "exact"}, "alerts": alerts}
    with pytest.raises(ConfigError, match=field):
        parse_config(document)
    defaults = parse_config({"task": "bounded", "comparator": {"kind": "exact"}}).alerts
    assert (defaults.srm_p_value, defaults.srm_min_requests) == (0.001, 200)
