"""The Task page's routing what-if as data: the period asked for, the slider's range, the
replays kept per setting, and a replay's figures in sentences and table rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from dashboard.formats import estimate, moment, money, number, percent

# The what-if replays at most this long a period (as GET /v1/tasks/{task}/whatif).
MAX_DAYS = 31
# The replays kept in the session (one per setting asked for), newest last.
KEPT = 5

Setting = tuple[str, dt.datetime, dt.datetime, int | None, float | None]


def cap_range(boundaries: tuple[int, ...], current_cap: int | None) -> tuple[int, int]:
    """The input-length slider's top, and where it starts: today's cap, or the last bucket
    boundary without one."""
    top = max(max(boundaries, default=0) * 2, current_cap or 0, 4096)
    return top, current_cap or max(boundaries, default=top)


def default_day(span: tuple[dt.datetime, dt.datetime] | None, now: dt.datetime) -> dt.date:
    """The UTC day of the newest window (the day `now` without one)."""
    return (span[1] - dt.timedelta(seconds=1)).date() if span else now.date()


def period(first_day: dt.date, last_day: dt.date) -> tuple[dt.datetime, dt.datetime, str | None]:
    """The replayed period from the first UTC day to the end of the last, and why it cannot
    be replayed (None when it can)."""
    since = dt.datetime.combine(first_day, dt.time(), dt.UTC)
    until = dt.datetime.combine(last_day, dt.time(), dt.UTC) + dt.timedelta(days=1)
    if until <= since:
        return (
            since,
            until,
            "The period ends before it starts: pick a 'To' day on or after the 'From' day.",
        )
    if until - since > dt.timedelta(days=MAX_DAYS):
        return since, until, f"The what-if replays at most {MAX_DAYS} days; pick a shorter period."
    return since, until, None


def keep(kept: dict[Any, Any], setting: Setting, replay: dict[str, Any]) -> None:
    """Keep `replay` for its setting, dropping the oldest beyond KEPT."""
    kept[setting] = replay
    for old in list(kept)[:-KEPT]:
        del kept[old]


def no_results(since: dt.datetime, until: dt.datetime) -> str:
    return (
        f"No results stored from {moment(since)} to {moment(until)}: pick a period with "
        "traffic (the evidence above shows when there was some)."
    )


def total(replay: Mapping[str, Any]) -> dict[str, Any] | None:
    """The replay's row over every bucket, None when it holds no result."""
    found = next((r for r in replay["buckets"] if r["bucket"] == "all"), None)
    return None if found is None or found["n_results"] == 0 else found


def setting_words(setting: Mapping[str, Any]) -> str:
    limit, minimum = setting["max_input_tokens"], setting["min_confidence"]
    return (f"cap {limit} tokens" if limit is not None else "no cap") + (
        f", edge confidence at least {number(minimum)}" if minimum is not None else ""
    )


def figures(row: Mapping[str, Any], setting: str) -> str:
    """A bucket's figures under one setting ("candidate" or "current") in a sentence."""
    f = row[setting]
    share, agreement, fails = f["edge_share"], f["agreement"], f["offload_fail_rate"]
    return (
        f"edge serves {share['num']} of {row['n_results']} ({percent(share['value'])}); "
        f"agreement {estimate(agreement['value'], agreement['low'], agreement['high'])} over "
        f"{agreement['den']} pairs; offload failures {fails['num']} of {fails['den']} edge "
        f"runs ({percent(fails['value'])}); cost {money(f['cost'])} against "
        f"{money(row['baseline_cost'])} cloud-only (saves {money(f['savings'])})"
    )


def summary(replay: Mapping[str, Any], since: dt.datetime, until: dt.datetime) -> str:
    everything = total(replay)
    assert everything is not None, "a replay without results has no summary"
    return (
        f"From {moment(since)} to {moment(until)}, {everything['n_results']} results.  \n"
        f"**Candidate** ({setting_words(replay['candidate'])}): "
        f"{figures(everything, 'candidate')}.  \n"
        f"**Today** ({setting_words(replay['current'])}): {figures(everything, 'current')}."
    )


def rows(replay: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The table: per bucket, the candidate's figures and today's."""
    table = []
    for row in replay["buckets"]:
        for setting, label in (("candidate", "candidate"), ("current", "today")):
            f = row[setting]
            table.append(
                {
                    "bucket": row["bucket"],
                    "setting": label,
                    "results": row["n_results"],
                    "edge served": f["edge_share"]["num"],
                    "edge share": f["edge_share"]["value"],
                    "pairs": f["agreement"]["den"],
                    "agreement": f["agreement"]["value"],
                    "agreement low": f["agreement"]["low"],
                    "agreement high": f["agreement"]["high"],
                    "edge runs": f["offload_fail_rate"]["den"],
                    "offload failures": f["offload_fail_rate"]["num"],
                    "offload-failure rate": f["offload_fail_rate"]["value"],
                    "cost": f["cost"],
                    "cloud-only cost": row["baseline_cost"],
                    "savings": f["savings"],
                }
            )
    return table


def bucket_lines(replay: Mapping[str, Any]) -> str:
    return "\n".join(
        f"- {row['bucket']}, candidate: {figures(row, 'candidate')}; "
        f"today: {figures(row, 'current')}"
        for row in replay["buckets"]
        if row["bucket"] != "all"
    )
