"""The wheel is the whole product: built from the sdist of the repository's tracked files
alone (what a fresh clone holds), installed (not editable) into a fresh venv outside the checkout, it
sets up a database, registers an example task, serves the API with the compiled text
reader, takes results, runs a pass and answers flags, with nothing read from the checkout.

About 25 s of CPU: the wheel's build compiles the text reader. Without a compiler, the sdist
still builds, without the reader, and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
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
    return done


def make_build_env(base: Path) -> Path:
    """The build requirements the repository declares ([build-system] requires), installed
    once into a directory of their own for the sdist and the build without a compiler to
    share (each isolated build installs them again: about 3 s of CPU a build). Those two
    run with it on PYTHONPATH, in front of the suite's own packages; the wheel's build
    stays isolated (make_wheel), which proves the declared requirements are all a build
    needs."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(base), *declared])
    return base


def make_sdist(base: Path, build_env: Path) -> Path:
    """The sdist of a copy of the repository's tracked files (no build/, no .so, no
    untracked file can make it pass), built with the declared build requirements."""
    source = base / "src"
    tracked = _run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    # Without isolation, `build` checks the declared requirements are met (by build_env).
    argv = [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(base)]
    _run([*argv, str(source)], env={**os.environ, "PYTHONPATH": str(build_env)})
    (built,) = base.glob("shadowplane-*.tar.gz")
    return built


def make_wheel(sdist: Path, out: Path) -> Path:
    """The binary wheel `pip wheel` builds from the sdist, here, with a C compiler (without
    optimisation: CFLAGS come after Python's own -O3, and what is checked is the wheel's
    content and that it runs, compiled in a third of the time)."""
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(sdist)]
    _run(argv, env={**os.environ, "CFLAGS": "-O0"})
    (built,) = out.glob("shadowplane-*.whl")
    return built


def check_without_a_compiler(sdist: Path, build_env: Path, tmp_path: Path) -> None:
    """Without a compiler the sdist still builds (with the declared build requirements),
    without the reader, and says so."""
    env = {**os.environ, "CC": "/bin/false", "PYTHONPATH": str(build_env)}
    argv = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
        str(sdist),
    ]
    done = _run(argv, env=env)
    for module in ("_counts", "_numbers", "_spans", "_mask", "_normal"):
        assert (
            f'building extension "controlplane.compare.{module}" failed'
            in done.stdout + done.stderr
        )
    (built,) = tmp_path.glob("shadowplane-*.whl")
    with zipfile.ZipFile(built) as archive:
        names = archive.namelist()
        assert "controlplane/compare/conservation.py" in names
        assert not [n for n in names if n.endswith(".so")], names
        archive.extractall(tmp_path / "installed")
    # It reads with the Python reader: the unpacked wheel first on the path, so its modules,
    # not the repository's, are imported.
    installed = str(tmp_path / "installed")
    probe = (
        "import controlplane.compare.native as n, controlplane.compare.conservation as c;"
        f"assert n.__file__.startswith({installed!r}), n.__file__;"
        "print(n.ACTIVE, sorted(c.read('Hi John, not 3 apples.').spans))"
    )
    env = {**os.environ, "PYTHONPATH": installed, "SHADOWPLANE_TEXT_READER": "auto"}
    ran = _run([sys.executable, "-c", probe], cwd=tmp_path, env=env)
    assert ran.stdout.split() == ["False", "['John']"]


def make_venv(wheel: Path, home: Path) -> Path:
    """A fresh venv with the wheel installed, nothing of the checkout. Its dependencies are
    the suite's own, already installed: a path line after the venv's site-packages (their
    .pth files, the checkout's editable hook among them, are not read), and `pip check`
    holds the wheel's declared requirements against them. Resolving and installing them
    from the index is scripts/test-image's (the image installs the wheel with its
    dependencies, from wheels alone), a minute of CPU the suite does not repeat. The venv
    gets no pip of its own (ensurepip is about 5 s of CPU): the suite's pip installs into
    it and checks it (`pip --python`)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(home)])
    python = str(home / "bin" / "python")
    pip = [sys.executable, "-m", "pip", "--python", python]
    _run([*pip, "install", "-q", "--no-compile", "--no-deps", str(wheel)])
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    suite = sysconfig.get_paths()["purelib"]
    (Path(site.stdout.strip()) / "zz_suite_dependencies.pth").write_text(suite + "\n")
    _run([*pip, "check"])
    return home


def check_contents(wheel: Path) -> None:
    """A platform wheel, with the migrations and the examples, without sources."""
    # A platform wheel (the compiled reader inside), with the migrations and the examples.
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    built = sorted(n for n in names if n.endswith(".so"))
    assert [Path(n).name.split(".")[0] for n in built] == [
        "_counts",
        "_mask",
        "_normal",
        "_numbers",
        "_spans",
    ], built
    assert all(n.startswith("controlplane/compare/") for n in built), built
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
    # No top-level package another distribution may also install (a `dashboard` or a
    # `workers` of theirs would overwrite ours, or ours theirs).
    tops = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert tops == {"controlplane", "shadowplane_dashboard", "shadowplane_workers"}, tops


def test_the_wheel_is_the_whole_product(tmp_path: Path) -> None:
    # One test, in order: each step needs the one before (xdist would repeat a shared
    # fixture in each of its processes).
    build_env = make_build_env(tmp_path / "build-env")
    sdist = make_sdist(tmp_path / "sdist", build_env)
    check_without_a_compiler(sdist, build_env, tmp_path / "fallback")
    wheel = make_wheel(sdist, tmp_path / "wheel")
    check_contents(wheel)
    venv = make_venv(wheel, tmp_path / "venv")
    here = tmp_path / "outside"
    here.mkdir()
    assert ROOT not in here.parents
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHADOWPLANE_", "PYTHON"))}
    env.update(
        {
            "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}",
            "SHADOWPLANE_DATABASE_URL": f"sqlite:///{here / 'shadowplane.db'}",
            # The compiled reader or an error naming why it is not there.
            "SHADOWPLANE_TEXT_READER": "native",
            "SHADOWPLANE_LOG_LEVEL": "WARNING",
        }
    )
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
