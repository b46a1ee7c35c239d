"""Hostile review of ingest and the catalog, by a routing service's author posting over HTTP
and by an attacker holding a valid key. The contract tried: a bad input gets a clear error
naming the field and the reason; no input, however long or strange, makes a request slow
for everyone else (while it runs, a concurrent GET /healthz or flag poll stays fast).

Each test pins one defect as a strict xfail; it becomes a plain test once the defect is fixed.

Measured by hand against `shadowplane api` (one worker) on PostgreSQL, /healthz polled every
10 ms while the hostile request ran:

- a result whose `input.text` is "a" then 40,000 pairs of combining marks (U+0301 U+0316,
  canonical classes 230 then 220): 480 KB of escaped JSON (160 KB as raw UTF-8), accepted
  200 after 6.2 s, during which /healthz waited 6.1 s. Ingest normalises an input's text to
  NFKC for its identity (the free repeat pairs' input hash), without bound, and NFKC's
  canonical reordering is an insertion sort: quadratic in a run of marks, holding the GIL
  (20,000 pairs: 1.2 s; 40,000: 4.8 s; the body limit holds millions). The comparators and
  the masker read the same text in linear time; only the identity is quadratic;
- a YAML task config of about 600 bytes (nine levels of ten aliases each, `labels: [*i]`),
  POST /v1/tasks as application/yaml: 422 after 51 s, /healthz waited 51.3 s, and the
  answer reads "(body): YAML that is not plain JSON data (a self-referencing anchor, invalid
  Unicode or an integer beyond 64 bits): Not enough memory to allocate buffer for parsing".
  read_documents expands the aliases without bound in its JSON round trip (orjson.dumps, one
  C call holding the GIL); 467 bytes of seven levels take 5.8 s of CPU;
- a batch sent with `Content-Encoding: gzip` (what an HTTP client that compresses its
  requests sends): 422 "body: not valid JSON ('utf-8' codec can't decode byte 0x8b in
  position 1: invalid start byte)", which names neither the header nor the coding (a plain
  JSON body labelled `gzip` is stored as if the label were not there: the header is read
  nowhere; POST /v1/tasks answers a gzip body "body: not valid UTF-8 (byte 1)");
- a result whose `ts` has hour 24, minute 61, second 99 or the offset +24:00: rejected
  alone, as it should be, but "Input should be a valid datetime or date, unexpected extra
  characters at the end of the input", where a query parameter names the field out of range.
"""

from __future__ import annotations

import gzip

import orjson
import pytest

from controlplane.catalog.schemas import ConfigError, read_documents
from controlplane.compare import native
from controlplane.compare.fingerprint import input_hash
from tests.conftest import Api, make_result
from tests.ingest.native_support import require_compiled_reader
from tests.ingest.test_linear_time import assert_grows_linearly

# --- an input's identity: NFKC of a run of combining marks ------------------------------

KEY = b"k" * 32


def _marks(n: int) -> str:
    """n characters: a letter, then combining marks whose canonical classes fall (230, 220,
    230, 220...), so that NFKC's canonical reordering moves every 220 past the 230s before it."""
    return "a" + ("\u0301\u0316" * n)[: n - 1]


@pytest.mark.parametrize("reader", ["native", "python"])
def test_the_identity_of_an_input_of_combining_marks_takes_time_linear_in_it(
    reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if reader == "python":
        monkeypatch.setattr(native, "READER", None)
    else:
        require_compiled_reader()
    # What ingest calls for each posted `input` (scoring._input_hash). 1,000 and 10,000
    # characters: 10 times as long when linear, about 100 times now.
    assert_grows_linearly(
        lambda text: input_hash(KEY, {"text": text}),
        _marks(1_000),
        _marks(10_000),
        "input_hash of combining marks",
        small_calls=10,
    )


# --- task configs: YAML aliases expanded without bound -----------------------------------


def _alias_bomb(levels: int, leaf: str) -> str:
    """A config whose one list of labels is `levels` levels of ten aliases each: 10**levels
    copies of `leaf` once expanded, from a text of a few hundred bytes."""
    lines = ["l0: &l0 [" + ", ".join([f'"{leaf}"'] * 10) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    lines += ["task: laughs", f"comparator: {{kind: label, labels: [*l{levels - 1}]}}"]
    return "\n".join(lines) + "\n"


# 2.3 KB of YAML holding 10**5 labels of 200 characters: more than 20 MB once expanded, past
# the 16 MiB a JSON config may take (SHADOWPLANE_MAX_BODY_BYTES). Nine levels of one
# character (the same shape, about 600 bytes) held a live API for 51 s.
BOMB = _alias_bomb(5, "x" * 200)


def test_a_yaml_config_whose_aliases_expand_past_the_body_limit_is_refused_for_them() -> None:
    assert len(BOMB.encode()) < 3_000
    with pytest.raises(ConfigError) as refused:
        read_documents(BOMB, yaml_text=True)
    message = " ".join(refused.value.errors)
    assert "alias" in message or "anchor" in message, message


def test_the_api_refuses_a_yaml_config_for_its_aliases(pg_api: Api) -> None:
    response = pg_api.client.post(
        "/v1/tasks",
        content=BOMB.encode(),
        headers={**pg_api.headers("admin"), "Content-Type": "application/yaml"},
    )
    assert response.status_code == 422, response.text[:300]
    detail = " ".join(response.json()["detail"])
    assert "alias" in detail or "anchor" in detail, detail[:300]


# --- Content-Encoding ----------------------------------------------------------------------


def test_a_gzip_encoded_batch_is_refused_naming_its_content_encoding(pg_api: Api) -> None:
    body = gzip.compress(orjson.dumps({"results": [make_result()]}))
    response = pg_api.client.post(
        "/v1/results",
        content=body,
        headers={
            **pg_api.headers("ingest"),
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
    )
    # RFC 9110 15.5.16: 415 for a content coding the server does not take, naming it.
    assert response.status_code == 415, response.text[:300]
    assert response.json()["detail"][0].startswith("content-encoding: 'gzip' is not read")
    # Plain JSON labelled gzip was stored as if the label were not there: refused alike,
    # before its key is looked at; identity is what no coding means.
    plain = orjson.dumps({"results": [make_result()]})
    for headers, status in (
        ({"Content-Encoding": "gzip"}, 415),
        ({"Content-Encoding": "br", "Authorization": "Bearer nope"}, 415),
        ({"Content-Encoding": "Identity"}, 200),
    ):
        answer = pg_api.client.post(
            "/v1/results",
            content=plain,
            headers={**pg_api.headers("ingest"), "Content-Type": "application/json", **headers},
        )
        assert answer.status_code == status, (headers, answer.text[:300])


# --- a result's `ts`: the reason of a field out of range -----------------------------------

# The same texts in a query parameter are refused with their reason (controlplane.timeutil:
# "hour 24 is past 23 (midnight is 00:00 of the next day)", "minute 61 is past 59", "the
# offset +24:00 is past ±23:59"). In a result's `ts`, pydantic's parser answers "Input
# should be a valid datetime or date, unexpected extra characters at the end of the input":
# there are none, and a date alone is no `ts` either.
OUT_OF_RANGE = {
    "2026-11-30T24:00:00Z": "hour 24",
    "2026-11-30T02:61:00Z": "minute 61",
    "2026-11-30T02:00:99Z": "second 99",
    "2026-11-30T02:00:00+24:00": "+24:00",
    # What a query takes but storage cannot: said so, not "extra characters" either.
    "2026-11-30T23:59:60Z": "a leap second",
    "0000-01-01T00:00:00Z": "year 0000",
    "2026-02-29T00:00:00Z": "February 2026 has 28 days",
}


def test_a_ts_out_of_range_is_rejected_naming_what_is_out_of_range(pg_api: Api) -> None:
    texts = list(OUT_OF_RANGE)
    response = pg_api.post_results({"results": [make_result(ts=ts) for ts in texts]})
    assert response.status_code == 200, response.text[:300]
    rejected = response.json()["rejected"]
    assert [r["index"] for r in rejected] == list(range(len(texts))), rejected
    for item in rejected:
        error, named = item["error"], OUT_OF_RANGE[texts[item["index"]]]
        assert error.startswith("ts: "), error
        assert "extra characters" not in error, error
        assert named in error.split("(got", 1)[0], error
