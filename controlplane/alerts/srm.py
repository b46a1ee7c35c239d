"""The sample-ratio check: do the routers follow the flag they report? Pure.

Each request of a closed canary window is judged against the routing rule under the flag
version it reports; a chi-square test compares the observed edge share with the share so
expected (docs/evidence.md, "Windows, metrics and alerts", `srm`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.alerts.rules import Finding
from controlplane.catalog.schemas import AlertsConfig
from controlplane.client.routing import STAGES

KIND = "srm"

# Why a request that the rule keeps on the cloud whatever its bucket is on the cloud, in
# the rule's order, and how the sentence names the ones tried on the edge anyway.
CLOUD_BECAUSE = {
    "unversioned": "with no flag version or one the flag history does not know",
    "held": "under a flag version that keeps every request on the cloud",
    "ineligible": "the router itself reported as ineligible (decision cloud)",
    "over_cap": "over their version's max_input_tokens",
    "keyless": "without the sticky key their version splits by",
}


@dataclass(frozen=True, slots=True)
class Terms:
    """What one flag version told routers, as far as this check reads it."""

    edge_percent: int
    max_input_tokens: int | None
    # session | user: the key routers bucketed on under this version
    sticky_by: str = "session"
    # canary splits by bucket; full sends every eligible request within the cap to the
    # edge; any other stage, or the kill switch, keeps every request on the cloud
    stage: str = "canary"
    killed: bool = False


@dataclass(frozen=True, slots=True)
class Request:
    """One request (or `count` alike) of a canary window, as ingest stored it."""

    # the sticky bucket ingest computed; None without the key the task's sticky_by names
    bucket: int | None
    input_tokens: int
    flag_version: int | None
    # served by the edge, or tried there and degraded to the cloud
    edge_attempt: bool
    # the key ingest computed the bucket from (the task's `sticky_by` then)
    keyed_by: str = "session"
    # how many such requests (a query may group them)
    count: int = 1
    # the router's own verdict: `decision` edge (False: it reported cloud)
    eligible: bool = True


@dataclass(frozen=True, slots=True)
class Tally:
    """What a window's requests did against what the rule expects of each."""

    n: int = 0
    observed_edge: int = 0
    expected_edge: int = 0
    # expected on the cloud but tried on the edge / expected on the edge but kept on the cloud
    to_edge: int = 0
    to_cloud: int = 0
    # of to_edge: (reason, requests) for those the rule keeps on the cloud whatever their
    # bucket (CLOUD_BECAUSE), in the rule's order; the rest went outside their bucket
    misrouted: tuple[tuple[str, int], ...] = ()
    # judged as expected on the cloud: reporting no flag version, or one not known
    no_version: int = 0
    unknown: tuple[tuple[int, int], ...] = ()  # (version, requests)
    over_cap: int = 0
    # not judged
    rekeyed: int = 0
    # (version, edge_percent, requests) of the versions known
    versions: tuple[tuple[int, int, int], ...] = ()

    @property
    def observed_share(self) -> float | None:
        return self.observed_edge / self.n if self.n else None

    @property
    def expected_share(self) -> float | None:
        return self.expected_edge / self.n if self.n else None

    @property
    def n_unknown(self) -> int:
        return sum(count for _, count in self.unknown)

    @property
    def outside_bucket(self) -> int:
        """Tried on the edge although their bucket under their version says cloud."""
        return self.to_edge - sum(count for _, count in self.misrouted)


def terms_of(fields: Mapping[str, Any]) -> Terms | None:
    """A flag version's terms from its stored routing fields; None when they do not read
    (the rule sends such a flag's requests to the cloud, as for an unknown version)."""
    percent, cap = fields.get("edge_percent"), fields.get("max_input_tokens")
    sticky_by = fields.get("sticky_by", "session")
    stage, killed = fields.get("stage"), fields.get("killed", False)
    if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
        return None
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)):
        return None
    if sticky_by not in ("session", "user") or stage not in STAGES:
        return None
    # The rule reads anything but false (or no value) as killed.
    return Terms(percent, cap, sticky_by, stage, killed is not False and killed is not None)


def expectation(r: Request, terms: Mapping[int, Terms]) -> tuple[bool, str | None] | None:
    """What the routing rule does with `r` under the version it reports: (edge?, why it
    is on the cloud whatever its bucket, a CLOUD_BECAUSE key, or None); None when its side
    depends on a bucket computed from another key than its version's."""
    t = terms.get(r.flag_version) if r.flag_version is not None else None
    if t is None:
        return False, "unversioned"
    if t.killed or t.stage not in ("canary", "full"):
        return False, "held"
    if not r.eligible:
        return False, "ineligible"
    if t.max_input_tokens is not None and r.input_tokens > t.max_input_tokens:
        return False, "over_cap"
    if t.stage == "full":
        return True, None
    if t.sticky_by != r.keyed_by:
        # Routed on another key than the stored bucket (or its absence) was computed from:
        # the bucket says nothing about this request.
        return None
    if r.bucket is None:
        return False, "keyless"
    return r.bucket < t.edge_percent, None


def tally(requests: Iterable[Request], terms: Mapping[int, Terms]) -> Tally:
    """Count the requests, what they did and what the rule expects of each."""
    n = observed = expected = to_edge = to_cloud = no_version = over_cap = rekeyed = 0
    unknown: Counter[int] = Counter()
    per_version: Counter[int] = Counter()
    misrouted: Counter[str] = Counter()
    for r in requests:
        c = r.count
        judged = expectation(r, terms)
        if judged is None:
            rekeyed += c
            continue
        on_edge, why = judged
        if r.flag_version is None:
            no_version += c
        elif r.flag_version not in terms:
            unknown[r.flag_version] += c
        else:
            per_version[r.flag_version] += c
        over_cap += c * (why == "over_cap")
        n += c
        expected += c * on_edge
        observed += c * r.edge_attempt
        to_edge += c * (r.edge_attempt and not on_edge)
        to_cloud += c * (on_edge and not r.edge_attempt)
        if r.edge_attempt and why is not None:
            misrouted[why] += c
    return Tally(
        n,
        observed,
        expected,
        to_edge,
        to_cloud,
        tuple((why, misrouted[why]) for why in CLOUD_BECAUSE if misrouted[why]),
        no_version,
        tuple(sorted(unknown.items())),
        over_cap,
        rekeyed,
        tuple((v, terms[v].edge_percent, c) for v, c in sorted(per_version.items())),
    )


def chi_square(observed: int, n: int, expected_share: float) -> tuple[float, float]:
    """Chi-square goodness of fit of `observed` successes out of `n` against a share
    (1 degree of freedom): the statistic and its p-value, `erfc(sqrt(x / 2))`.

    A share of exactly 0 or 1 leaves one expected count at 0: any observation off it is
    impossible under the expectation (statistic inf, p 0), and none gives (0, 1)."""
    if n <= 0:
        raise ValueError("n: must be at least 1")
    if not 0 <= observed <= n:
        raise ValueError(f"observed: must be within 0..{n}, got {observed}")
    if not 0.0 <= expected_share <= 1.0:
        raise ValueError(f"expected_share: must be within [0, 1], got {expected_share}")
    expected = n * expected_share
    if expected_share in (0.0, 1.0):
        return (0.0, 1.0) if observed == expected else (math.inf, 0.0)
    # (O_e - E_e)²/E_e + (O_c - E_c)²/E_c, the two terms folded into one
    statistic = (observed - expected) ** 2 / (n * expected_share * (1.0 - expected_share))
    return statistic, math.erfc(math.sqrt(statistic / 2.0))


def _p(p: float) -> str:
    return "p < 1e-12" if p < 1e-12 else f"p = {p:.2g}"


def _versions(t: Tally) -> str:
    shown = [f"v{v}, edge_percent {percent}: {c} requests" for v, percent, c in t.versions[-5:]]
    return "; ".join((["…"] if len(t.versions) > 5 else []) + shown)


def _misrouted(t: Tally) -> str:
    """Which requests went to the edge against the rule, and which stayed off it."""
    if not t.to_edge:
        went = "None went to the edge where the rule says cloud"
    else:
        parts = [f"{t.outside_bucket} outside their bucket"] if t.outside_bucket else []
        parts += [f"{count} {CLOUD_BECAUSE[why]}" for why, count in t.misrouted]
        went = f"{t.to_edge} went to the edge where the rule says cloud ({', '.join(parts)})"
    return f"{went}; {t.to_cloud} stayed on the cloud inside their bucket"


def _unversioned(t: Tally) -> str:
    parts = []
    if t.no_version:
        parts.append(f"{t.no_version} reported no flag version")
    if t.unknown:
        listed = ", ".join(f"v{v}" for v, _ in t.unknown[:5]) + (
            ", …" if len(t.unknown) > 5 else ""
        )
        parts.append(f"{t.n_unknown} reported a version the flag history does not know ({listed})")
    if not parts:
        return ""
    return " " + " and ".join(parts) + ": the rule keeps them on the cloud."


def _not_judged(t: Tally) -> str:
    if not t.rekeyed:
        return ""
    return f" Not judged: {t.rekeyed} were routed on another sticky key than the stored bucket's."


def finding(t: Tally, config: AlertsConfig, *, stage: str) -> Finding:
    """The `srm` finding of one window, judged with `srm_min_requests` requests or more:
    fires when the observed edge share departs from the expected one at p < `srm_p_value`,
    or when any request the rule keeps on the cloud whatever its bucket was tried on the
    edge (the expectation is exact: a faithful router never does that, so one is proof).
    Outside canary the check does not apply (an open alert resolves); with fewer requests
    there is no evidence either way."""
    if stage != "canary":
        return Finding(KIND, False)
    observed, expected = t.observed_share, t.expected_share
    if t.n < config.srm_min_requests or observed is None or expected is None:
        return Finding(KIND, None)
    statistic, p = chi_square(t.observed_edge, t.n, expected)
    skewed = p < config.srm_p_value
    misrouted = sum(count for _, count in t.misrouted)
    firing = skewed or misrouted > 0
    versions = f" ({_versions(t)})" if t.versions else ""
    if skewed:
        verdict = "; every metric of this canary is skewed while this lasts."
    elif misrouted:
        those = "that request" if misrouted == 1 else f"those {misrouted} requests"
        verdict = (
            f"; the share passes, but the rule keeps {those} on the cloud whatever the "
            "bucket: a router that follows its flag never sends one to the edge."
        )
    else:
        verdict = "."
    return Finding(
        KIND,
        firing,
        observed,
        expected,
        f"Routers {'do not follow' if firing else 'follow'} their flag: the edge was tried "
        f"for {observed:.1%} of {t.n} requests, where the routing rule under the flag "
        f"versions they report{versions} puts {expected:.1%} on the edge (chi-square "
        f"{statistic:.1f}, {_p(p)}; alert at p < {config.srm_p_value:g} with at least "
        f"{config.srm_min_requests} requests, or on any request sent to the edge that the "
        f"rule keeps on the cloud whatever its bucket). {_misrouted(t)}"
        + verdict
        + _unversioned(t)
        + _not_judged(t),
    )
