"""The `shadowplane` command (DESIGN §1). Operators and scripts rely on these names."""

from __future__ import annotations

import getpass
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from controlplane.settings import get_settings

app = typer.Typer(
    help="Shadowplane: evidence-driven edge/cloud routing for LLM tasks.",
    no_args_is_help=True,
    add_completion=False,
)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
tasks_app = typer.Typer(help="Task configs.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(tasks_app, name="tasks")


def _actor() -> str:
    return f"cli:{getpass.getuser()}"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


@app.command()
def migrate() -> None:
    """Bring the database schema to the latest version (Alembic)."""
    from controlplane.migrate import upgrade

    url = get_settings().database_url
    upgrade(url)
    typer.echo(f"migrated {_safe_url(url)}")


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
) -> None:
    """Serve the HTTP API with uvicorn."""
    import uvicorn

    uvicorn.run(
        "controlplane.api:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,
        log_level="info",
    )


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="A name for the key (shown in logs and audit).")],
    scope: Annotated[
        list[str], typer.Option(help="ingest, flags:read, read, review or admin; repeatable.")
    ],
) -> None:
    """Create an API key; the key is printed once, alone on the last line."""
    from controlplane.auth.service import KeyCommandError, create_key
    from controlplane.db import get_engine, session_scope

    try:
        with session_scope(get_engine()) as session:
            key, plaintext = create_key(session, name=name, scopes=scope, actor=_actor())
    except KeyCommandError as exc:
        raise _fail(str(exc)) from None
    typer.echo(
        f"created key {key.name!r} with scopes {', '.join(key.scopes)}; it is shown only now:"
    )
    typer.echo(plaintext)


@keys_app.command("list")
def keys_list() -> None:
    """List keys (name, prefix, scopes, state); never the keys themselves."""
    from controlplane.auth.service import list_keys
    from controlplane.db import get_engine, session_scope

    with session_scope(get_engine()) as session:
        for key in list_keys(session):
            state = f"revoked {key.revoked_at:%Y-%m-%dT%H:%M:%SZ}" if key.revoked_at else "active"
            typer.echo(f"{key.name}\t{key.prefix}…\t{','.join(key.scopes)}\t{state}")


@keys_app.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="The key's name.")]) -> None:
    """Revoke a key; every API process stops accepting it within 5 seconds."""
    from controlplane.auth.service import KeyCommandError, revoke_key
    from controlplane.db import get_engine, session_scope

    try:
        with session_scope(get_engine()) as session:
            revoke_key(session, name=name, actor=_actor())
    except KeyCommandError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"revoked {name!r}")


@tasks_app.command("apply")
def tasks_apply(
    file: Annotated[
        Path, typer.Option("-f", "--file", help="Task config, YAML or JSON; '-' reads stdin.")
    ],
) -> None:
    """Register a task or give it a new config version."""
    from controlplane.catalog.schemas import ConfigError, read_documents
    from controlplane.catalog.service import apply_config
    from controlplane.db import get_engine, session_scope

    text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    try:
        documents = read_documents(text, yaml_text=True)  # JSON is YAML too
    except ConfigError as exc:
        raise _fail(f"{file}: " + "; ".join(exc.errors)) from None
    try:
        with session_scope(get_engine()) as session:
            applied = [apply_config(session, doc, actor=_actor()) for doc in documents]
    except ConfigError as exc:
        raise _fail(f"{file}: " + "\n  ".join(["config refused:", *exc.errors])) from None
    for a in applied:
        verdict = "created" if a.created else "new version" if a.changed else "unchanged"
        typer.echo(f"{a.task}: {verdict} (version {a.version}, stage {a.stage})")


@app.command()
def tick(
    now: Annotated[
        str | None,
        typer.Option(help="The pass's clock, ISO 8601 (default: now); the future is allowed."),
    ] = None,
) -> None:
    """One synchronous pass: compute due windows, close them, evaluate alerts."""
    from controlplane.db import get_engine
    from controlplane.scheduler import run_pass
    from controlplane.timeutil import as_utc

    clock = None
    if now is not None:
        try:
            clock = as_utc(datetime.fromisoformat(now))
        except ValueError:
            raise _fail(
                f"now: {now!r} is not an ISO 8601 time, e.g. 2026-11-30T02:00:00Z"
            ) from None
    report = run_pass(get_engine(get_settings().database_url), clock)
    typer.echo(
        f"pass at {report.now.isoformat()}: {len(report.windows)} windows "
        f"({report.count('computed')} open, {report.count('closed')} closed now, "
        f"{report.count('late')} late counts updated)"
    )
    for event in report.alerts:
        typer.echo(f"  alert {event.change}: {event.task} {event.kind}: {event.message}")
    for failure in report.failed:
        typer.echo(f"  ! {failure}", err=True)
    if report.failed:
        raise typer.Exit(1)


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="Worker processes.")] = 2,
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
) -> None:
    """Run a Celery worker for the periodic jobs (needs SHADOWPLANE_REDIS_URL)."""
    _need_redis()
    from workers.app import QUEUE
    from workers.app import app as celery

    celery.worker_main(
        ["worker", f"--loglevel={loglevel}", f"--concurrency={concurrency}", "-Q", QUEUE]
    )


@app.command()
def beat(
    schedule_file: Annotated[
        Path, typer.Option(help="Where beat keeps its last-run times.")
    ] = Path("celerybeat-schedule"),
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
) -> None:
    """Run Celery beat: queues the window plan every SHADOWPLANE_TICK_SECONDS (run exactly one)."""
    _need_redis()
    from workers.app import app as celery

    celery.start(["beat", f"--loglevel={loglevel}", f"--schedule={schedule_file}"])


def _need_redis() -> None:
    if not get_settings().redis_url:
        raise _fail(
            "SHADOWPLANE_REDIS_URL is not set: Celery needs Redis as its broker. Without it, "
            "`shadowplane api` runs the periodic pass in-process (or run `shadowplane tick`)."
        )


@app.command()
def prune(
    older_than: Annotated[str, typer.Option(help="Age of the results to delete, e.g. 30d, 12h.")],
    batch_size: Annotated[int, typer.Option(help="Results deleted per transaction.")] = 5000,
) -> None:
    """Delete results and payloads older than a cut-off (by result time), in batches; metrics stay."""
    from controlplane.db import get_engine
    from controlplane.ingest.retention import parse_duration
    from controlplane.ingest.retention import prune as run_prune
    from controlplane.models.base import utcnow

    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise _fail(f"older-than: {exc}") from None
    before = utcnow() - age
    pruned = run_prune(
        get_engine(get_settings().database_url), before=before, batch_size=batch_size
    )
    typer.echo(
        f"deleted {pruned.results} results and {pruned.payloads} payloads with ts before "
        f"{before.isoformat()} in {pruned.batches} batches; window metrics are kept"
    )


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="Port for the API (a free one if taken).")] = 8000,
    rate: Annotated[float, typer.Option(help="Simulated results per second per task.")] = 20.0,
    duration: Annotated[float, typer.Option(help="Seconds of simulated traffic at most.")] = 180.0,
    scenario_after: Annotated[
        float, typer.Option(help="Seconds before the long-ticket regression starts.")
    ] = 30.0,
    once: Annotated[
        bool,
        typer.Option(help="Stop at the rollback (or the duration), print, exit; no serving."),
    ] = False,
) -> None:
    """Everything on the embedded default: serve, canary, simulated traffic, a real rollback."""
    from controlplane.demo import run_demo

    run_demo(port, rate, duration, once, scenario_after)


@app.command()
def simulate(
    url: Annotated[str, typer.Option(help="Base URL of the API.")] = "http://127.0.0.1:8000",
    key: Annotated[str, typer.Option(envvar="SHADOWPLANE_KEY", help="An ingest key.")] = "",
    task: Annotated[
        list[str] | None,
        typer.Option(help="Task to simulate; repeatable (default: every profile)."),
    ] = None,
    rate: Annotated[float, typer.Option(help="Results per second per task.")] = 20.0,
    duration: Annotated[float, typer.Option(help="Seconds to run.")] = 60.0,
    scenario: Annotated[
        str, typer.Option(help="none, long_tickets, edge_outage, silence, traffic_jump.")
    ] = "none",
    scenario_task: Annotated[
        list[str] | None,
        typer.Option(help="Task the scenario applies to; repeatable (default: all)."),
    ] = None,
    scenario_after: Annotated[
        float, typer.Option(help="Seconds of normal traffic before the scenario starts.")
    ] = 0.0,
    batch_size: Annotated[int, typer.Option(help="Results per request.")] = 500,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Play routing services against a running API: post realistic results over HTTP, live."""
    from controlplane.sim.profiles import GENERATORS, SCENARIOS
    from controlplane.sim.runner import Plan, stream

    tasks = task or list(GENERATORS)
    if scenario not in SCENARIOS:
        raise _fail(f"scenario: {scenario!r} is not one of {', '.join(SCENARIOS)}")
    unknown = [t for t in [*tasks, *(scenario_task or [])] if t not in GENERATORS]
    if unknown:
        raise _fail(f"task: no simulator profile for {unknown}; profiles: {', '.join(GENERATORS)}")
    if rate <= 0 or duration <= 0:
        raise _fail("rate and duration must be positive")
    if not key:
        raise _fail("key: pass --key or set SHADOWPLANE_KEY (an ingest key)")
    plan = Plan(scenario, set(scenario_task) if scenario_task else None, scenario_after)
    totals = stream(
        url, key, tasks, rate=rate, duration=duration, plan=plan, batch_size=batch_size, seed=seed
    )
    failed = False
    for name, t in totals.items():
        typer.echo(
            f"{name}: generated {t.generated}, accepted {t.accepted}, duplicates "
            f"{t.duplicates}, rejected {t.rejected}, not delivered {t.dropped}"
        )
        for error in t.errors[:5]:
            typer.echo(f"  ! {error}")
        failed = failed or bool(t.dropped or t.rejected)
    if failed:
        raise typer.Exit(1)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    app()
