"""Every metric `/metrics` can export is documented by name in docs/operations.md.

The names come from the exporter itself: a scrape of `/metrics` (every family is written,
with or without samples) with the ingest counters readable, so the counter family is in
it too; and every `shadowplane_*` name the exporter's source spells out must be among
them, so a family written only on some path cannot slip past.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import exporter
from tests.conftest import Api, make_api

DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


@pytest.fixture
def sqlite_api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def exported_names(api: Api) -> set[str]:
    response = api.client.get("/metrics", headers=api.headers("read"))
    assert response.status_code == 200, response.text
    names = {line.split()[2] for line in response.text.splitlines() if line.startswith("# TYPE ")}
    # The scrape is complete: the counters were readable, the window fields are there.
    assert "shadowplane_ingest_counters_up 1.0" in response.text
    assert {"shadowplane_ingest_results_total", "shadowplane_window_agreement_low"} <= names
    spelled = set(re.findall(r"\"(shadowplane_[a-z0-9_]+)\"", Path(exporter.__file__).read_text()))
    missing = {n for n in spelled if n not in names and f"{n}_total" not in names}
    assert not missing, f"the exporter names families the scrape did not show: {missing}"
    assert len(names) > 60
    return names


def test_every_exported_metric_name_is_in_the_operations_doc(sqlite_api: Api) -> None:
    text = DOC.read_text(encoding="utf-8")
    undocumented = sorted(
        name
        for name in exported_names(sqlite_api)
        if not re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text)
    )
    assert not undocumented, f"docs/operations.md does not name: {', '.join(undocumented)}"
