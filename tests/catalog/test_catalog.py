"""POST/GET /v1/tasks and the config validator: versions, audit, errors naming field and value."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from controlplane.catalog.schemas import ConfigError, parse_config
from controlplane.models import AuditEntry
from tests.conftest import Api

BASE: dict[str, Any] = {
    "task": "reply_classify",
    "comparator": {"kind": "label", "labels": ["a", "b"]},
}


def post(api: Api, body: Any) -> Any:
    return api.client.post("/v1/tasks", json=body, headers=api.headers("admin"))


def test_identical_config_keeps_its_version_and_a_change_makes_a_new_one(api: Api) -> None:
    first = post(api, BASE)
    assert first.status_code == 201
    assert first.json()["version"] == 1 and first.json()["created"] is True
    assert first.json()["stage"] == "shadow"
    again = post(api, dict(BASE))
    assert again.status_code == 200
    assert again.json()["version"] == 1 and again.json()["changed"] is False
    # Spelling out a default is the same config.
    assert post(api, {**BASE, "window_seconds": 300}).json()["version"] == 1
    changed = post(api, {**BASE, "shadow_rate": 0.5})
    assert changed.status_code == 201
    assert changed.json()["version"] == 2 and changed.json()["created"] is False
    view = api.client.get("/v1/tasks/reply_classify", headers=api.headers("read")).json()
    assert view["version"] == 2 and view["config"]["shadow_rate"] == 0.5
    assert view["config"]["rollback"]["consecutive_windows"] == 3  # defaults are stored
    names = [
        t["task"] for t in api.client.get("/v1/tasks", headers=api.headers("read")).json()["tasks"]
    ]
    assert names == ["invoice_extract", "reply_classify", "ticket_classify"]


def test_every_change_is_audited_with_the_key_name(api: Api) -> None:
    post(api, BASE)
    post(api, BASE)
    post(api, {**BASE, "shadow_rate": 0.5})
    with api.engine.connect() as conn:
        rows = conn.execute(
            select(AuditEntry.actor, AuditEntry.action, AuditEntry.details)
            .where(AuditEntry.task == "reply_classify")
            .order_by(AuditEntry.id)
        ).all()
    assert [(r.actor, r.action, r.details["version"]) for r in rows] == [
        ("admin-key", "task.create", 1),
        ("admin-key", "task.config", 2),
    ]


def test_stage_applies_only_at_creation(api: Api) -> None:
    assert post(api, {**BASE, "stage": "cloud"}).json()["stage"] == "cloud"
    assert post(api, {**BASE, "stage": "shadow"}).json()["stage"] == "cloud"


def test_yaml_body(api: Api) -> None:
    body = "task: yaml_task\ncomparator: {kind: exact}\n"
    response = api.client.post(
        "/v1/tasks",
        content=body,
        headers={**api.headers("admin"), "Content-Type": "application/yaml"},
    )
    assert response.status_code == 201, response.text


def test_unknown_task_is_404(api: Api) -> None:
    assert api.client.get("/v1/tasks/nope", headers=api.headers("read")).status_code == 404


def test_bad_config_is_422_with_every_error(api: Api) -> None:
    response = post(api, {**BASE, "sticky_by": "device", "shadow_rate": 2})
    assert response.status_code == 422
    assert response.json()["detail"] == [
        "sticky_by: Input should be 'session' or 'user' (got \"device\")",
        "shadow_rate: Input should be less than or equal to 1 (got 2)",
    ]


# (config overrides, expected error) — each names the field, the value and what is allowed.
CONFIG_ERRORS: list[tuple[dict[str, Any], str]] = [
    (
        {"comparator": {"kind": "embedding"}},
        "comparator: unknown comparator kind 'embedding'; allowed: exact, json_fields, label, "
        "text_conservation",
    ),
    (
        {"comparator": {"kind": "text_conservation", "length_ratio": [1.4, 0.7]}},
        "comparator.length_ratio: must be [low, high] with low <= high, e.g. [0.7, 1.4]",
    ),
    (
        {"payload_policy": "some"},
        "payload_policy: Input should be 'full', 'redacted' or 'none' (got \"some\")",
    ),
    (
        {"comparator": {"kind": "json_fields", "fields": {"a": "numbr"}}},
        "comparator.fields.a: Input should be 'string', 'number', 'integer', 'boolean', 'array' or "
        "'object' (got \"numbr\")",
    ),
    (
        {"comparator": {"kind": "json_fields", "fields": {"a": "number"}, "required": ["b"]}},
        "comparator: required names ['b'] that are not in fields ['a']",
    ),
    (
        {"comparator": {"kind": "label", "labels": []}},
        "comparator.labels: must list at least one label, or be left out (got [])",
    ),
    (
        {"length_buckets": [512, 128]},
        "length_buckets: must be strictly increasing positive token counts (got [512,128])",
    ),
    (
        {"rollback": {"rules": [{"metric": "agreement", "op": "<", "threshold": 0.9}]}},
        "rollback.rules.0.op: Input should be '<=' or '>=' (got \"<\")",
    ),
    (
        {"task": "Bad Name"},
        "task: must start with a lowercase letter and hold only a-z, 0-9, '_', '.', '-' (at most 100 "
        'characters) (got "Bad Name")',
    ),
    ({"stage": "full"}, "stage: Input should be 'shadow' or 'cloud' (got \"full\")"),
    (
        {"windw_seconds": 60},
        "windw_seconds: unknown field; allowed here: alerts, allowed_lateness_seconds,",
    ),
    (
        {"comparator": {"kind": "label", "lables": ["a"]}},
        "comparator.lables: unknown field; allowed here: kind, labels",
    ),
    (
        {
            "rollback": {
                "rules": [{"metric": "agreement", "op": ">=", "threshold": 0.9, "scop": "all"}]
            }
        },
        "rollback.rules.0.scop: unknown field; allowed here: cap, class, confidence, critical, detector, h,",
    ),
    ({"comparator": None}, "comparator:"),
]


@pytest.mark.parametrize(
    ("override", "expected"), CONFIG_ERRORS, ids=[e[1][:40] for e in CONFIG_ERRORS]
)
def test_config_errors_name_field_value_and_allowed(
    override: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({**BASE, **override})
    assert any(e.startswith(expected) for e in caught.value.errors), caught.value.errors


def test_missing_required_fields() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({})
    assert caught.value.errors == ["task: field required", "comparator: field required"]
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_config(["task"])


def test_audit_log_is_readable_and_filterable(api: Api) -> None:
    post(api, BASE)
    post(api, {**BASE, "shadow_rate": 0.5})
    entries = api.client.get(
        "/v1/audit", params={"task": "reply_classify"}, headers=api.headers("read")
    ).json()["entries"]
    assert [(e["action"], e["actor"], e["details"]["version"]) for e in entries] == [
        ("task.config", "admin-key", 2),
        ("task.create", "admin-key", 1),
    ]
    by_test = api.client.get(
        "/v1/audit", params={"actor": "test"}, headers=api.headers("read")
    ).json()
    assert {e["action"] for e in by_test["entries"]} == {"key.create", "task.create"}
    future = api.client.get(
        "/v1/audit", params={"since": "2999-01-01T00:00:00Z"}, headers=api.headers("read")
    ).json()
    assert future["entries"] == []
    assert api.client.get("/v1/audit", headers=api.headers("ingest")).status_code == 403
    bad = api.client.get("/v1/audit", params={"limit": 0}, headers=api.headers("read"))
    assert bad.status_code == 422 and "limit" in bad.json()["detail"][0]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # Each answered 500 before: YAML can spell what JSON cannot.
        ('task: t\ncomparator: {kind: label, labels: ["a\\ud800"]}\n', "not plain JSON data"),
        ("task: t\ncomparator: {kind: exact}\nalerts: &a [*a]\n", "not plain JSON data"),
        (
            "task: t\ncomparator: {kind: exact}\nfixed_cost_per_day: " + "9" * 5000 + "\n",
            "fixed_cost_per_day: holds a number of more than 4300 digits",
        ),
        (
            "task: t\ncomparator: {kind: exact}\nfixed_cost_per_day: " + "9" * 30 + "\n",
            "fixed_cost_per_day: an integer beyond 64 bits",
        ),
        # YAML's own types, worded as JSON's ("Type is not JSON serializable: set").
        (
            "task: t\ncomparator: {kind: label, labels: !!set {a, b}}\n",
            "comparator.labels: a YAML set (!!set, or `? item` lines), which JSON has not",
        ),
        (
            "task: t\ncomparator: {kind: exact}\ndescription: !!binary aGk=\n",
            "description: binary data",
        ),
        (
            "task: t\ncomparator: {kind: exact}\nfixed_costs: {yes: 3}\n",
            "fixed_costs.True: a key YAML reads as bool True, not as a string: quote it",
        ),
        ("task: [unclosed\n", "not valid YAML"),
        ("---\ntask: a\n---\ntask: b\n", "2 documents"),
    ],
)
def test_a_yaml_body_that_is_not_plain_data_is_a_422(api: Api, body: str, reason: str) -> None:
    response = api.client.post(
        "/v1/tasks",
        content=body.encode("utf-8", "surrogatepass"),
        headers={**api.headers("admin"), "Content-Type": "application/yaml"},
    )
    assert response.status_code == 422, response.text
    assert reason in response.text
