"""Hostile review of a393fdd (results keep `skipped`: the sides a router did not run, and
why) and cf417b1 (the Task page's charts are Vega-Lite dicts drawn with st.vega_lite_chart,
their frames named by a content digest in shadowplane_dashboard/charts.py, the per-render schema
validation replaced by test-time checks), tried as a hostile user would.

Six defects were found, strict xfails until they were fixed (now plain tests):

- the Python client names a side under `skipped` with a reason of up to 514 characters
  ("not reported: " and `_message`'s 500) where the API refuses more than 200, and the
  refusal costs the whole result (its cloud answer, cost and comparison): before a393fdd
  the API read past `skipped` and kept the result;
- under `payload_policy: redacted` a reason is masked and then cut at 200 characters
  (degrade_reason's VARCHAR, not the JSON column's), so a reason that masking lengthens
  keeps half a placeholder ("…<EMAIL_1" for the 19th address), no mark of the cut;
- each reason is masked by a Masker of its own: two different addresses in two reasons of
  one result both read `<EMAIL_1>` (one value, one placeholder per result, says
  controlplane/compare/redaction.py);
- shadowplane_dashboard/charts.py's digest (pandas' row hashes) ignores dtypes and time zones, so two
  frames of one chart that Streamlit sends as different Arrow tables (naive against UTC
  times; booleans against integers) get one name, and one layer draws the other's data
  (no page draws such a pair today);
- shadowplane_dashboard/charts.py's docstring names tests/dashboard/task/test_chart_specs.py as the
  test that validates every kind of chart; there is no such file;
- tests/dashboard/vega.py's schema_problems reports a broken mark at the spec's root (an
  empty place and the spec's repr cut at 200 characters): neither where nor why, where the
  commit says a broken mark type is reported with its place.

The plain tests pin what held: both decoders answer hostile `skipped` spellings alike,
single or in a batch; each policy stores what it should on SQLite and PostgreSQL, COPY
path included, and the answer matches the OpenAPI document; a policy switched to `none`
keeps no reason of the next result and leaves stored ones as stored; the migration goes
down and up on PostgreSQL with rows in a day partition and on SQLite; a re-run sends the
new data under a new name; UTC, NaN, None and NaT reach the frame Streamlit sends; a
broken mark is found by the schema check (not where: above).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import altair as alt
import jsonschema
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

import shadowplane_dashboard.charts
from controlplane.api import create_app
from controlplane.catalog.service import task_runtimes
from controlplane.client.shadow import shadow_compare
from controlplane.compare.jsonutil import dumps
from controlplane.db import get_engine, session_scope
from controlplane.ingest.repository import COPY_MIN_ROWS
from controlplane.ingest.validation import validate_body
from controlplane.migrate import check, upgrade
from controlplane.models.partitions import create_day, ensure_partitions
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings
from shadowplane_dashboard import charts
from shadowplane_dashboard.task import evidence
from tests.client.holding import KW, CloudWithEdgeBeside, Recording
from tests.conftest import Api, make_api, make_result
from tests.dashboard.vega import charts_on, problems, schema_problems
from tests.db.migrating import migrate_to
from tests.ingest.test_decode_equivalence import assert_same_answers

REPO = Path(__file__).resolve().parents[2]
BEFORE = "b4d1e7f3a2c9"  # the revision before df084010e878 (skipped sides)
SKIPPED = "df084010e878"
REDACTED_TASK: dict[str, Any] = {
    "task": "redacted_skips",
    "comparator": {"kind": "label", "labels": ["refund", "exchange"]},
    "payload_policy": "redacted",
    "keep_agreeing_rate": 1.0,
}
PLACEHOLDER = re.compile(r"<(?:EMAIL|IP|IDCARD|CARD|PHONE|ID|NUM)_\d+>|<TRUNCATED_\d+>")


def cloud_only(**overrides: Any) -> dict[str, Any]:
    """A result served by the cloud whose edge was not run (named under `skipped`)."""
    return make_result(edge=None, served="cloud", decision="cloud", **overrides)


def read(api: Api, task: str, request_id: str) -> dict[str, Any]:
    found = api.client.get(f"/v1/results/{task}/{request_id}", headers=api.headers("read"))
    assert found.status_code == 200, found.text
    body: dict[str, Any] = found.json()
    return body


@contextmanager
def reopened(url: str, keys: dict[str, str]) -> Iterator[Api]:
    """A new app on a database `make_api` has seeded (its keys), as after a restart."""
    get_engine(url).dispose()
    settings = Settings(database_url=url, tick_seconds=0, max_backfill=timedelta(days=36500))
    with TestClient(create_app(settings)) as client:
        yield Api(client=client, url=url, keys=keys)
    get_engine(url).dispose()


@pytest.fixture
def redacted_api(db_url: str) -> Iterator[Api]:
    for api in make_api(db_url):
        with session_scope(api.engine) as session:
            apply_config(session, REDACTED_TASK, actor="test")
        yield api


# --- a393fdd: defects -----------------------------------------------------------------------


class RefusingExecutor(Executor):
    """A caller's executor that refuses work by failing its future with a long message (as
    a bounded pool in front of a GPU queue might)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        refused: Future[Any] = Future()
        why = "pool 'edge-gpu' refused the call: " + "queue full (64 of 64); " * 12
        refused.set_exception(RuntimeError(why))
        return refused


def test_a_result_the_python_client_reports_with_a_long_skip_reason_is_kept(api: Api) -> None:
    got = Recording()
    served = shadow_compare(
        "my order never came",
        lambda payload: "refund",
        lambda payload: "refund",
        client=CloudWithEdgeBeside(),
        reporter=got,
        executor=RefusingExecutor(),
        edge_timeout=0.05,
        **KW,
    )
    assert served == "refund"
    [result] = got.got
    # The edge is named under skipped (its executor failed it), the cloud answered.
    assert result["edge"] is None and result["cloud"]["output"] == "refund"
    assert result["skipped"]["edge"].startswith("not reported: RuntimeError: pool 'edge-gpu'")
    assert len(result["skipped"]["edge"]) > 200
    answered = api.post_results(result).json()
    assert answered["accepted"] == 1, answered


def masked_past_200(pad: int = 2) -> str:
    """A reason of 200 characters that masking lengthens (each `aN@b.io` a `<EMAIL_n>`)."""
    return ("x" * pad + " " + " ".join(f"a{i}@b.io" for i in range(40)))[:200]


@pytest.mark.text_reader  # masked by each reader, the compiled one and the Python one
def test_a_masked_reason_keeps_whole_placeholders(redacted_api: Api) -> None:
    reason = masked_past_200()
    assert len(reason) == 200
    posted = cloud_only(request_id="long-1", task="redacted_skips", skipped={"edge": reason})
    assert redacted_api.post_results(posted).json()["accepted"] == 1
    stored = read(redacted_api, "redacted_skips", "long-1")["skipped"]["edge"]
    assert "@" not in stored  # masked, whatever else
    leftover = PLACEHOLDER.sub("", stored)
    assert "<" not in leftover, stored[-40:]


@pytest.mark.text_reader  # masked by each reader, the compiled one and the Python one
def test_two_values_in_two_reasons_keep_two_placeholders(redacted_api: Api) -> None:
    posted = cloud_only(
        request_id="two-1",
        task="redacted_skips",
        skipped={"edge": "held for ann@x.com", "cloud_repeat": "held for bob@y.com"},
    )
    assert redacted_api.post_results(posted).json()["accepted"] == 1
    stored = read(redacted_api, "redacted_skips", "two-1")["skipped"]
    assert "ann@" not in str(stored) and "bob@" not in str(stored)
    assert stored["edge"] != stored["cloud_repeat"], stored


# --- a393fdd: what held ----------------------------------------------------------------------


def _body(skipped_json: str, *, batch: bool) -> bytes:
    """A cloud-served result whose `skipped` is spelt exactly as given, alone or first of a
    batch of two."""
    one = dumps(cloud_only(request_id="r"))
    one = one.replace(
        b'{"request_id"', b'{"skipped":' + skipped_json.encode() + b',"request_id"', 1
    )
    if not batch:
        return one
    return b'{"results":[' + one + b"," + dumps(make_result(request_id="r-2")) + b"]}"


SPELLINGS = {
    # spelling: the stored skipped, or the start of the item's rejection
    '{"edge":"a","edge":"b"}': {"edge": "b"},  # the later key counts, as everywhere
    '{"edge":3,"edge":"b"}': {"edge": "b"},
    '{"edge":"b","edge":3}': "skipped.edge: Input should be a valid string",
    '{"edge":"a\\u0000","edge":"ok"}': {"edge": "ok"},
    '{"\\u0065dge":"x"}': {"edge": "x"},
    '{"Edge":"x"}': "skipped.Edge.[key]: Input should be 'edge', 'cloud' or 'cloud_repeat'",
    '{"\\u0435dge":"x"}': "skipped.\u0435dge.[key]: Input should be",  # Cyrillic е
    '{"edge ":"x"}': "skipped.edge .[key]: Input should be",
    '{"edge":null}': "skipped.edge: Input should be a valid string",
    '{"edge":"' + "\U0001f600" * 1000 + '"}': {"edge": "\U0001f600" * 1000},
    '{"edge":"' + "\\ud83d\\ude00" * 1000 + '"}': {"edge": "\U0001f600" * 1000},
    '{"edge":"' + "\U0001f600" * 1001 + '"}': "skipped.edge: String should have at most 1000",
    '{"edge":"' + "x" * 999 + '\\ud83d\\ude00"}': {"edge": "x" * 999 + "\U0001f600"},
    '{"edge":"\\ud800"}': "skipped: holds a lone surrogate",
    '{"\\udfff":"x"}': "skipped: holds a lone surrogate",
    '{"cloud":"busy"}': "(result): skipped names 'cloud', which the result carries",
    '{"edge":"busy","cloud_repeat":"busy"}': {"edge": "busy", "cloud_repeat": "busy"},
    "{}": {},
    "null": None,
    '["edge"]': "skipped: Input should be a valid dictionary",
    "{"
    + ",".join(f'"k{i}":"x"' for i in range(300))
    + "}": "skipped: at most 3 sides (edge, cloud, cloud_repeat), not 300",
}


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_hostile_spellings_answer_alike_on_both_decoders(batch: bool) -> None:
    for spelling, expected in SPELLINGS.items():
        body = _body(spelling, batch=batch)
        assert_same_answers(body)  # msgspec's path and pydantic's give one answer
        good, bad = validate_body(body, 1000)
        mine = [item for index, item in good if index == 0]
        if isinstance(expected, str):
            assert mine == [] and bad[0].index == 0, (spelling[:40], bad)
            assert bad[0].error.startswith(expected), (spelling[:40], bad[0].error[:120])
        else:
            assert bad == [] and mine[0]["skipped"] == expected, spelling[:40]


def _result_out_validator(api: Api) -> jsonschema.protocols.Validator:
    document = api.client.get("/openapi.json").json()
    schema = {"$ref": "#/components/schemas/ResultOut", "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.text_reader  # masked by each reader, the compiled one and the Python one
def test_each_policy_stores_and_answers_what_it_allows(redacted_api: Api) -> None:
    api = redacted_api
    reason = "held: ann@example.com, +44 20 7946 0958, order INV-2024-001, 10.0.0.1"
    skipped = {"edge": reason, "cloud_repeat": "loop stopped"}
    posted = [
        cloud_only(request_id="full-1", skipped=skipped),
        cloud_only(request_id="red-1", task="redacted_skips", skipped=skipped),
        cloud_only(
            request_id="none-1",
            task="invoice_extract",
            skipped=skipped,
            cloud={"output": {"amount": 1}},
        ),
        cloud_only(request_id="empty-1", skipped={}),
    ]
    assert api.post_results({"results": posted}).json()["accepted"] == 4
    conforms = _result_out_validator(api)
    views = {
        rid: read(api, task, rid)
        for task, rid in [
            ("ticket_classify", "full-1"),
            ("redacted_skips", "red-1"),
            ("invoice_extract", "none-1"),
            ("ticket_classify", "empty-1"),
        ]
    }
    for rid, view in views.items():
        assert list(conforms.iter_errors(view)) == [], rid
    assert views["full-1"]["skipped"] == skipped
    masked = views["red-1"]["skipped"]
    assert masked == {
        "edge": "held: <EMAIL_1>, <PHONE_1>, order <ID_1>, <IP_1>",
        "cloud_repeat": "loop stopped",
    }
    assert views["none-1"]["skipped"] == {"edge": None, "cloud_repeat": None}
    assert views["empty-1"]["skipped"] is None
    # The document says what a result may name, and how long a reason may be.
    document = api.client.get("/openapi.json").json()
    posted_schema = document["components"]["schemas"]["ResultIn"]["properties"]["skipped"]
    [as_object, _] = posted_schema["anyOf"]
    assert as_object["propertyNames"] == {"enum": ["edge", "cloud", "cloud_repeat"]}
    assert as_object["additionalProperties"]["maxLength"] == 1000


def test_a_policy_changed_to_none_keeps_no_new_reason(api: Api) -> None:
    first = cloud_only(request_id="before", skipped={"edge": "held for ann@x.com"})
    assert api.post_results(first).json()["accepted"] == 1
    with session_scope(api.engine) as session:
        apply_config(
            session,
            {
                "task": "ticket_classify",
                "comparator": {"kind": "label", "labels": ["refund"]},
                "payload_policy": "none",
            },
            actor="test",
        )
    # A new config version applies to ingest within a second (catalog.service.RuntimeCache).
    deadline = time.monotonic() + 10
    while True:
        with session_scope(api.engine) as session:
            now = task_runtimes(session, {"ticket_classify"})["ticket_classify"]
        if now.config.payload_policy == "none":
            break
        assert time.monotonic() < deadline, "the new config never applied"
        time.sleep(0.1)
    second = cloud_only(request_id="after", skipped={"edge": "held for ann@x.com"})
    assert api.post_results(second).json()["accepted"] == 1
    assert read(api, "ticket_classify", "after")["skipped"] == {"edge": None}
    # What was stored under `full` stays as stored (as its payload does).
    assert read(api, "ticket_classify", "before")["skipped"] == {"edge": "held for ann@x.com"}


@pytest.mark.integration
def test_a_batch_on_the_copy_path_keeps_every_skipped(pg_url: str) -> None:
    for api in make_api(pg_url):
        n = COPY_MIN_ROWS + 5
        batch = [
            cloud_only(request_id=f"c-{i}", skipped={"edge": f"held {i} \U0001f600 \u00e9"})
            for i in range(n)
        ]
        batch[3]["skipped"] = {}
        assert api.post_results({"results": batch}).json()["accepted"] == n
        with api.engine.connect() as conn:
            stored = dict(
                (row[0], row[1])
                for row in conn.execute(sa.text("SELECT request_id, skipped FROM results"))
            )
        assert stored["c-3"] is None
        assert stored["c-7"] == {"edge": "held 7 \U0001f600 \u00e9"}
        assert read(api, "ticket_classify", "c-24")["skipped"] == {
            "edge": "held 24 \U0001f600 \u00e9"
        }


def _skipped_columns(url: str) -> dict[str, bool]:
    """Each table of `results` (the parent and every partition): whether it has `skipped`."""
    with get_engine(url).connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid "
                "AND a.attname = 'skipped' AND NOT a.attisdropped) FROM pg_class c "
                "WHERE c.relname = 'results' OR c.oid IN "
                "(SELECT inhrelid FROM pg_inherits WHERE inhparent = 'results'::regclass)"
            )
        )
        return {row[0]: row[1] for row in rows}


@pytest.mark.integration
@pytest.mark.fresh_db  # migrates down and up
def test_the_migration_goes_down_and_up_with_rows_in_day_partitions(pg_url: str) -> None:
    now = datetime.now(UTC)
    with get_engine(pg_url).begin() as conn:
        ensure_partitions(conn, now.date(), behind=1, ahead=1)
    for api in make_api(pg_url):
        posted = cloud_only(request_id="day-1", ts=now.isoformat(), skipped={"edge": "busy"})
        assert api.post_results(posted).json()["accepted"] == 1
        secrets = api.keys
    with get_engine(pg_url).connect() as conn:
        held_in = conn.execute(
            sa.text("SELECT tableoid::regclass::text FROM results WHERE request_id = 'day-1'")
        ).scalar_one()
    assert held_in == f"results_p{now:%Y%m%d}"
    assert all(_skipped_columns(pg_url).values())

    migrate_to(pg_url, BEFORE, down=True)
    assert not any(_skipped_columns(pg_url).values())
    with get_engine(pg_url).begin() as conn:  # a day made while the column is gone
        create_day(conn, "results", (now + timedelta(days=20)).date())
        create_day(conn, "payloads", (now + timedelta(days=20)).date())
        assert conn.execute(sa.text("SELECT count(*) FROM results")).scalar_one() == 1

    upgrade(pg_url)  # to the head, whatever follows df084010e878
    get_engine(pg_url).dispose()
    columns = _skipped_columns(pg_url)
    assert f"results_p{now + timedelta(days=20):%Y%m%d}" in columns and all(columns.values())
    check(pg_url)
    with reopened(pg_url, secrets) as api:
        assert read(api, "ticket_classify", "day-1")["skipped"] is None  # its reason went down
        again = cloud_only(request_id="day-2", ts=now.isoformat(), skipped={"edge": "busy"})
        assert api.post_results(again).json()["accepted"] == 1
        assert read(api, "ticket_classify", "day-2")["skipped"] == {"edge": "busy"}


def _sqlite_results_schema(url: str) -> tuple[list[str], list[Any], list[Any]]:
    with get_engine(url).connect() as conn:
        inspector = sa.inspect(conn)
        columns = [c["name"] for c in inspector.get_columns("results")]
        found = conn.execute(
            sa.text(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'results'"
            )
        )
        indexes = sorted((row[0], row[1]) for row in found)
        keys = inspector.get_foreign_keys("results")
    return columns, indexes, keys


def test_the_migration_goes_down_and_up_on_sqlite_keeping_rows(sqlite_url: str) -> None:
    for api in make_api(sqlite_url):
        secrets = api.keys
        assert (
            api.post_results(cloud_only(request_id="s-1", skipped={"edge": "x"})).json()["accepted"]
            == 1
        )
    # The table as df084010e878 left it (the migrations after it change it too).
    migrate_to(sqlite_url, SKIPPED, down=True)
    columns, indexes, keys = _sqlite_results_schema(sqlite_url)
    migrate_to(sqlite_url, BEFORE, down=True)
    # The table rebuilt without the column keeps its indexes (the partial one too) and keys.
    assert _sqlite_results_schema(sqlite_url) == (
        [c for c in columns if c != "skipped"],
        indexes,
        keys,
    )
    upgrade(sqlite_url)
    check(sqlite_url)
    with reopened(sqlite_url, secrets) as api:
        assert read(api, "ticket_classify", "s-1")["skipped"] is None


# --- cf417b1: defects ------------------------------------------------------------------------

TIMES = pd.to_datetime(["2026-11-30 02:00", "2026-11-30 02:05"])
ALIKE_BUT_NOT = {
    "naive against UTC times": (
        pd.DataFrame({"at": TIMES, "v": [1.0, 2.0]}),
        pd.DataFrame({"at": TIMES.tz_localize("UTC"), "v": [1.0, 2.0]}),
    ),
    "booleans against integers": (
        pd.DataFrame({"at": TIMES, "v": [1, 0]}),
        pd.DataFrame({"at": TIMES, "v": [True, False]}),
    ),
}


@pytest.mark.parametrize("pair", ALIKE_BUT_NOT.values(), ids=ALIKE_BUT_NOT.keys())
def test_frames_sent_differently_are_named_apart(pair: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    first, second = pair
    points = alt.Chart().mark_point().encode(x="at:T", y="v:Q")
    rules = alt.Chart().mark_rule().encode(x="at:T")
    spec = charts.spec([(points, first), (rules, second)])
    names = [layer["data"]["name"] for layer in spec["layer"]]
    assert names[0] != names[1] and len(spec["datasets"]) == 2


def test_the_test_the_charts_module_names_exists() -> None:
    """It named tests/dashboard/task/test_chart_specs.py, which did not exist: every test
    file its docstring names now does."""
    doc = (shadowplane_dashboard.charts.__doc__ or "").replace("\n", " ")
    named = re.findall(r"tests/[\w/]+\.py", doc)
    assert named and all((REPO / path).is_file() for path in named), named


def test_the_schema_check_names_the_place_of_a_broken_mark() -> None:
    found = schema_problems(*_broken_mark())
    assert found != []
    assert any(p.startswith("layer/0/mark") for p in found), found


# --- cf417b1: what held ----------------------------------------------------------------------


@pytest.mark.parametrize("pair", ALIKE_BUT_NOT.values(), ids=ALIKE_BUT_NOT.keys())
def test_the_alike_frames_are_different_arrow_tables(
    pair: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    """What the xfail above rests on: Streamlit sends the two frames as different tables
    (and names the datasets of its own Altair charts by those bytes)."""
    first, second = pair
    assert dataframe_util.convert_anything_to_arrow_bytes(
        first
    ) != dataframe_util.convert_anything_to_arrow_bytes(second)


def test_equal_content_is_one_dataset_and_column_order_two() -> None:
    frame = pd.DataFrame({"at": TIMES.tz_localize("UTC"), "v": [1.0, np.nan]})
    points = alt.Chart().mark_point().encode(x="at:T", y="v:Q")
    rules = alt.Chart().mark_rule().encode(x="at:T")
    same = charts.spec([(points, frame), (rules, frame.copy())])
    assert len(same["datasets"]) == 1  # the same rows, sent once
    swapped = charts.spec([(points, frame), (rules, frame[["v", "at"]])])
    assert len(swapped["datasets"]) == 2
    # A mark Vega-Lite does not know is found by the test-time check.
    assert schema_problems(*_broken_mark()) != []


def _broken_mark() -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    frame = pd.DataFrame({"at": TIMES.tz_localize("UTC"), "v": [1.0, 2.0]})
    drawn = charts.spec([(alt.Chart().mark_point().encode(x="at:T", y="v:Q"), frame)])
    broken = {**drawn, "layer": [{**drawn["layer"][0], "mark": {"type": "lin"}}]}
    return broken, broken["datasets"]


def _rough_windows() -> pd.DataFrame:
    start = pd.Timestamp("2026-11-30 02:00", tz="UTC")
    return pd.DataFrame(
        {
            "window_start": [start, start + pd.Timedelta(minutes=5), pd.NaT, start],
            "bucket": ["all", "all", "all", None],
            "degrade_rate": [0.01, np.nan, 0.3, 0.02],
            "degrade_rate_low": [0.0, None, 0.1, np.nan],
            "degrade_rate_high": [0.2, None, 0.5, np.nan],
            "conflict_rate": [np.nan, 0.1, None, 0.2],
        }
    )


EVENTS = {
    "none": charts.events([], []),
    "alerts only": charts.events(
        [], [{"window_start": None, "opened_at": "2026-11-30T02:03:00Z", "message": "jump"}]
    ),
    "a decision": charts.events(
        [{"created_at": pd.Timestamp("2026-11-30 02:04", tz="UTC"), "reason": "rolled back"}], []
    ),
}


@pytest.mark.parametrize("events", EVENTS.values(), ids=EVENTS.keys())
def test_gaps_and_events_draw_without_a_problem(events: pd.DataFrame) -> None:
    frame = _rough_windows()
    for chart, threshold in ((evidence.DEGRADES, 0.05), (evidence.CONFLICTS, None)):
        spec = charts.draw(chart, frame, order=["all"], threshold=threshold, events=events)
        assert problems(spec, spec["datasets"]) == [], chart.title
        assert schema_problems(spec, spec["datasets"]) == [], chart.title


def _page() -> None:
    """Two identical charts of one frame, its first value from the session."""
    import pandas as pd
    import streamlit as st

    from shadowplane_dashboard import charts
    from shadowplane_dashboard.task import evidence

    start = pd.Timestamp("2026-11-30 02:00", tz="UTC")
    frame = pd.DataFrame(
        {
            "window_start": [start, start + pd.Timedelta(minutes=5)],
            "bucket": ["all", "all"],
            "conflict_rate": [st.session_state.get("first", 0.5), 0.9],
        }
    )
    for _ in range(2):
        st.vega_lite_chart(spec=charts.draw(evidence.CONFLICTS, frame, order=["all"]))


def test_a_rerun_sends_new_data_under_a_new_name_in_utc() -> None:
    at = AppTest.from_function(_page).run()
    assert not at.exception

    def sent() -> list[tuple[str, pd.DataFrame]]:
        out = []
        for element in at.get("vega_lite_chart"):
            [dataset] = element.proto.datasets
            out.append((dataset.name, pa.ipc.open_stream(dataset.data.data).read_pandas()))
        return out

    before = sent()
    # Each chart carries its own copy (the browser draws each from its own element).
    assert len(before) == 2 and before[0][0] == before[1][0]
    assert str(before[0][1]["window_start"].dtype).endswith(", UTC]")
    assert list(before[0][1]["conflict_rate"]) == [0.5, 0.9]
    assert set(charts_on(at)) == {evidence.CONFLICTS.title}
    at.session_state["first"] = 0.6
    at.run()
    after = sent()
    assert after[0][0] != before[0][0]  # a new name: the spec changes, the view is made anew
    assert list(after[0][1]["conflict_rate"]) == [0.6, 0.9]
