"""The sample-ratio check, pure: the chi-square test, the tally of eligible requests, the
finding, and routers simulated with the real routing rule (`controlplane.client.routing`)."""

from __future__ import annotations

import dataclasses
import functools
import math
import zlib
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.alerts import srm
from controlplane.alerts.srm import CLOUD_BECAUSE, Request, Tally, Terms
from controlplane.catalog.schemas import AlertsConfig, ConfigError, parse_config
from controlplane.client import routing
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
    # The two sides of a share whose complement is exact (a multiple of 2**-30, so n times
    # either is exact too): their figures differ only by the rounding of one product each.
    # With 1 - share rounded instead, p moved with the statistic times that rounding over
    # the smaller share: near 1 by its square root (1 - 1.5e-8 against 1 - 1.9e-8), and in
    # the far tail by 3e-9 of itself (5.0831205e-292 for 2 of 299 at a share of 1e-5).
    share = round(share * 2**30) / 2**30
    statistic, p = srm.chi_square(observed, n, share)
    mirrored = srm.chi_square(n - observed, n, 1.0 - share)
    assert mirrored[0] == pytest.approx(statistic, rel=1e-12, abs=1e-300)
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
    6: Terms(edge_percent=0, max_input_tokens=CAP, stage="shadow"),
    7: Terms(edge_percent=100, max_input_tokens=CAP, stage="full"),
    8: Terms(edge_percent=0, max_input_tokens=CAP, killed=True),
}


def test_the_tally_expects_per_request_what_the_rule_does_under_its_version() -> None:
    def r(bucket: int | None, version: int | None, edge: bool, **kw: Any) -> Request:
        return Request(bucket, kw.pop("tokens", 100), version, edge, **kw)

    requests = [
        r(2, 3, True),  # edge, expected
        r(10, 3, True),  # outside its bucket
        r(10, 4, True),  # inside at 25
        r(20, 4, False),  # kept on the cloud inside its bucket
        r(90, 4, False),  # cloud, expected
        r(1, 4, False, tokens=CAP + 1),  # over the cap, cloud: expected
        r(1, 4, True, tokens=CAP + 1),  # over the cap, on the edge
        r(1, None, False),  # no version, cloud: expected
        r(1, None, True),  # no version, on the edge
        r(1, 99, True),  # unknown version, on the edge
        r(1, 99, False),  # unknown version, cloud
        r(1, 4, True, eligible=False),  # the router said cloud, then tried the edge
        r(1, 4, False, eligible=False),  # the router said cloud and kept to it
        r(None, 4, True),  # canary without a key, on the edge
        r(None, 4, False),  # canary without a key, cloud
        r(None, 7, True),  # full needs no key
        r(50, 6, True),  # a shadow version keeps every request on the cloud
        r(1, 8, True),  # so does the kill switch
        r(1, 5, True),  # keyed on session, the version splits by user: not judged
        r(None, 5, True),  # nor without the session key, when it splits by user
        r(1, 5, True, tokens=9999, keyed_by="user"),  # no cap in v5
    ]
    t = srm.tally(requests, TERMS)
    assert (t.n, t.rekeyed) == (19, 2)
    assert (t.observed_edge, t.expected_edge) == (12, 5)
    assert (t.to_edge, t.to_cloud) == (8, 1)
    assert t.misrouted == (
        ("unversioned", 2), ("held", 2), ("ineligible", 1), ("over_cap", 1), ("keyless", 1)
    )  # fmt: skip
    assert t.outside_bucket == 1
    assert (t.no_version, t.unknown, t.over_cap) == (2, ((99, 2),), 2)
    assert t.versions == ((3, 5, 2), (4, 25, 9), (5, 25, 1), (6, 0, 1), (7, 100, 1), (8, 0, 1))


def test_terms_read_the_stage_and_the_kill_switch_as_the_rule_does() -> None:
    fields = {"edge_percent": 25, "max_input_tokens": 512, "sticky_by": "user", "killed": False}
    assert srm.terms_of({**fields, "stage": "canary"}) == Terms(25, 512, "user", "canary")
    assert srm.terms_of({**fields, "stage": "full"}) == Terms(25, 512, "user", "full")
    assert srm.terms_of({**fields, "stage": "canary", "killed": True}) == Terms(
        25, 512, "user", "canary", killed=True
    )
    for broken in ({"stage": "canaryish"}, {}, {"stage": "canary", "edge_percent": 101},
                   {"stage": "canary", "sticky_by": "device"}):  # fmt: skip
        assert srm.terms_of({**fields, **broken}) is None, broken


requests = st.builds(
    Request,
    bucket=st.none() | st.integers(0, 99),
    input_tokens=st.integers(1, 3 * CAP),
    flag_version=st.none() | st.integers(1, 9),
    edge_attempt=st.booleans(),
    keyed_by=st.sampled_from(["session", "user"]),
    eligible=st.booleans(),
)


@given(st.lists(requests, max_size=300))
def test_every_request_is_judged_unless_its_bucket_is_keyed_differently(
    batch: list[Request],
) -> None:
    t = srm.tally(batch, TERMS)
    assert t.n + t.rekeyed == len(batch)
    assert sum(c for _, _, c in t.versions) + t.no_version + t.n_unknown == t.n
    assert 0 <= t.observed_edge <= t.n and 0 <= t.expected_edge <= t.n
    # every departure from the expectation is a request on the wrong side
    assert t.observed_edge - t.expected_edge == t.to_edge - t.to_cloud
    assert 0 <= t.outside_bucket <= t.to_edge


def follows_the_rule(r: Request) -> Request:
    """`r` as a faithful router routes it, the routing rule spelled out once more."""
    terms = TERMS.get(r.flag_version) if r.flag_version is not None else None
    edge = (
        terms is not None
        and not terms.killed
        and r.eligible
        and (terms.max_input_tokens is None or r.input_tokens <= terms.max_input_tokens)
        and (
            terms.stage == "full"
            or (terms.stage == "canary" and r.bucket is not None and r.bucket < terms.edge_percent)
        )
    )
    return dataclasses.replace(r, edge_attempt=edge)


@given(st.lists(requests, max_size=300))
def test_requests_that_follow_the_rule_never_depart_from_the_expectation(
    batch: list[Request],
) -> None:
    t = srm.tally(map(follows_the_rule, batch), TERMS)
    assert t.observed_edge == t.expected_edge and t.to_edge == t.to_cloud == 0
    if t.n:
        assert srm.chi_square(t.observed_edge, t.n, t.expected_share or 0.0)[1] == 1.0


@given(st.lists(requests, min_size=1, max_size=300), st.data())
def test_a_request_the_rule_keeps_on_the_cloud_tried_on_the_edge_is_named(
    batch: list[Request], data: st.DataObject
) -> None:
    faithful = [follows_the_rule(r) for r in batch]
    kept = [i for i, r in enumerate(faithful) if not r.edge_attempt]
    if not kept:
        return
    i = data.draw(st.sampled_from(kept))
    wrong = faithful[i] = dataclasses.replace(faithful[i], edge_attempt=True)
    t = srm.tally(faithful, TERMS)
    judged = srm.expectation(wrong, TERMS)
    if judged is None:  # keyed on another key: not judged either way
        assert t.to_edge == 0
        return
    assert t.to_edge == 1 and t.observed_edge == t.expected_edge + 1
    _, why = judged
    assert t.misrouted == (() if why is None else ((why, 1),))
    assert t.outside_bucket == (1 if why is None else 0)


# --- the finding ---------------------------------------------------------------------------


def test_the_finding_fires_only_in_canary_on_enough_requests_and_says_what_it_saw() -> None:
    skewed = Tally(
        n=400, observed_edge=120, expected_edge=20, to_edge=100, to_cloud=0,
        misrouted=(("unversioned", 7), ("ineligible", 20), ("keyless", 3)), no_version=7,
        unknown=((99, 3),), versions=((3, 5, 390),),
    )  # fmt: skip
    found = srm.finding(skewed, CONFIG, stage="canary")
    assert found.kind == "srm" and found.firing is True
    assert (found.value, found.baseline) == (0.3, 0.05)
    for part in ("do not follow", "30.0% of 400 requests", "puts 5.0% on the edge", "v3, edge_percent 5: 390 requests",
                 "p < 1e-12", "alert at p < 0.001 with at least 200 requests",
                 "100 went to the edge where the rule says cloud (70 outside their bucket, "
                 "7 with no flag version or one the flag history does not know, 20 the router "
                 "itself reported as ineligible (decision cloud), 3 without the sticky key",
                 "0 stayed on the cloud inside their bucket",
                 "7 reported no flag version and 3 reported a version", "(v99): the rule keeps them on the cloud"):  # fmt: skip
        assert part in found.message, part
    assert srm.finding(skewed, CONFIG, stage="full").firing is False
    assert srm.finding(skewed, CONFIG, stage="shadow").firing is False
    few = Tally(n=199, observed_edge=100, expected_edge=10, versions=((3, 5, 199),))
    assert srm.finding(few, CONFIG, stage="canary").firing is None
    fine = Tally(n=400, observed_edge=22, expected_edge=20, to_edge=2, versions=((3, 5, 400),))
    assert srm.finding(fine, CONFIG, stage="canary").firing is False
    strict = AlertsConfig(srm_p_value=0.5, srm_min_requests=1000)
    assert srm.finding(skewed, strict, stage="canary").firing is None


def test_one_request_the_rule_keeps_on_the_cloud_tried_on_the_edge_fires_alone() -> None:
    # Within the share's tolerance, but the rule is exact: a faithful router never does it.
    for why in CLOUD_BECAUSE:
        t = Tally(
            n=400, observed_edge=21, expected_edge=20, to_edge=1, misrouted=((why, 1),),
            versions=((3, 5, 400),),
        )  # fmt: skip
        found = srm.finding(t, CONFIG, stage="canary")
        assert found.firing is True, found.message
        assert f"1 went to the edge where the rule says cloud (1 {CLOUD_BECAUSE[why]})" in (
            found.message
        )
        assert "the share passes, but the rule keeps that request on the cloud" in found.message
        assert srm.finding(t, CONFIG, stage="canary").value == 21 / 400
        few = Tally(n=199, observed_edge=1, to_edge=1, misrouted=((why, 1),))
        assert srm.finding(few, CONFIG, stage="canary").firing is None
    # Outside its bucket, one request is left to the share test.
    outside = Tally(n=400, observed_edge=21, expected_edge=20, to_edge=1, versions=((3, 5, 400),))
    assert srm.finding(outside, CONFIG, stage="canary").firing is False


def test_requests_without_a_known_version_are_judged_and_fire_when_tried_on_the_edge() -> None:
    # Once they only shrank the sample to "no evidence": the rule keeps them on the cloud.
    quiet = srm.tally([Request(1, 100, None, False, count=500)], TERMS)
    assert srm.finding(quiet, CONFIG, stage="canary").firing is False
    for version in (None, 99):
        t = srm.tally(
            [Request(1, 100, version, False, count=450), Request(1, 100, version, True, count=50)],
            TERMS,
        )
        found = srm.finding(t, CONFIG, stage="canary")
        assert found.firing is True, found.message
        assert "50 with no flag version or one the flag history does not know" in found.message


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


class Call(NamedTuple):
    """One request as a router sees it, and what the routing rule makes of it."""

    session: str | None
    bucket: int | None  # sticky_bucket(TASK, session): what ingest stores
    tokens: int
    eligible: bool  # the router's own verdict
    flag: dict[str, Any] | None  # the flag it applied (None: it had none yet)
    # route(flag, TASK, draw=…, session_id=session, input_tokens=tokens, eligible=eligible)
    followed: Route
    degrade: float  # the edge degrades what it serves when this is below 0.1


# A router: what it does with a request, knowing what the routing rule says of it.
Router = Callable[[Call], Route]


def faithful(call: Call) -> Route:
    return call.followed


# The real sticky hash, memoised: the rule hashes a session's id again for each of its
# requests, which in pure Python was most of the time these tests took. The rule's module
# calls it while `traffic` routes.
bucket_of = functools.lru_cache(maxsize=4096)(sticky_bucket)


def ignores_for_30_percent_of_sessions(call: Call) -> Route:
    """Follows the flag except for 30% of sessions (by its own hash), which it serves from
    the edge whenever it finds them eligible, whatever the flag says."""
    followed = call.followed
    if call.eligible and (bucket_of("rogue", call.session) or 0) < 30:
        return Route("edge", followed.run_other, followed.flag_version, "SPLIT", "edge")
    return followed


def serves_what_it_found_ineligible(call: Call) -> Route:
    """Reports its own verdict (decision cloud) but serves those requests from the edge."""
    followed = call.followed
    if not call.eligible:
        return Route("edge", followed.run_other, followed.flag_version, "STATIC", "edge")
    return followed


def splits_keyless_requests_itself(call: Call) -> Route:
    """Serves a request without a session id from the edge (its own idea of a canary)
    instead of keeping it on the cloud."""
    followed = call.followed
    if call.session is None and call.flag is not None and call.eligible:
        return Route("edge", followed.run_other, followed.flag_version, "SPLIT", "edge")
    return followed


def reports_no_version(call: Call) -> Route:
    """Routes as the flag says but reports no flag version (an old client)."""
    followed = call.followed
    return Route(followed.served, followed.run_other, None, followed.reason, followed.variant)


def reports_an_unknown_version(call: Call) -> Route:
    """Routes as the flag says but reports a version the flag history never had."""
    followed = call.followed
    version = None if followed.flag_version is None else followed.flag_version + 1000
    return Route(followed.served, followed.run_other, version, followed.reason, followed.variant)


def traffic(flags: list[dict[str, Any]], seed: str, k: int) -> list[Call]:
    """Window `k` of clustered traffic (about 200 sessions of 1 to 30 requests, 4 on
    average; 5% of sessions send no session id), each request routed by the routing rule
    under the flag in force, which moves through `flags` during the window; 3% of requests
    come from a router without flags (no version); the router finds 15% of requests
    ineligible and reports decision cloud for them."""
    rng = np.random.default_rng([zlib.crc32(seed.encode()), k])
    sessions = int(rng.integers(180, 220))
    keyless = (rng.random(sessions) < 0.05).tolist()
    ids = rng.integers(0, 1 << 40, sessions).tolist()
    sizes = np.minimum(1 + rng.exponential(3, sessions).astype(int), 30)
    n = int(sizes.sum())
    current = rng.integers(0, len(flags), n).tolist()
    flagless = (rng.random(n) < 0.03).tolist()
    tokens = rng.integers(1, 2400, n).tolist()
    eligible = (rng.random(n) < 0.85).tolist()
    draws, degrade = rng.random(n).tolist(), rng.random(n).tolist()
    out: list[Call] = []
    first = 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(routing, "sticky_bucket", bucket_of)
        for j, size in enumerate(sizes.tolist()):
            session = None if keyless[j] else f"s-{k}-{j}-{ids[j]:x}"
            bucket = bucket_of(TASK, session)
            for i in range(first, first + size):
                applied = None if flagless[i] else flags[current[i]]
                followed = route(
                    applied, TASK, draw=draws[i], session_id=session,
                    input_tokens=tokens[i], eligible=eligible[i],
                )  # fmt: skip
                out.append(
                    Call(session, bucket, tokens[i], eligible[i], applied, followed, degrade[i])
                )
            first += size
    return out


def stored(router: Router, calls: Iterable[Call]) -> list[Request]:
    """What ingest would store for every request `router` routes (the edge degrades 10% of
    what it serves to the cloud; the attempt counts)."""
    out: list[Request] = []
    for call in calls:
        r = router(call)
        degraded = r.served == "edge" and call.degrade < 0.1
        served = "cloud" if degraded else r.served
        attempt = served == "edge" or degraded
        out.append(
            Request(call.bucket, call.tokens, r.flag_version, attempt, eligible=call.eligible)
        )
    return out


def terms_of(flags: list[dict[str, Any]]) -> dict[int, Terms]:
    return {f["version"]: Terms(f["edge_percent"], f["max_input_tokens"]) for f in flags}


def two_versions(percent: int) -> list[dict[str, Any]]:
    """Each window sees two versions of the flag (a shadow_rate change bumps the version)."""
    return [flag(7, percent), {**flag(8, percent), "shadow_rate": 0.2}]


# The first windows of the faithful routers' traffic, routed once and shared: the routers
# that misroute see the same requests, and the rule's answer for each.
SHARED = 40


@functools.cache
def shared(percent: int, k: int) -> list[Call]:
    return traffic(two_versions(percent), f"faithful-{percent}", k)


@pytest.mark.parametrize("percent", [5, 25])
def test_a_faithful_router_never_raises_the_alert_over_200_windows(percent: int) -> None:
    flags = two_versions(percent)
    naive_alarms = 0
    for k in range(200):
        calls = shared(percent, k) if k < SHARED else traffic(flags, f"faithful-{percent}", k)
        requests = stored(faithful, calls)
        t = srm.tally(requests, terms_of(flags))
        assert t.n >= CONFIG.srm_min_requests, t
        assert t.no_version > 0 and t.over_cap > 0 and t.rekeyed == 0
        assert t.n == sum(r.count for r in requests), "every request is judged"
        found = srm.finding(t, CONFIG, stage="canary")
        assert found.firing is False, found.message
        assert t.to_edge == t.to_cloud == 0
        # Judged against edge_percent alone, as if requests were independent, the same
        # traffic would page: whole sessions move together.
        naive_alarms += srm.chi_square(t.observed_edge, t.n, percent / 100)[1] < 0.001
    assert naive_alarms > 0


def test_a_faithful_router_through_a_canary_step_never_raises_the_alert() -> None:
    flags = [flag(7, 5), flag(8, 25)]  # promoted from 5% to 25% inside every window
    for k in range(200):
        t = srm.tally(stored(faithful, traffic(flags, "step", k)), terms_of(flags))
        assert {v for v, _, _ in t.versions} == {7, 8}
        assert srm.finding(t, CONFIG, stage="canary").firing is False


@pytest.mark.parametrize("percent", [5, 25])
def test_a_router_that_ignores_its_flag_for_30_percent_of_sessions_raises_the_alert(
    percent: int,
) -> None:
    """In every one of the shared windows: the same requests on which the faithful
    router raises nothing."""
    flags = two_versions(percent)
    for k in range(SHARED):
        t = srm.tally(
            stored(ignores_for_30_percent_of_sessions, shared(percent, k)), terms_of(flags)
        )
        found = srm.finding(t, CONFIG, stage="canary")
        assert found.firing is True, (k, found.message)
        assert found.value is not None and found.baseline is not None
        assert found.value > found.baseline and t.to_edge > 0 and t.to_cloud == 0


@pytest.mark.parametrize("percent", [5, 25])
@pytest.mark.parametrize(
    ("router", "why"),
    [(serves_what_it_found_ineligible, "ineligible"), (splits_keyless_requests_itself, "keyless"),
     (reports_no_version, "unversioned"), (reports_an_unknown_version, "unversioned")],
)  # fmt: skip
def test_a_router_sending_the_edge_what_the_rule_keeps_on_the_cloud_raises_the_alert(
    router: Router, why: str, percent: int
) -> None:
    """Requests the router itself found ineligible, canary requests without the sticky
    key, requests reporting no or an unknown flag version: the rule keeps each on the
    cloud whatever its bucket, so one tried on the edge is a misroute, named as such. On
    the shared windows (where the faithful router raises nothing), every window in which
    the router sends one such request to the edge fires, and nearly all windows hold one
    (at 5%, a window can hold no request the rule sends to the edge, so a router that only
    misreports its version has nothing to misroute there)."""
    flags = two_versions(percent)
    misrouting = 0
    for k in range(SHARED):
        t = srm.tally(stored(router, shared(percent, k)), terms_of(flags))
        found = srm.finding(t, CONFIG, stage="canary")
        assert t.to_cloud == 0, t
        assert found.firing is (t.to_edge > 0), (k, found.message)
        if found.firing:
            misrouting += 1
            assert dict(t.misrouted)[why] > 0, t
            assert CLOUD_BECAUSE[why] in found.message
    assert misrouting >= 0.9 * SHARED


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
