"""Posting generated results to a running API in batches, as a routing service would."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from controlplane.sim.profiles import generate


@dataclass
class Totals:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)


def simulate(
    base_url: str,
    key: str,
    tasks: list[str],
    *,
    per_task: int,
    batch_size: int = 200,
    seed: int = 0,
    scenario: str = "none",
    now: datetime | None = None,
) -> dict[str, Totals]:
    now = now or datetime.now(UTC)
    totals: dict[str, Totals] = {}
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        for task in tasks:
            t = totals[task] = Totals()
            results = generate(task, per_task, seed=seed, now=now, scenario=scenario)
            for start in range(0, len(results), batch_size):
                response = client.post(
                    "/v1/results", json={"results": results[start : start + batch_size]}
                )
                if response.status_code != 200:
                    t.errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                    continue
                report = response.json()
                t.accepted += report["accepted"]
                t.duplicates += report["duplicates"]
                t.rejected += len(report["rejected"])
                t.errors.extend(r["error"] for r in report["rejected"][:3])
    return totals
