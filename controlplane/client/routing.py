"""The routing rule: one flag and one request in, the side that serves it out.

Every door applies this one function (`FlagClient.route` in routers, the OFREP endpoints,
the simulator); it is pure and uses the standard library only, so a router that copies this
folder gets exactly the rule the server evaluates. Reading is strict, because a guess can
only err towards the edge: anything missing or unreadable is the cloud. The rule, the
reasons and what is read are in README.md ("For routing services").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .sticky import sticky_bucket

Side = Literal["edge", "cloud"]

STAGES = ("cloud", "shadow", "canary", "full", "rolled_back")

# The longest session or user id Shadowplane stores (a longer one is refused at ingest and
# by OFREP). A longer sticky key is no key: the request goes to the cloud, and hashing it
# can never cost the router more than this many characters.
MAX_KEY_LENGTH = 200


@dataclass(frozen=True)
class Evaluation:
    """The deterministic part of routing one request (no random draw yet)."""

    served: Side
    # The probability that the side not served also runs beside it.
    other_rate: float
    # edge | cloud | shadow (cloud serves and the edge may run beside it)
    variant: str
    reason: str
    flag_version: int | None
    # canary needs a sticky key and this request had none (OFREP: TARGETING_KEY_MISSING)
    key_missing: bool = False

    @property
    def other(self) -> Side:
        return "cloud" if self.served == "edge" else "edge"


@dataclass(frozen=True)
class Route:
    """What a router does with one request."""

    served: Side
    # Run the other side beside the served one (its answer never reaches the user).
    run_other: bool
    flag_version: int | None
    reason: str
    variant: str
    # The flag's `repeat_rate`: the share of requests on which the cloud is asked a second
    # time, off the serving path (`wants_repeat` picks them by request id); 0 when the flag
    # has none or cannot be read.
    repeat_rate: float = 0.0

    @property
    def other(self) -> Side:
        return "cloud" if self.served == "edge" else "edge"


def repeat_rate(flag: Mapping[str, Any] | None) -> float:
    """A flag's `repeat_rate`, a number in [0, 1]; 0 (no repeats) when it is missing, as in
    flags stored before flags carried it, or unreadable."""
    if not isinstance(flag, Mapping):
        return 0.0
    rate = flag.get("repeat_rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        return 0.0  # NaN fails the comparison too
    return float(rate)


def _cloud(reason: str, version: int | None, other_rate: float = 0.0, **kw: Any) -> Evaluation:
    variant = "shadow" if other_rate > 0 else "cloud"
    return Evaluation("cloud", other_rate, variant, reason, version, **kw)


def _int(value: Any, low: int = 0, high: int | None = None) -> int | None:
    """A whole number in [low, high], or None: booleans, strings, fractions, NaN and
    out-of-range values are unreadable (and unreadable means cloud)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if value < low or (high is not None and value > high):
        return None
    return value


def evaluate(
    flag: Mapping[str, Any] | None,
    task: str,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    input_tokens: int | None = None,
    eligible: bool = True,
    key: str | None = None,
) -> Evaluation:
    """The routing rule for one request. `key` overrides the sticky key the flag names
    (`sticky_by`: session or user), as OFREP's `targetingKey` does."""
    if flag is None:
        return _cloud("UNKNOWN", None)
    try:
        return _evaluate(flag, task, session_id, user_id, input_tokens, eligible, key)
    except (TypeError, ValueError, AttributeError):
        version = flag.get("version") if isinstance(flag, Mapping) else None
        return _cloud("ERROR", version if isinstance(version, int) else None)


def _evaluate(
    flag: Mapping[str, Any],
    task: str,
    session_id: str | None,
    user_id: str | None,
    input_tokens: int | None,
    eligible: bool,
    key: str | None,
) -> Evaluation:
    version = _int(flag.get("version"), low=1)
    if version is None:
        return _cloud("ERROR", None)
    stage = flag.get("stage")
    if stage not in STAGES or flag.get("default_route", "cloud") != "cloud":
        return _cloud("ERROR", version)
    if flag.get("killed", False) is not False:  # killed, or a value that might mean it
        return _cloud("DISABLED", version)
    rate = flag.get("shadow_rate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        return _cloud("ERROR", version)  # NaN fails the comparison too
    other_rate = float(rate)
    if stage == "cloud":
        return _cloud("DISABLED", version)
    if stage == "rolled_back":
        return _cloud("DISABLED", version, other_rate)
    if stage == "shadow":
        return _cloud("STATIC", version, other_rate)
    # canary or full: the edge may serve, within the cap and when the router says so
    percent = _int(flag.get("edge_percent"), high=100)
    cap = flag.get("max_input_tokens")
    if percent is None or (cap is not None and _int(cap) is None):
        return _cloud("ERROR", version)
    sticky_by = flag.get("sticky_by", "session")
    if sticky_by not in ("session", "user"):
        return _cloud("ERROR", version)
    tokens = _int(input_tokens)
    if eligible is not True or tokens is None or (cap is not None and tokens > cap):
        return _cloud("TARGETING_MATCH", version, other_rate)
    if stage == "full":
        return Evaluation("edge", other_rate, "edge", "STATIC", version)
    if key is None:
        key = user_id if sticky_by == "user" else session_id
    readable = isinstance(key, str) and len(key) <= MAX_KEY_LENGTH
    bucket = sticky_bucket(task, key) if readable else None
    if bucket is None:
        return _cloud("SPLIT", version, other_rate, key_missing=True)
    if bucket < percent:
        return Evaluation("edge", other_rate, "edge", "SPLIT", version)
    return _cloud("SPLIT", version, other_rate)


def route(
    flag: Mapping[str, Any] | None,
    task: str,
    *,
    draw: float,
    session_id: str | None = None,
    user_id: str | None = None,
    input_tokens: int | None = None,
    eligible: bool = True,
) -> Route:
    """`evaluate`, then the draw in [0, 1) decides whether the other side runs."""
    e = evaluate(
        flag,
        task,
        session_id=session_id,
        user_id=user_id,
        input_tokens=input_tokens,
        eligible=eligible,
    )
    # A flag that cannot be read asks nothing more of the cloud either. Under the kill switch
    # and in every stage the repeats go on: they only ask the cloud again.
    repeats = 0.0 if e.reason in ("ERROR", "UNKNOWN") else repeat_rate(flag)
    return Route(e.served, draw < e.other_rate, e.flag_version, e.reason, e.variant, repeats)
