"""The demo's gate step prints every change of the gate it waits on, and only a change:
once the gate reads its last two windows, a newer window that changes its reasons or turns
"not yet" into "passed" is printed too (a run whose first two windows fell short printed
only "not yet", then promoted); the same answer again prints nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from controlplane.demo import CANARY, _Loop


def gate(windows: int, reasons: list[str]) -> dict[str, Any]:
    view = {
        "pairs": 120,
        "agreement": 0.97,
        "agreement_low": 0.93,
        "edge_fail_rate": 0.01,
        "verdict": "fail" if reasons else "pass",
    }
    return {"windows": windows, "passed": not reasons, "reasons": reasons, "buckets": {"all": view}}


def test_a_newer_window_that_passes_the_gate_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    high = "bucket 2048+: edge failure rate upper bound 5.3% is over 5.0%"
    higher = "bucket 2048+: edge failure rate upper bound 5.6% is over 5.0%"
    answers = iter(
        [gate(0, ["0 of the 2 windows"]), gate(1, ["1 of the 2 windows"]), gate(2, [high])]
        + [gate(2, [high])] * 2
        + [gate(2, [higher]), gate(2, [])]
    )
    looks: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        looks.append(request.url.path)
        return httpx.Response(200, json=next(answers))

    reader = httpx.Client(transport=httpx.MockTransport(serve), base_url="http://demo")
    loop = _Loop("http://demo", "router", "review", reader, reviewer=None)  # type: ignore[arg-type]
    assert loop._gate(lambda: 0.0) is True
    assert looks == [f"/v1/tasks/{CANARY}/gate"] * 7
    lines = [x for x in capsys.readouterr().out.splitlines() if "GATE on" in x]
    assert [x.split("] ", 1)[1] for x in lines] == [
        "GATE on 1 of the 2 shadow windows it reads: not yet: 1 of the 2 windows",
        f"GATE on 2 of the 2 shadow windows it reads: not yet: {high}",
        f"GATE on 2 of the 2 shadow windows it reads: not yet: {higher}",
        "GATE on 2 of the 2 shadow windows it reads: passed",
    ]
