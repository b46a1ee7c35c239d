"""What the API's path and query parameters are, as the database stores them and the body
guard lets them through: one type per kind, so the OpenAPI document states each bound and
FastAPI refuses a value past it with a 422 naming the parameter, before any query."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BeforeValidator, WithJsonSchema

# The largest value of an INTEGER column (alerts, decisions, tasks) and of a BIGINT one
# (review items, eval items' order). PostgreSQL refuses to compare a column with a larger
# number, so a larger id is refused here, as the parameter it is.
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1


def _id_text(value: Any) -> Any:
    """An id as a path spells an integer (OpenAPI's simple style): digits, the first not 0.
    pydantic alone reads `1.0`, `+1`, `01` and ` 1` as 1."""
    if isinstance(value, str) and not _ID_TEXT.fullmatch(value):
        raise ValueError(
            "not an integer as a path writes one: digits alone (no sign, point, space or leading 0)"
        )
    return value


_ID_TEXT = re.compile("0|[1-9][0-9]*")


Int4Id = Annotated[
    int,
    Path(ge=1, le=INT4_MAX, description="An id (a 32-bit column)."),
    BeforeValidator(_id_text),
]
Int8Id = Annotated[
    int,
    Path(ge=1, le=INT8_MAX, description="An id (a 64-bit column)."),
    BeforeValidator(_id_text),
]

# A task's name as a config may give it (controlplane.catalog.schemas.TASK_NAME, which
# tests/api/test_contract.py holds to the same rule): anything else names no task.
TASK_NAME_PATTERN = r"^[a-z][a-z0-9_.-]{0,99}$"
TaskName = Annotated[str, Path(pattern=TASK_NAME_PATTERN, description="The task's name.")]
TaskFilter = Annotated[
    str | None, Query(pattern=TASK_NAME_PATTERN, description="Only this task's entries.")
]

# Text the body guard lets through: no NUL (controlplane.http.BodyGuard refuses `%00` in a
# query and `\u0000` in a JSON body, since PostgreSQL cannot hold it in text).
NO_NUL_PATTERN = "^[^\\u0000]*$"


def text_filter(max_length: int, description: str) -> Any:
    """A free-text query parameter of at most `max_length` characters."""
    return Query(pattern=NO_NUL_PATTERN, max_length=max_length, description=description)


# Any JSON value a body may carry (an output, a correction): the document names it
# `JsonValue`, JSON whose strings and keys hold no NUL. controlplane.api puts that schema
# where the mark is (pydantic takes no reference to a schema it does not hold).
JSON_VALUE_REF = "#/components/schemas/JsonValue"
JSON_VALUE_MARK = "x-json-value"
JsonValue = Annotated[Any, WithJsonSchema({JSON_VALUE_MARK: True})]
