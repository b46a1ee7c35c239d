"""README, "With the Python client": "An edge that raises (anything, `BaseException`
included) ... never reaches the caller: the cloud answers and the result says `degraded`" —
for the synchronous `shadow_compare`, on the serving path and beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.client import shadow_compare
from tests.client.test_shadow import KW, Collected, _flags, cloud


class EdgeOwnBase(BaseException):
    """Not an Exception: what `except Exception` lets through."""


@pytest.mark.parametrize("raised", [EdgeOwnBase("edge runtime torn down"), GeneratorExit()])
def test_an_edge_raising_a_base_exception_on_the_serving_path_gives_the_cloud_answer(
    tmp_path: Path, raised: BaseException
) -> None:
    def edge(payload: str) -> str:
        raise raised

    reports = Collected()
    answer = shadow_compare(
        "hi", edge, cloud, client=_flags(tmp_path, "full", 0.0), reporter=reports, **KW
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert (r["served"], r["degraded"], r["degrade_reason"]) == ("cloud", True, "exception")
    assert r["edge"]["error"] == "exception"


def test_an_edge_raising_a_base_exception_beside_the_cloud_is_reported(tmp_path: Path) -> None:
    def edge(payload: str) -> str:
        raise EdgeOwnBase("edge runtime torn down")

    reports = Collected()
    answer = shadow_compare(
        "hi", edge, cloud, client=_flags(tmp_path, "shadow", 1.0), reporter=reports, **KW
    )
    assert answer == "cloud:hi"
    r = reports.one()
    assert (r["served"], r["degraded"]) == ("cloud", False)
    assert r["edge"]["error"] == "exception" and "EdgeOwnBase" in r["edge"]["error_message"]
