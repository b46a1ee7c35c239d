"""The `shadowplane` command (DESIGN §1). Operators and scripts rely on these names."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml

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
    from controlplane.catalog.schemas import ConfigError
    from controlplane.catalog.service import apply_config
    from controlplane.db import get_engine, session_scope

    text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise _fail(f"{file}: not valid YAML/JSON: {exc}") from None
    try:
        with session_scope(get_engine()) as session:
            applied = [apply_config(session, doc, actor=_actor()) for doc in documents]
    except ConfigError as exc:
        raise _fail(f"{file}: " + "\n  ".join(["config refused:", *exc.errors])) from None
    for a in applied:
        verdict = "created" if a.created else "new version" if a.changed else "unchanged"
        typer.echo(f"{a.task}: {verdict} (version {a.version}, stage {a.stage})")


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="Port for the API (a free one if taken).")] = 8000,
    results: Annotated[int, typer.Option(help="Simulated results per example task.")] = 2000,
    once: Annotated[
        bool, typer.Option(help="Exit after posting and printing, instead of serving.")
    ] = False,
) -> None:
    """Everything on the embedded default: migrate, register examples, serve, simulate traffic."""
    from controlplane.demo import run_demo

    run_demo(port, results, once)


@app.command()
def simulate(
    url: Annotated[str, typer.Option(help="Base URL of the API.")] = "http://127.0.0.1:8000",
    key: Annotated[str, typer.Option(envvar="SHADOWPLANE_KEY", help="An ingest key.")] = "",
    task: Annotated[
        list[str] | None,
        typer.Option(help="Task to simulate; repeatable (default: both examples)."),
    ] = None,
    results: Annotated[int, typer.Option(help="Results per task.")] = 1000,
    batch_size: Annotated[int, typer.Option(help="Results per request.")] = 200,
    scenario: Annotated[
        str,
        typer.Option(
            help="none, long_ticket_regression, edge_outage, silent_router, traffic_jump."
        ),
    ] = "none",
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Play routing services against a running API: post generated results over HTTP."""
    from controlplane.sim.profiles import GENERATORS, SCENARIOS
    from controlplane.sim.runner import simulate as run

    task = task or list(GENERATORS)
    if scenario not in SCENARIOS:
        raise _fail(f"scenario: {scenario!r} is not one of {', '.join(SCENARIOS)}")
    unknown = [t for t in task if t not in GENERATORS]
    if unknown:
        raise _fail(f"task: no simulator profile for {unknown}; profiles: {', '.join(GENERATORS)}")
    if not key:
        raise _fail("key: pass --key or set SHADOWPLANE_KEY (an ingest key)")
    for name, t in run(
        url, key, task, per_task=results, batch_size=batch_size, seed=seed, scenario=scenario
    ).items():
        typer.echo(
            f"{name}: accepted {t.accepted}, duplicates {t.duplicates}, rejected {t.rejected}"
        )
        for error in t.errors[:5]:
            typer.echo(f"  ! {error}")


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    app()
