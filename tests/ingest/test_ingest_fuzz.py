"""Whatever a client sends, ingest answers it (200 with every item accounted for, 422 for a
body that is not a result) and never fails with a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Api, make_api, make_result

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = [
    "request_id",
    "task",
    "ts",
    "session_id",
    "user_id",
    "input_tokens",
    "decision",
    "served",
    "degraded",
    "degrade_reason",
    "flag_version",
    "input",
    "edge",
    "cloud",
    "skipped",
]


@st.composite
def mangled_results(draw: st.DrawFn) -> dict[str, Any]:
    """A valid result with some fields replaced by arbitrary JSON or removed."""
    result = make_result(request_id=draw(st.text(min_size=1, max_size=12)))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        if draw(st.booleans()):
            result.pop(name, None)
        else:
            result[name] = draw(json_values)
    if draw(st.booleans()):
        result["edge"] = {
            k: draw(json_values)
            for k in draw(
                st.lists(
                    st.sampled_from(
                        ["output", "error", "latency_ms", "confidence", "valid", "cost"]
                    ),
                    max_size=3,
                    unique=True,
                )
            )
        }
    return result


@pytest.fixture(scope="module")
def module_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    from controlplane.migrate import upgrade

    path: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    upgrade(f"sqlite:///{path}")
    yield from make_api(f"sqlite:///{path}")


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(mangled_results(), min_size=1, max_size=5))
def test_mangled_batches_are_answered_item_by_item(
    module_api: Api, items: list[dict[str, Any]]
) -> None:
    response = module_api.post_results({"results": items})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["accepted"] + report["duplicates"] + len(report["rejected"]) == len(items)
    for rejected in report["rejected"]:
        assert ":" in rejected["error"], rejected  # names the field (or "(result)")


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(json_values)
def test_any_json_body_gets_200_or_422(module_api: Api, body: Any) -> None:
    response = module_api.post_results(body)
    assert response.status_code in (200, 422), response.text
