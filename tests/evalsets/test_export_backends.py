"""The same eval items export to the same bytes on SQLite and PostgreSQL, numbers included:
jsonb keeps numbers as decimals (1e20 comes back as an integer, -0.0 as 0.0), SQLite keeps
the doubles; the export writes one canonical form of each."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from controlplane.db import session_scope
from controlplane.evalsets import actions, service
from controlplane.evalsets.items import canonical, canonical_number, item_id
from controlplane.rollout.configs import apply_config
from tests.conftest import make_api, make_result
from tests.evalsets.helpers import T0, cloud_verdict, label, queue

TASK = "numbers"
CONFIG: dict[str, Any] = {"task": TASK, "comparator": {"kind": "exact"}, "keep_agreeing_rate": 1.0}
ODD = {
    "big": 1e20,
    "zero": -0.0,
    "huge": 12345678901234567890.5,
    "whole": 1.0,
    "tiny": 1e-7,
    "tenth": 0.1,
    "far": 1.5e300,
    "exact": 2**70,
    "list": [3.0, -2.5e-300, 7],
}


def test_numbers_have_one_canonical_form() -> None:
    assert canonical_number(1.0) == 1 and isinstance(canonical_number(1.0), int)
    assert canonical_number(-0.0) == 0
    assert canonical_number(1e20) == 10**20
    # The decimal jsonb holds for this double: its shortest decimal, not its exact value.
    assert canonical_number(12345678901234567890.5) == 12345678901234567000
    assert canonical_number(0.1) == 0.1 and isinstance(canonical_number(0.1), float)
    assert canonical(ODD) == canonical(
        {
            "big": 10**20,
            "zero": 0.0,
            "huge": 12345678901234567000,
            "whole": 1,
            "tiny": 1e-7,
            "tenth": 0.1,
            "far": 15 * 10**299,
            "exact": 2**70,
            "list": [3, -2.5e-300, 7.0],
        }
    )
    assert item_id(TASK, {"n": 1e20}) == item_id(TASK, {"n": 10**20})


def _export(url: str) -> bytes:
    for api in make_api(url):
        with session_scope(api.engine) as session:
            apply_config(session, CONFIG, actor="test")
        body = [
            make_result(
                task=TASK,
                request_id=f"n-{i}",
                ts=(T0 + timedelta(seconds=i)).isoformat(),
                input=input_,
                edge={"output": {**ODD, "i": i, "edge": True}, "confidence": 0.9},
                cloud={"output": {**ODD, "i": i}},
            )
            for i, input_ in enumerate(
                [{"text": "invoice 1"}, {"amount": 1e20, "rate": -0.0}, {"text": "invoice 3"}]
            )
        ]
        assert api.post_results({"results": body}).json()["accepted"] == 3
        with session_scope(api.engine) as session:
            first, second, third = queue(session, TASK, ["n-0", "n-1", "n-2"])
            label(session, first, "rev", "both_wrong", corrected={**ODD, "fixed": 2.0})
            label(session, second, "rev", cloud_verdict(second))
            label(session, third, "rev", "both_wrong", corrected=[1e20, -0.0, 0.5])
        assert actions.backfill(api.engine, actor="rev")["added"] == 3
        with session_scope(api.engine) as session:
            return service.layer_bytes(session, service.task_named(session, TASK), "boundary")
    raise AssertionError("no api")


@pytest.mark.integration
def test_the_export_is_byte_identical_on_sqlite_and_postgresql(
    sqlite_url: str, pg_url: str
) -> None:
    lite, pg = _export(sqlite_url), _export(pg_url)
    # Row ids of fresh databases may differ; everything else must not.
    ids = re.compile(rb'"(id|result_id|review_item_id)":\d+')
    assert ids.sub(b"", lite) == ids.sub(b"", pg)
    assert b'"big":100000000000000000000' in lite and b'"zero":0}' in lite
    assert b"-0.0" not in lite and b"1e20" not in lite
