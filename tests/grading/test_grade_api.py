"""GET /v1/tasks/{task}/grade and GET /v1/grades (read scope): the grade of today, computed
on demand and kept, in the shape OpenAPI shows; 401, 403 (a review key too), 404."""

from __future__ import annotations

import random
from datetime import timedelta

from sqlalchemy import select, update

from controlplane.catalog.service import no_task
from controlplane.db import session_scope
from controlplane.grading.schemas import GradeOut, GradesOut
from controlplane.models import Task, TaskConfigVersion, TaskGrade
from controlplane.models.base import utcnow
from tests.conftest import Api
from tests.grading.test_service import Row, add_windows


def traffic(api: Api, task: str, hours: int = 30) -> int:
    """Windows over the last `hours` for the task (its config dated a month back); the
    results they hold."""
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    rng = random.Random(hours)
    rows = [
        Row(
            start=now - timedelta(hours=h),
            version=1,
            n=rng.randrange(50, 90),
            p50=float(rng.randrange(100, 200)),
            p95=float(rng.randrange(300, 900)),
            tokens=float(rng.randrange(9000, 20000)),
            pairs=5,
            agree=5,
        )
        for h in range(1, hours + 1)
    ]
    with session_scope(api.engine) as session:
        task_id = session.scalar(select(Task.id).where(Task.name == task))
        assert task_id is not None
        session.execute(
            update(TaskConfigVersion)
            .where(TaskConfigVersion.task_id == task_id)
            .values(created_at=now - timedelta(days=30))
        )
    add_windows(api.engine, task_id, rows)
    return sum(r.n for r in rows)


def test_a_tasks_grade_is_computed_kept_and_answered_in_the_documented_shape(api: Api) -> None:
    results = traffic(api, "ticket_classify")
    before = utcnow().date()
    response = api.client.get("/v1/tasks/ticket_classify/grade", headers=api.headers("read"))
    assert response.status_code == 200, response.text
    body = response.json()
    after = utcnow().date()
    shaped = GradeOut.model_validate(body)
    assert shaped.task == "ticket_classify" and shaped.span.results == results
    assert shaped.span.repeat_pairs == 5 * 30
    with session_scope(api.engine) as session:
        kept = session.scalars(select(TaskGrade)).all()
    assert len(kept) == 1 and kept[0].day in {before, after}
    assert (kept[0].tier, kept[0].document) == (body["tier"], body)

    # The same day: the kept grade, not another computation.
    again = api.client.get("/v1/tasks/ticket_classify/grade", headers=api.headers("admin"))
    assert again.status_code == 200 and again.json() == body


def test_every_tasks_grade(api: Api) -> None:
    results = traffic(api, "invoice_extract", hours=10)
    response = api.client.get("/v1/grades", headers=api.headers("read"))
    assert response.status_code == 200, response.text
    grades = GradesOut.model_validate(response.json()).grades
    assert [g.task for g in grades] == ["invoice_extract", "ticket_classify"]
    assert [g.span.results for g in grades] == [results, 0]
    assert grades[1].tier == "insufficient" and grades[1].missing
    with session_scope(api.engine) as session:
        assert len(session.scalars(select(TaskGrade)).all()) == 2
    # Once kept, the task's own endpoint answers the same document.
    one = api.client.get("/v1/tasks/invoice_extract/grade", headers=api.headers("read"))
    assert one.json() == response.json()["grades"][0]


def test_grades_need_a_read_key_and_a_known_task_and_show_their_shape(api: Api) -> None:
    for path in ("/v1/tasks/ticket_classify/grade", "/v1/grades"):
        assert api.client.get(path).status_code == 401
        for scope in ("review", "ingest", "flags:read"):
            refused = api.client.get(path, headers=api.headers(scope))
            assert refused.status_code == 403, (path, scope)
    missing = api.client.get("/v1/tasks/no_such_task/grade", headers=api.headers("read"))
    assert missing.status_code == 404
    assert missing.json() == {"detail": no_task("no_such_task")}

    # OpenAPI shows the shape.
    schema = api.client.get("/openapi.json").json()
    for path, model in (("/v1/tasks/{task}/grade", "GradeOut"), ("/v1/grades", "GradesOut")):
        answer = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        assert answer["schema"] == {"$ref": f"#/components/schemas/{model}"}
    dimensions = schema["components"]["schemas"]["DimensionsOut"]["properties"]
    assert set(dimensions) == {"input_length", "determinism", "error_cost", "frequency"}
