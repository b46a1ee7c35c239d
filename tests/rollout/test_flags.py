"""Routing flags: derived from stage and config, versioned per task, one global revision, ETag."""

from __future__ import annotations

from controlplane.catalog.schemas import parse_config
from controlplane.rollout.flags import derive
from tests.conftest import INVOICE_TASK, TICKET_TASK, Api

CONFIG = parse_config({**TICKET_TASK, "shadow_rate": 0.5, "max_input_tokens": 512})


def test_the_flag_follows_the_stage_table() -> None:
    assert derive("cloud", 0, CONFIG, False) == {
        "stage": "cloud",
        "edge_percent": 0,
        "sticky_by": "session",
        "max_input_tokens": 512,
        "shadow_rate": 0.0,
        "killed": False,
        "default_route": "cloud",
    }
    assert (
        derive("shadow", 0, CONFIG, False)["edge_percent"],
        derive("shadow", 0, CONFIG, False)["shadow_rate"],
    ) == (0, 0.5)
    assert derive("canary", 0, CONFIG, False)["edge_percent"] == 5
    assert derive("canary", 1, CONFIG, False)["edge_percent"] == 25
    assert derive("full", 0, CONFIG, False)["edge_percent"] == 100
    assert derive("rolled_back", 0, CONFIG, False)["edge_percent"] == 0
    killed = derive("full", 0, CONFIG, True)
    assert (killed["killed"], killed["edge_percent"], killed["shadow_rate"], killed["stage"]) == (
        True,
        0,
        0.0,
        "full",
    )


def test_flags_are_published_with_versions_a_revision_and_an_etag(api: Api) -> None:
    read = api.headers("flags:read")
    first = api.client.get("/v1/flags", headers=read)
    assert first.status_code == 200
    body = first.json()
    assert body["revision"] == 2 and set(body["flags"]) == {"ticket_classify", "invoice_extract"}
    flag = body["flags"]["ticket_classify"]
    assert flag["version"] == 1 and flag["stage"] == "shadow" and flag["edge_percent"] == 0
    assert (
        flag["shadow_rate"] == 1.0 and flag["default_route"] == "cloud" and flag["killed"] is False
    )
    assert flag["reason"] == "task created in shadow"
    tag = first.headers["etag"]
    assert api.client.get("/v1/flags", headers={**read, "If-None-Match": tag}).status_code == 304

    # A config change that leaves routing alone leaves the flag alone...
    assert (
        api.client.post(
            "/v1/tasks", json={**TICKET_TASK, "window_seconds": 60}, headers=api.headers()
        ).status_code
        == 201
    )
    assert api.client.get("/v1/flags", headers={**read, "If-None-Match": tag}).status_code == 304
    # ...one that changes it is a new version, a new revision and a new ETag.
    assert (
        api.client.post(
            "/v1/tasks",
            json={**TICKET_TASK, "window_seconds": 60, "shadow_rate": 0.25},
            headers=api.headers(),
        ).status_code
        == 201
    )
    changed = api.client.get("/v1/flags", headers={**read, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["revision"] == 3
    one = api.client.get("/v1/flags/ticket_classify", headers=read).json()
    assert (one["version"], one["shadow_rate"], one["reason"]) == (2, 0.25, "config version 3")


def test_flag_reads_need_the_flags_scope_and_a_known_task(api: Api) -> None:
    assert api.client.get("/v1/flags").status_code == 401
    assert api.client.get("/v1/flags", headers=api.headers("ingest")).status_code == 403
    assert api.client.get("/v1/flags", headers=api.headers("admin")).status_code == 200
    missing = api.client.get("/v1/flags/nope", headers=api.headers("flags:read"))
    assert missing.status_code == 404 and "route to the cloud" in missing.text


def test_a_task_created_in_cloud_runs_nothing_beside_it(api: Api) -> None:
    api.client.post(
        "/v1/tasks", json={**INVOICE_TASK, "task": "cold", "stage": "cloud"}, headers=api.headers()
    )
    flag = api.client.get("/v1/flags/cold", headers=api.headers("flags:read")).json()
    assert (flag["stage"], flag["edge_percent"], flag["shadow_rate"]) == ("cloud", 0, 0.0)


def test_a_task_shows_its_flag_and_latest_closed_window(metrics_api: Api) -> None:
    from datetime import timedelta

    from controlplane.scheduler import run_pass
    from tests.conftest import make_result
    from tests.windowdata import LATENESS, T0, WINDOW, post_all

    post_all(metrics_api, [make_result(request_id=f"v-{i}", task="metrics_task") for i in range(4)])
    before = metrics_api.client.get(
        "/v1/tasks/metrics_task", headers=metrics_api.headers("read")
    ).json()
    assert before["flag"]["stage"] == "shadow" and before["latest_window"] is None
    run_pass(metrics_api.engine, T0 + timedelta(seconds=WINDOW + LATENESS))
    after = metrics_api.client.get(
        "/v1/tasks/metrics_task", headers=metrics_api.headers("read")
    ).json()
    assert after["latest_window"]["n_results"] == 4 and after["latest_window"]["agreement"] == 1.0
