"""The wheel is the whole product: built from the repository's tracked files alone (what a
fresh clone holds), installed (not editable) into a fresh venv outside the checkout, it
sets up a database, registers an example task, serves the API with the compiled text
reader, takes results, runs a pass and answers flags, with nothing read from the checkout.

About 40 s: the wheel's build compiles the text reader, the venv installs the
dependencies from pip's cache (filled by scripts/test's own install)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.liveapi import ROOT, free_port, wait_until

pytestmark = pytest.mark.integration

TRACKED_ONLY = "the wheel is built from the tracked files, as a fresh clone has them"


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel` of a copy of the repository's tracked files (no build/, no .so, no
    untracked file can make it pass)."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    tracked = _run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    out = base / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)])
    (built,) = out.glob("shadowplane-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its dependencies installed, nothing of the checkout."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", str(home)])
    _run([str(home / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)])
    return home


def test_the_wheel_is_binary_and_carries_what_a_deployment_needs(wheel: Path) -> None:
    # A platform wheel (the compiled reader inside), with the migrations and the examples.
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("_counts", "_numbers", "_spans", "_mask", "_normal"):
        assert any(
            n.startswith(f"controlplane/compare/{module}.") and n.endswith(".so") for n in names
        ), module
    versions = sorted(
        p.name for p in (ROOT / "controlplane" / "migrations" / "versions").glob("*.py")
    )
    assert versions and all(f"controlplane/migrations/versions/{v}" in names for v in versions)
    assert {"controlplane/migrations/env.py", "controlplane/migrations/script.py.mako"} <= set(
        names
    )
    examples = sorted(
        p.name for p in (ROOT / "controlplane" / "catalog" / "example_tasks").glob("*.yaml")
    )
    assert len(examples) >= 3 and all(
        f"controlplane/catalog/example_tasks/{e}" in names for e in examples
    )
    # Sources stay out of it: the wheel is what runs.
    assert not [n for n in names if n.endswith((".pyx", ".pxi", ".c"))]


@pytest.fixture
def outside(venv: Path, tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A folder outside the checkout and the environment `shadowplane` runs in there."""
    assert ROOT not in tmp_path.parents
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHADOWPLANE_", "PYTHON"))}
    env.update(
        {
            "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}",
            "SHADOWPLANE_DATABASE_URL": f"sqlite:///{tmp_path / 'shadowplane.db'}",
            # The compiled reader or an error naming why it is not there.
            "SHADOWPLANE_TEXT_READER": "native",
            "SHADOWPLANE_LOG_LEVEL": "WARNING",
        }
    )
    yield tmp_path, env


def test_the_installed_wheel_runs_the_loop_outside_the_checkout(
    venv: Path, outside: tuple[Path, dict[str, str]]
) -> None:
    here, env = outside
    cli = str(venv / "bin" / "shadowplane")

    def sp(*args: str) -> str:
        return _run([cli, *args], cwd=here, env=env).stdout

    # Imported from the venv, not the checkout.
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import controlplane; print(controlplane.__file__)"],
        cwd=here,
        env=env,
    ).stdout.strip()
    assert where.startswith(str(venv)) and not where.startswith(str(ROOT)), where

    sp("migrate")
    admin = sp("keys", "create", "--name", "ops", "--scope", "admin").strip().splitlines()[-1]
    router = sp("keys", "create", "--name", "router", "--scope", "ingest", "--scope", "flags:read")
    router = router.strip().splitlines()[-1]
    assert set(sp("tasks", "example").split()) >= {"ticket_classify", "reply_rewrite"}
    (here / "ticket.yaml").write_text(sp("tasks", "example", "ticket_classify"))
    assert "ticket_classify: created" in sp("tasks", "apply", "-f", "ticket.yaml")
    # The eval set line's schema, as the repository holds it.
    assert sp("evalset", "schema") == (ROOT / "evalsets" / "schema.json").read_text()

    port = free_port()
    log = (here / "api.log").open("w")
    api = subprocess.Popen(
        [cli, "api", "--port", str(port)],
        cwd=here,
        env={**env, "SHADOWPLANE_TICK_SECONDS": "0"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10) as client:

            def ready() -> bool:
                assert api.poll() is None, (here / "api.log").read_text()
                try:
                    return client.get("/readyz").status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(ready, "the installed API to answer /readyz", timeout=60, every=0.1)
            results = [
                {
                    "request_id": f"w-{i}",
                    "task": "ticket_classify",
                    "input_tokens": 90,
                    "decision": "edge",
                    "served": "edge",
                    "edge": {"output": "refund"},
                    "cloud": {"output": "refund" if i % 2 else "complaint"},
                }
                for i in range(6)
            ]
            router_auth = {"Authorization": f"Bearer {router}"}
            sent = client.post("/v1/results", json={"results": results}, headers=router_auth)
            assert sent.status_code == 200, sent.text
            assert sent.json()["accepted"] == 6
            sp("tick")
            flags = client.get("/v1/flags", headers=router_auth)
            assert flags.status_code == 200, flags.text
            flag = flags.json()["flags"]["ticket_classify"]
            # Registered in shadow: the cloud serves, the edge runs beside it.
            assert (flag["stage"], flag["edge_percent"]) == ("shadow", 0)
            admin_auth = {"Authorization": f"Bearer {admin}"}
            windows = client.get("/v1/tasks/ticket_classify/windows", headers=admin_auth)
            assert windows.status_code == 200, windows.text
            metrics = client.get("/metrics", headers=admin_auth)
            assert metrics.status_code == 200, metrics.text
            families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
            [reader] = families["shadowplane_native_reader"].samples
            assert reader.value == 1
    finally:
        api.terminate()
        api.wait(timeout=30)
        log.close()
