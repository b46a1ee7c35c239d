"""The sample-ratio check: do the routers follow the flag they report? Pure.

A router that ignores its flag for some of its traffic skews every metric of a canary (the
edge is judged on requests it was never meant to see), so the SRE must hear about it
(docs/evidence.md, "Windows, metrics and alerts").

Per closed window of a task in canary, the requests judged are the *eligible* ones: the
router's `decision` was `edge`, ingest stored a sticky bucket (the request had the key the
task's `sticky_by` names), the flag version it reports is known, was keyed the way ingest
keyed the bucket, and the input is within that version's `max_input_tokens`. Each of them
is expected on the edge when its bucket is below that version's `edge_percent`, so the
expected edge share of the window is the fraction of eligible requests whose bucket says
edge. A chi-square goodness-of-fit test (1 degree of freedom) compares the observed edge
attempts (`served == "edge"` or `degraded`) with that share. Expecting per request from
the stored bucket, rather than `edge_percent` alone, means the sessions a window happens to
hold cannot raise the alarm: a faithful router meets the expectation exactly, however its
traffic clusters into sessions.

Requests that report no flag version, or one the flag history does not know, are not
judged; they are counted and named in the sentence.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.alerts.rules import Finding
from controlplane.catalog.schemas import AlertsConfig

KIND = "srm"


@dataclass(frozen=True, slots=True)
class Terms:
    """What one flag version told routers, as far as this check reads it."""

    edge_percent: int
    max_input_tokens: int | None
    # session | user: the key routers bucketed on under this version
    sticky_by: str = "session"


@dataclass(frozen=True, slots=True)
class Request:
    """One request whose router found it eligible and whose bucket ingest stored."""

    bucket: int
    input_tokens: int
    flag_version: int | None
    # served by the edge, or tried there and degraded to the cloud
    edge_attempt: bool
    # the key ingest computed the bucket from (the task's `sticky_by` then)
    keyed_by: str = "session"
    # how many such requests (a query may group them)
    count: int = 1


@dataclass(frozen=True, slots=True)
class Tally:
    """What a window's eligible requests did against what their flag versions expect."""

    n: int = 0
    observed_edge: int = 0
    expected_edge: int = 0
    # expected on the cloud but tried on the edge / expected on the edge but kept on the cloud
    to_edge: int = 0
    to_cloud: int = 0
    # not judged
    no_version: int = 0
    unknown: tuple[tuple[int, int], ...] = ()  # (version, requests)
    over_cap: int = 0
    rekeyed: int = 0
    # (version, edge_percent, eligible requests) of the versions judged
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


def terms_of(fields: Mapping[str, Any]) -> Terms | None:
    """A flag version's terms from its stored routing fields; None when they do not read
    (its requests are then counted as reporting an unknown version)."""
    percent, cap = fields.get("edge_percent"), fields.get("max_input_tokens")
    sticky_by = fields.get("sticky_by", "session")
    if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
        return None
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int)):
        return None
    if sticky_by not in ("session", "user"):
        return None
    return Terms(percent, cap, sticky_by)


def tally(requests: Iterable[Request], terms: Mapping[int, Terms]) -> Tally:
    """Count the eligible requests, what they did and what their flag versions expect."""
    n = observed = expected = to_edge = to_cloud = no_version = over_cap = rekeyed = 0
    unknown: Counter[int] = Counter()
    per_version: Counter[int] = Counter()
    for r in requests:
        c = r.count
        if r.flag_version is None:
            no_version += c
            continue
        t = terms.get(r.flag_version)
        if t is None:
            unknown[r.flag_version] += c
            continue
        if t.sticky_by != r.keyed_by:
            # Routed on another key than the stored bucket was computed from (the task's
            # sticky_by changed in between): the bucket says nothing about this request.
            rekeyed += c
            continue
        if t.max_input_tokens is not None and r.input_tokens > t.max_input_tokens:
            over_cap += c
            continue
        n += c
        per_version[r.flag_version] += c
        on_edge = r.bucket < t.edge_percent
        expected += c * on_edge
        observed += c * r.edge_attempt
        to_edge += c * (r.edge_attempt and not on_edge)
        to_cloud += c * (on_edge and not r.edge_attempt)
    return Tally(
        n,
        observed,
        expected,
        to_edge,
        to_cloud,
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


def _not_judged(t: Tally) -> str:
    parts = []
    if t.no_version:
        parts.append(f"{t.no_version} reported no flag version")
    if t.unknown:
        listed = ", ".join(f"v{v}" for v, _ in t.unknown[:5]) + (
            ", …" if len(t.unknown) > 5 else ""
        )
        parts.append(f"{t.n_unknown} reported a version the flag history does not know ({listed})")
    if t.rekeyed:
        parts.append(f"{t.rekeyed} were routed on another sticky key than the stored bucket's")
    if not parts:
        return ""
    return " Not judged: " + "; ".join(parts) + "."


def finding(t: Tally, config: AlertsConfig, *, stage: str) -> Finding:
    """The `srm` finding of one window: fires when the observed edge share departs from
    the expected one at p < `srm_p_value` with `srm_min_requests` eligible requests or
    more. Outside canary the check does not apply (an open alert resolves); with fewer
    requests there is no evidence either way."""
    if stage != "canary":
        return Finding(KIND, False)
    observed, expected = t.observed_share, t.expected_share
    if t.n < config.srm_min_requests or observed is None or expected is None:
        return Finding(KIND, None)
    statistic, p = chi_square(t.observed_edge, t.n, expected)
    firing = p < config.srm_p_value
    return Finding(
        KIND,
        firing,
        observed,
        expected,
        f"Routers {'do not follow' if firing else 'follow'} their flag: the edge was tried "
        f"for {observed:.1%} of {t.n} eligible requests, where their sticky buckets under the "
        f"flag versions they report ({_versions(t)}) put {expected:.1%} on the edge "
        f"(chi-square {statistic:.1f}, {_p(p)}; alert at p < {config.srm_p_value:g} with at "
        f"least {config.srm_min_requests} requests). {t.to_edge} went to the edge outside "
        f"their bucket, {t.to_cloud} stayed on the cloud inside it"
        + ("; every metric of this canary is skewed while this lasts." if firing else ".")
        + _not_judged(t),
    )
