"""The Dockerfile and deploy/compose.yaml stay consistent with the code and the README: every
`SHADOWPLANE_*` they set is a setting; every setting the README's production section has a
deployment set (its exports, and the settings it calls required) is in the compose file for
every Shadowplane process; each process runs a command the CLI has, on the one image, after
the migration and the servers are healthy; the image runs as a user, checks the API's
/healthz, and takes the package index's certificate only as a build secret.

Building and running the image is scripts/test-image (minutes, not part of the suite)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from controlplane.cli import app
from controlplane.settings import Settings
from tests.liveapi import ROOT
from tests.test_readme_production import production_section
from tests.test_readme_settings import readme_settings

DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "deploy" / "compose.yaml"
# The compose services that run the image, and the command each runs.
PROCESSES = {
    "migrate": "migrate",
    "api": "api",
    "worker": "worker",
    "beat": "beat",
    "dashboard": "dashboard",
}
SETTING = re.compile(r"\bSHADOWPLANE_[A-Z0-9_]+\b")


def settings_names() -> set[str]:
    """The settings' variables, and those the README's settings table documents beside them
    (SHADOWPLANE_TEXT_READER is read where the reader loads)."""
    fields = {f"SHADOWPLANE_{name.upper()}" for name in Settings.model_fields}
    return fields | set(readme_settings())


def required_in_production() -> set[str]:
    """What the production section has a deployment set: its `export`s, and the settings
    its table calls required (when their condition holds, as compose leaves to the user)."""
    section = production_section()
    exported = set(re.findall(r"^export (SHADOWPLANE_[A-Z0-9_]+)=", section, re.M))
    required = {
        name
        for row in section.splitlines()
        if row.startswith("| `SHADOWPLANE_") and "required" in row.lower()
        for name in SETTING.findall(row.split("|")[1])
    }
    return exported | required


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def test_every_setting_the_files_name_is_a_setting() -> None:
    known = settings_names()
    for path in (DOCKERFILE, COMPOSE):
        named = set(SETTING.findall(path.read_text(encoding="utf-8")))
        assert named <= known, (path.name, sorted(named - known))
        assert named or path == DOCKERFILE  # the image sets none: the deployment does


def test_the_production_settings_are_set_for_every_process(compose: dict[str, Any]) -> None:
    required = required_in_production()
    # The two servers are exported; the webhook secret is the table's required one.
    assert {"SHADOWPLANE_DATABASE_URL", "SHADOWPLANE_REDIS_URL"} <= required, required
    assert "SHADOWPLANE_WEBHOOK_SECRET" in required, required
    assert required <= settings_names(), sorted(required - settings_names())
    for name in PROCESSES:
        environment = compose["services"][name]["environment"]
        assert required <= set(environment), (name, sorted(required - set(environment)))


def test_each_process_runs_a_cli_command_on_the_one_image_after_the_migration(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    commands = set(get_command(app).commands)  # type: ignore[attr-defined]
    images = {services[name]["image"] for name in PROCESSES}
    assert len(images) == 1, images
    for name, command in PROCESSES.items():
        service = services[name]
        assert service["command"][0] == command and command in commands, (name, service["command"])
        needs = service["depends_on"]
        assert needs["postgres"] == {"condition": "service_healthy"}, name
        if name == "migrate":
            assert service["restart"] == "no" and "redis" not in needs
            continue
        assert needs["redis"] == {"condition": "service_healthy"}, name
        assert needs["migrate"] == {"condition": "service_completed_successfully"}, name
    for server in ("postgres", "redis"):
        assert services[server]["healthcheck"]["test"], server
    # Data in named volumes: the database, the broker's queue, beat's schedule.
    assert set(compose["volumes"]) == {"postgres", "redis", "beat"}
    mounts = {m.split(":")[0] for s in services.values() for m in s.get("volumes", [])}
    assert mounts == set(compose["volumes"]), mounts
    # Exactly one beat; the API and the dashboard published on the ports the image exposes.
    assert [n for n, s in services.items() if s.get("command", [None])[0] == "beat"] == ["beat"]
    exposed = set(re.findall(r"^EXPOSE (.+)$", DOCKERFILE.read_text(), re.M)[0].split())
    published = {p.split(":")[-1] for s in services.values() for p in s.get("ports", [])}
    assert published == exposed, (published, exposed)
    for name, port in (("api", "8000"), ("dashboard", "8501")):
        assert port in services[name]["command"], name


def test_the_dockerfile_builds_on_arguments_and_runs_as_a_user_with_a_health_check() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))
    # The official Python slim image by default, both stages replaceable.
    assert args["BUILD_IMAGE"].startswith("python:3.11-slim"), args
    assert args["RUNTIME_IMAGE"].startswith("python:3.11-slim"), args
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    assert stages == ["${BUILD_IMAGE}", "${RUNTIME_IMAGE}"], stages
    runtime = text.split("\nFROM ${RUNTIME_IMAGE}", 1)[1]
    user = re.findall(r"^USER (\S+)$", runtime, re.M)
    assert user and user[-1] not in ("root", "0"), user
    assert re.search(r"^ENTRYPOINT \[\"shadowplane\"\]$", runtime, re.M)
    [health] = re.findall(r"^HEALTHCHECK .*?CMD (\[.*?\])$", runtime, re.M | re.S)
    assert health == '["python3", "/opt/shadowplane/healthcheck.py"]', health
    assert "COPY deploy/healthcheck.py /opt/shadowplane/healthcheck.py" in runtime
    # The certificate is a secret of the build stage, never copied into a layer.
    assert "--mount=type=secret,id=pip_cert" in text
    assert "pip_cert" not in runtime and not re.search(r"^(COPY|ADD) .*cert", text, re.M | re.I)
    # The runtime installs the wheels with no index, from the build stage's mount.
    assert "--no-index" in runtime and "from=build" in runtime


def test_the_readme_says_how_to_build_and_try_the_image() -> None:
    section = production_section()
    assert "docker build" in section and "deploy/compose.yaml" in section
    assert re.search(r"`scripts/test-image`[^.]*\babout \d+ minutes?", section), section
    assert "git clone" not in section.split("### ", 1)[0]


def test_the_image_tree_is_what_the_build_reads(tmp_path: Path) -> None:
    # .dockerignore lets in what the Dockerfile copies, and no build output.
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    copied = set()
    for sources in re.findall(r"^COPY (?!--from)(.+?) \S+$", DOCKERFILE.read_text(), re.M):
        copied |= set(sources.split())
    assert copied == allowed, (copied, allowed)
    assert "**/*.so" in ignore and "*" in ignore
