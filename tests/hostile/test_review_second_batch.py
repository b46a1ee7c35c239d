"""Hostile review of 97e7f0e, 7706c21, b415529/dc57d84, 47baf12 and 96aa97b/c8454c2 (as a
key holder, a router author, an SRE). Each test here was a strict xfail naming a defect
found in this review, and is a plain test since it was fixed (the stream-safe cut counts in
each character's NFKD, as UAX #15 does; the YAML bound holds for the whole body; every
Content-Encoding header is read; Retry-After's asctime date is GMT).

- The stream-safe cut (97e7f0e) counts the non-starters a character *begins* with, not
  those its decomposition ends with, as UAX #15 does: "a" + 31 U+0301 and its NFC ("á" +
  30 U+0301), one text to NFKC, get two identities (the first is cut, the second not).
- The 16 MiB bound on a YAML config's aliases (7706c21) holds per document: a body of
  several documents, each under it, is expanded whole (every document through the JSON
  round trip) before anything counts them; POST /v1/tasks refuses more than one document
  only after read_documents has expanded them all.
- The body guard (b415529) reads the last Content-Encoding header only: a gzip body sent
  with `Content-Encoding: gzip` and then `Content-Encoding: identity` (RFC 9110: codings
  in the order applied) passes as if plain, and gets the old 'not valid JSON' answer.
- Retry-After (c8454c2) as an HTTP-date in asctime form (RFC 9110 5.6.7: a recipient MUST
  accept all three forms) is read as neither form.
"""

from __future__ import annotations

import gzip
import unicodedata
from collections.abc import Callable

import orjson
import pytest

from controlplane.catalog.schemas import MAX_EXPANDED_BYTES, ConfigError, read_documents
from controlplane.client.retryafter import retry_after_seconds
from controlplane.compare.fingerprint import normalise_text_python
from tests.conftest import Api, make_result
from tests.ingest.native_support import native

# --- an input's identity: the stream-safe cut --------------------------------------------


@pytest.mark.parametrize("compiled", [True, False], ids=["native", "python"])
def test_canonically_equivalent_inputs_share_an_identity_past_thirty_marks(
    compiled: bool,
) -> None:
    reader: Callable[[str], str] = native("_normal").normal if compiled else normalise_text_python
    decomposed = "a" + "\u0301" * 31
    composed = unicodedata.normalize("NFC", decomposed)  # "á" + 30 U+0301
    assert unicodedata.normalize("NFKC", decomposed) == unicodedata.normalize("NFKC", composed)
    assert reader(decomposed) == reader(composed)


# --- YAML aliases: the bound is per document -----------------------------------------------


def _document(tag: int) -> str:
    """A document of about 700 bytes whose aliases stand for about 5 MiB of JSON."""
    text = f"{tag}" + "x" * 10_000
    return (
        f"s: &s {text}\n"
        "a: &a [*s, *s, *s, *s, *s, *s, *s, *s]\n"
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: [*b, *b, *b, *b, *b, *b, *b, *b]\n"
    )


def test_a_yaml_body_whose_documents_together_expand_past_the_bound_is_refused() -> None:
    one = len(orjson.dumps(read_documents(_document(0), yaml_text=True)[0]))
    assert one < MAX_EXPANDED_BYTES < 4 * one  # each alone within the bound, together past it
    body = "---\n".join(_document(i) for i in range(4))
    with pytest.raises(ConfigError, match="expand"):
        read_documents(body, yaml_text=True)


# --- Content-Encoding: one header read of several -----------------------------------------


def test_a_gzip_body_under_two_content_encoding_headers_is_refused(api: Api) -> None:
    body = gzip.compress(orjson.dumps({"results": [make_result()]}))
    headers = [
        *api.headers("ingest").items(),
        ("Content-Type", "application/json"),
        ("Content-Encoding", "gzip"),
        ("Content-Encoding", "identity"),
    ]
    response = api.client.post("/v1/results", content=body, headers=headers)
    assert response.status_code == 415, response.text[:300]


# --- Retry-After as an HTTP-date -------------------------------------------------------------


def test_retry_after_reads_an_asctime_http_date() -> None:
    now = 1_796_670_000.0  # Mon, 07 Dec 2026 19:00:00 GMT
    for value in ("Mon, 07 Dec 2026 19:02:00 GMT", "Mon Dec  7 19:02:00 2026"):
        assert retry_after_seconds(value, limit=86_400, now=lambda: now) == 120.0, value
