"""The `shadowplane` command (README.md, "Command line").

Operators and scripts rely on these names."""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from controlplane.settings import get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


class _Commands(typer.Typer):
    """The commands, saying in one line that a server they need is out of reach (an
    operator mid-incident gets the setting to check and the server's own words, not a
    traceback of hundreds of lines)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            problem = _out_of_reach(exc)
            if problem is None:
                raise
            typer.echo(f"error: {problem}", err=True)
            sys.exit(1)


def _out_of_reach(exc: BaseException) -> str | None:
    """One line for a database or Redis that does not answer; None for any other error."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeout
    from sqlalchemy.exc import DBAPIError, InterfaceError, NoSuchModuleError, OperationalError

    if isinstance(exc, NoSuchModuleError):  # a scheme SQLAlchemy has no dialect for
        return (
            f"SHADOWPLANE_DATABASE_URL: {exc} (PostgreSQL is postgresql+psycopg://, "
            "the embedded database sqlite:///PATH)"
        )
    if isinstance(exc, DBAPIError):
        words = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        said = words[0] if words else type(exc).__name__
        url = _safe_url(get_settings().database_url)
        if exc.statement is None:  # connecting: the URL, the server, the credentials
            return f"SHADOWPLANE_DATABASE_URL: cannot connect to {url}: {said}"
        if not isinstance(exc, OperationalError | InterfaceError):
            return None  # a statement the database refused: a fault of ours, traced
        running = " ".join(str(exc.statement).split())[:160]
        return f"the database at {url} failed: {said} (running: {running})"
    if isinstance(exc, RedisConnectionError | RedisTimeout):
        redis_url = get_settings().redis_url
        where = _safe_url(redis_url) if redis_url else "Redis"
        return f"SHADOWPLANE_REDIS_URL: cannot reach {where}: {exc}"
    return None


app = _Commands(
    help="Shadowplane: evidence-driven edge/cloud routing for LLM tasks.",
    no_args_is_help=True,
    add_completion=False,
)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
tasks_app = typer.Typer(help="Task configs.", no_args_is_help=True)
alerts_app = typer.Typer(help="Alerts.", no_args_is_help=True)
evalset_app = typer.Typer(help="Eval sets: backfill, export, compare runs.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(tasks_app, name="tasks")
app.add_typer(alerts_app, name="alerts")
app.add_typer(evalset_app, name="evalset")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"shadowplane {version('shadowplane')}")
        raise typer.Exit()


@app.callback()
def _settings_first(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Refuse to start on settings that cannot work, naming them (before any command runs)."""
    from pydantic import ValidationError

    from controlplane.settings import explain

    try:
        get_settings()
    except ValidationError as exc:
        raise _fail("settings refused:\n  " + "\n  ".join(explain(exc))) from None


def _actor() -> str:
    """Who the audit log credits: the login name, else (a container run under a uid with no
    user, as Kubernetes and OpenShift run images) the uid."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"cli:uid-{os.getuid()}"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


T = TypeVar("T")


def _detail(detail: Any) -> str:
    from controlplane.rollout.actions import refusal_text

    return refusal_text(detail, force="promote --force")


def _do(action: Callable[[Engine], T]) -> T:
    """Run an action on this process's database; its refusal is printed, exit status 1."""
    from controlplane.db import get_engine
    from controlplane.errors import ActionError

    try:
        return action(get_engine(get_settings().database_url))
    except ActionError as exc:
        raise _fail(_detail(exc.detail)) from None


def _decision_line(d: dict[str, Any]) -> str:
    where = d["task"] or "every task"
    move = f" {d['stage_before']} → {d['stage_after']}" if d.get("stage_after") else ""
    return f"decision {d['id']}: {d['action']} on {where}{move} by {d['actor']}: {d['reason']}"


@app.command()
def migrate(
    to: Annotated[
        str | None,
        typer.Option(
            help="A revision to bring the schema to instead of this release's latest: one "
            "below the database's takes it down (each migration's downgrade), for an older "
            "release to run on it."
        ),
    ] = None,
) -> None:
    """Bring the database schema to the latest version (Alembic)."""
    url = get_settings().database_url
    _migrate(url, to)
    typer.echo(f"migrated {_safe_url(url)}" + (f" to {to}" if to else ""))


def _migrate(url: str, to: str | None = None) -> None:
    """Migrate `url` (to this release's latest, or to `to`), or exit 1 with one line saying
    why not (`migrate`, `demo`)."""
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    from controlplane.migrate import (
        MigrationLocked,
        below,
        downgrade,
        head_revisions,
        known,
        upgrade,
    )

    problem = _unreadable(url)
    if problem is not None:
        raise _fail(f"SHADOWPLANE_DATABASE_URL: {problem}")
    if to == "base":
        raise _fail(
            "--to base would drop every table, and every result with them; shadowplane "
            "does not: to start again, drop the database and migrate a new one"
        )
    latest = " ".join(sorted(head_revisions()))
    if to is not None and not known(to):
        raise _fail(
            f"--to {to}: this release has no such revision (its latest: {latest}); a "
            "revision of a newer release is reached with that release"
        )
    try:
        if to is not None and below(url, to):
            downgrade(url, to)
        else:
            upgrade(url, to or "head")
    except MigrationLocked as exc:
        raise _fail(f"cannot migrate {_safe_url(url)} now: {exc}") from None
    except CommandError as exc:
        # Alembic's own: a revision in the database this release does not know (a newer
        # release migrated it, and the deploy was rolled back).
        words = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (
            ": the database was migrated by a newer release of Shadowplane; run that release, "
            "or take the schema down with it first: with the newer release, shadowplane "
            f"migrate --to {latest}"
            if "Can't locate revision" in words
            else ""
        )
        raise _fail(f"cannot migrate {_safe_url(url)}: {words}{hint}") from None
    except SQLAlchemyError as exc:
        # The driver's own words, first line: unreachable, refused login, no such database;
        # or what a statement of the migration met (the URL is not at fault then).
        words = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        statement = getattr(exc, "statement", None)
        if statement is None:
            raise _fail(
                f"SHADOWPLANE_DATABASE_URL: cannot migrate {_safe_url(url)}: {words}"
            ) from None
        running = " ".join(str(statement).split())[:160]
        raise _fail(f"cannot migrate {_safe_url(url)}: {words} (running: {running})") from None


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
) -> None:
    """Serve the HTTP API with uvicorn."""
    import uvicorn

    from controlplane.logs import uvicorn_log_config

    level = get_settings().log_level
    uvicorn.run(
        "controlplane.api:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        # uvicorn's own lines in the same JSON lines; its access log off: the request log
        # (one line per request, with the key's name) says the same.
        log_config=uvicorn_log_config(level),
        log_level=level.lower(),
        access_log=False,
    )


@app.command()
def dashboard(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8501,
) -> None:
    """Serve the Streamlit dashboard (sign in with an API key of scope read, review or admin)."""
    import importlib.util
    import logging
    import os

    from controlplane.compare.jsonutil import dumps
    from controlplane.logs import configure_process

    spec = importlib.util.find_spec("shadowplane_dashboard")
    if spec is None or spec.origin is None:
        raise _fail("the dashboard package is not installed with this copy of shadowplane")
    # The Streamlit app behind its sign-in door (one ASGI app, `st.App`): `streamlit run`
    # (`python -m shadowplane_dashboard`, its logging in JSON lines) finds the app in the file and
    # serves it with uvicorn.
    script = Path(spec.origin).with_name("server.py")
    level = get_settings().log_level
    command = [
        sys.executable,
        "-m",
        "shadowplane_dashboard",
        "run",
        str(script),
        "--server.address",
        host,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        # No "Deploy" button or developer menu: this is an operator's console.
        "--client.toolbarMode",
        "minimal",
        "--logger.level",
        level.lower(),
        # Its welcome is text; the line below says where it is.
        "--logger.hideWelcomeMessage",
        "true",
    ]
    configure_process(level)
    url = f"http://{host}:{port}"
    database = _safe_url(get_settings().database_url)
    start = {"event": "dashboard_start", "url": url, "database": database}
    logging.getLogger("shadowplane.dashboard").info(
        "%s dashboard on %s (database: %s)", dumps(start).decode(), url, database
    )
    os.execv(sys.executable, command)


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="A name for the key (shown in logs and audit).")],
    scope: Annotated[
        list[str], typer.Option(help="ingest, flags:read, read, review or admin; repeatable.")
    ],
) -> None:
    """Create an API key; the key is printed once, alone on the last line."""
    from controlplane.keys.actions import create_key

    key, plaintext = _do(lambda engine: create_key(engine, name=name, scopes=scope, actor=_actor()))
    typer.echo(
        f"created key {key.name!r} with scopes {', '.join(key.scopes)}; it is shown only now:"
    )
    typer.echo(plaintext)


@keys_app.command("list")
def keys_list() -> None:
    """List keys (name, prefix, scopes, state); never the keys themselves."""
    from controlplane.db import get_engine, session_scope
    from controlplane.keys.service import list_keys

    with session_scope(get_engine()) as session:
        for key in list_keys(session):
            state = f"revoked {key.revoked_at:%Y-%m-%dT%H:%M:%SZ}" if key.revoked_at else "active"
            typer.echo(f"{key.name}\t{key.prefix}…\t{','.join(key.scopes)}\t{state}")


@keys_app.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="The key's name.")]) -> None:
    """Revoke a key; every API process stops accepting it within 5 seconds."""
    from controlplane.keys.actions import revoke_key

    _do(lambda engine: revoke_key(engine, name=name, actor=_actor()))
    typer.echo(f"revoked {name!r}")


@tasks_app.command("apply")
def tasks_apply(
    file: Annotated[
        Path, typer.Option("-f", "--file", help="Task config, YAML or JSON; '-' reads stdin.")
    ],
) -> None:
    """Register a task or give it a new config version."""
    from controlplane.catalog.schemas import ConfigError, read_documents
    from controlplane.db import get_engine
    from controlplane.errors import ActionError
    from controlplane.rollout.configs import apply_tasks

    text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    try:
        documents = read_documents(text, yaml_text=True)  # JSON is YAML too
    except ConfigError as exc:
        raise _fail(f"{file}: " + "; ".join(exc.errors)) from None
    try:
        applied = apply_tasks(get_engine(), documents, actor=_actor())
    except ActionError as exc:
        if exc.status == 422 and isinstance(exc.detail, list):
            raise _fail(f"{file}: " + "\n  ".join(["config refused:", *exc.detail])) from None
        raise _fail(f"{file}: {_detail(exc.detail)}") from None
    for a in applied:
        verdict = "created" if a.created else "new version" if a.changed else "unchanged"
        typer.echo(f"{a.task}: {verdict} (version {a.version}, stage {a.stage})")


@tasks_app.command("example")
def tasks_example(
    name: Annotated[
        str | None, typer.Argument(help="The example's name; without it, the names are listed.")
    ] = None,
) -> None:
    """Print an example task config shipped with Shadowplane (YAML, commented), to adapt
    and apply: shadowplane tasks example ticket_classify > ticket_classify.yaml"""
    from controlplane.catalog import examples

    if name is None:
        for known in examples.names():
            typer.echo(known)
        return
    try:
        typer.echo(examples.text(name), nl=False)
    except KeyError as exc:
        raise _fail(f"name: {exc.args[0]}") from None


Reason = Annotated[str, typer.Option(help="Why (kept in the decision and the audit log).")]
TaskName = Annotated[str, typer.Argument(help="The task's name.")]


@app.command()
def promote(
    task: TaskName,
    reason: Reason,
    force: Annotated[bool, typer.Option(help="Override a failing gate (audited).")] = False,
    expected_stage: Annotated[
        str | None,
        typer.Option(help="Refuse if the task is no longer there: shadow, canary, canary:<pct>."),
    ] = None,
) -> None:
    """Move a task one stage on (cloud → shadow → canary steps → full), as the API does."""
    from controlplane.rollout.actions import promote as run

    veto = get_settings().error_cost_veto
    decision = _do(
        lambda engine: run(
            engine,
            task,
            actor=_actor(),
            reason=reason,
            force=force,
            expected_stage=expected_stage,
            veto=veto,
        )
    )
    typer.echo(_decision_line(decision))


@app.command()
def rollback(task: TaskName, reason: Reason) -> None:
    """Send a task back to the cloud now (stage rolled_back)."""
    from controlplane.rollout.actions import rollback as run

    typer.echo(_decision_line(_do(lambda e: run(e, task, actor=_actor(), reason=reason))))


@app.command()
def rearm(task: TaskName, reason: Reason) -> None:
    """Re-arm a rolled-back task to shadow; its evidence starts over."""
    from controlplane.rollout.actions import rearm as run

    typer.echo(_decision_line(_do(lambda e: run(e, task, actor=_actor(), reason=reason))))


@app.command()
def unblock(
    task: TaskName,
    model: Annotated[str, typer.Option(help="The blocked edge model version.")],
    reason: Reason,
    force: Annotated[
        bool,
        typer.Option(help="Lift it without a passing run on the regression eval set (audited)."),
    ] = False,
) -> None:
    """Lift the auto-promotion block a rollback put on an edge model version: it needs the
    rollback's regression items in the set and a stored run of that version, or of a later
    one of its line, on the task's current regression eval set at or above
    promotion.regression_min_accuracy, unless forced."""
    from controlplane.rollout.actions import unblock as run

    done = _do(lambda e: run(e, task, model=model, actor=_actor(), reason=reason, force=force))
    typer.echo(
        f"unblocked {model} for {task}; still blocked: {', '.join(done['blocked']) or 'none'}"
    )


@app.command()
def kill(reason: Reason) -> None:
    """The global kill switch: every flag says cloud until lifted."""
    from controlplane.rollout.actions import kill as run

    typer.echo(_decision_line(_do(lambda e: run(e, actor=_actor(), reason=reason))))


@app.command()
def lift(reason: Reason) -> None:
    """Lift the kill switch: every flag goes back to its stage. Exits 1 (the lift recorded)
    when a task is left killed because its stored config does not parse, naming it."""
    from controlplane.rollout.actions import left_on_the_cloud
    from controlplane.rollout.actions import lift as run

    decision = _do(lambda e: run(e, actor=_actor(), reason=reason))
    typer.echo(_decision_line(decision))
    still = left_on_the_cloud(decision)
    if still:
        # Recorded, but not every flag is back: a script reading the exit code must know.
        typer.echo(f"warning: {still}", err=True)
        raise typer.Exit(1)


@alerts_app.command("ack")
def alerts_ack(
    alert_id: Annotated[int, typer.Argument(help="The alert's id.")],
    note: Annotated[str | None, typer.Option(help="A note for the audit log.")] = None,
) -> None:
    """Acknowledge an open alert (audited); it still resolves by itself."""
    from controlplane.alerts.actions import acknowledge

    view = _do(lambda e: acknowledge(e, alert_id, actor=_actor(), note=note))
    typer.echo(f"alert {view['id']} ({view['task']} {view['kind']}): {view['state']}")


@evalset_app.command("backfill")
def evalset_backfill(
    task: Annotated[str | None, typer.Option(help="Only this task (default: every task).")] = None,
    layer: Annotated[
        str | None, typer.Option(help="Only this layer: boundary, anomaly or regression.")
    ] = None,
) -> None:
    """Turn labelled review items into eval items in the database (idempotent)."""
    from controlplane.evalsets.actions import backfill

    done = _do(lambda e: backfill(e, task=task, layer=layer, actor=_actor()))
    typer.echo(
        f"added {done['added']} eval items; {done['duplicates']} duplicates of items already "
        f"in, {done['needs_correction'] + done['invalid_expected']} waiting for a correction "
        f"({done['invalid_expected']} of them with an expected answer the task's comparator "
        "calls invalid)"
    )
    for name, layers in done["tasks"].items():
        typer.echo(f"  {name}: " + ", ".join(f"{n} {lay}" for lay, n in layers.items()))


@evalset_app.command("export")
def evalset_export(
    task: Annotated[str | None, typer.Option(help="Only this task (default: every task).")] = None,
    format: Annotated[str, typer.Option("--format", help="jsonl or csv.")] = "jsonl",
    out: Annotated[
        Path | None,
        typer.Option(help="Folder to write (default: SHADOWPLANE_EVALSETS_DIR, ./evalsets)."),
    ] = None,
) -> None:
    """Write <dir>/<task>/<layer>.<format>, schema.json and manifest.json (same data, same bytes)."""
    from controlplane.db import get_engine, session_scope
    from controlplane.evalsets import service

    directory = out or Path(get_settings().evalsets_dir)
    try:
        with session_scope(get_engine(get_settings().database_url)) as session:
            done = service.export(session, directory, task=task, fmt=format)
    except (service.NotFound, service.Refused) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        # A folder that cannot be written (read-only, a file on the way, a full disk).
        where = exc.filename or directory
        raise _fail(f"out: cannot write {where}: {exc.strerror or exc}") from None
    for path, count, digest in done.files:
        typer.echo(f"{directory / path}: {count} items, sha256 {digest}")
    typer.echo(f"{done.manifest}: {len(done.files)} files written")


@evalset_app.command("schema")
def evalset_schema() -> None:
    """Print the JSON Schema of an exported eval set line (the schema.json every export
    writes beside its files)."""
    from controlplane.evalsets.items import schema_bytes

    sys.stdout.buffer.write(schema_bytes())
    sys.stdout.flush()


@evalset_app.command("compare")
def evalset_compare(
    a: Annotated[Path, typer.Argument(help="Run A: JSONL, one line per item (id, output, model).")],
    b: Annotated[Path, typer.Argument(help="Run B, on the same items.")],
) -> None:
    """Score two runs of one eval set with the task's comparator, side by side per layer and
    bucket, with B - A and its paired 95% interval; refuses runs on different items."""
    from controlplane.db import get_engine, session_scope
    from controlplane.evalsets import scoring, service

    try:
        runs = [scoring.read_run_file(p) for p in (a, b)]
        scoring.same_items(runs[0].outputs, runs[1].outputs, what=str(b), against=str(a))
        with session_scope(get_engine(get_settings().database_url)) as session:
            found, items = service.compare_items(session, list(runs[0].outputs))
            spec = service.comparator_spec(session, found)
            rows = scoring.compare_runs(spec, service.scoring_items(items), *runs)
    except OSError as exc:
        raise _fail(f"{exc.filename}: {exc.strerror}") from None
    except (scoring.RunError, service.NotFound, service.Refused) as exc:
        raise _fail(str(exc)) from None
    names = [r.model or str(p) for r, p in zip(runs, (a, b), strict=True)]
    distinct = len({x.item_id for x in items})
    typer.echo(f"{found.name}: A = {names[0]}, B = {names[1]}; {distinct} items")
    typer.echo(f"{'layer':<11}{'bucket':<11}{'n':>6}{'A':>8}{'B':>8}{'B - A':>8}  95% interval")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for r in rows:
        interval = "-" if r["low"] is None else f"[{r['low']:+.3f}, {r['high']:+.3f}]"
        diff = "-" if r["diff"] is None else f"{r['diff']:+.3f}"
        typer.echo(
            f"{r['layer']:<11}{r['bucket']:<11}{r['n']:>6}{pct(r['a']):>8}{pct(r['b']):>8}"
            f"{diff:>8}  {interval}"
        )


@app.command()
def tick(
    now: Annotated[
        str | None,
        typer.Option(help="The pass's clock, ISO 8601 (default: now); the future is allowed."),
    ] = None,
) -> None:
    """One synchronous pass: compute due windows, close them, evaluate alerts and rollout
    rules, then send the webhooks they wrote (and, on PostgreSQL, create the day partitions
    ahead, as the beat does)."""
    from sqlalchemy.exc import OperationalError

    from controlplane.db import get_engine
    from controlplane.models.partitions import keep_partitions
    from controlplane.notify.delivery import deliver_pending
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
    settings = get_settings()
    report = run_pass(get_engine(settings.database_url), clock, veto=settings.error_cost_veto)
    typer.echo(
        f"pass at {report.now.isoformat()}: {len(report.windows)} windows "
        f"({report.count('computed')} open, {report.count('closed')} closed now, "
        f"{report.count('late')} late counts updated)"
    )
    try:
        made = keep_partitions(get_engine(settings.database_url), report.now, settings.max_backfill)
    except OperationalError as exc:  # its lock was not free in time: the next tick tries again
        typer.echo(f"  day partitions not created now, the next tick tries again: {exc}", err=True)
    else:
        if made.days:
            typer.echo(f"  day partitions created: {', '.join(d.isoformat() for d in made.days)}")
    for event in report.alerts:
        typer.echo(f"  alert {event.change}: {event.task} {event.kind}: {event.message}")
    for decision in report.decisions:
        typer.echo(f"  {_decision_line(decision)}")
    # The webhooks this pass wrote to the outbox (and any others due), sent from here.
    sent = deliver_pending(get_engine(settings.database_url), settings)
    if sent.delivered or sent.retrying or sent.failed:
        typer.echo(
            f"  webhooks: {sent.delivered} delivered, {sent.retrying} to retry, "
            f"{sent.failed} failed"
        )
    for failure in report.failed:
        typer.echo(f"  ! {failure}", err=True)
    if report.failed:
        raise typer.Exit(1)


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="Worker processes.")] = 2,
    loglevel: Annotated[
        str | None, typer.Option(help="Log level (default: SHADOWPLANE_LOG_LEVEL).")
    ] = None,
    hostname: Annotated[
        str | None,
        typer.Option(
            "--hostname",
            "-n",
            help="The worker's node name, unique among the workers on the broker; %h is "
            "this host's name. Default: shadowplane-<pid>-<4 random hex digits>@%h, a new one "
            "at each start.",
        ),
    ] = None,
) -> None:
    """Run a Celery worker for the periodic jobs (needs SHADOWPLANE_REDIS_URL)."""
    _need_redis()
    name = hostname or default_worker_name()
    level = loglevel or get_settings().log_level
    _celery("worker", f"--loglevel={level}", f"--concurrency={concurrency}", f"--hostname={name}")


def default_worker_name() -> str:
    """A node name no other worker holds: Celery's own default, celery@<host>, is the same
    for every worker on a host, so their control replies and heartbeats clash."""
    import secrets

    # The pid stays: this process becomes the worker (execv).
    return f"shadowplane-{os.getpid()}-{secrets.token_hex(2)}@%h"


@app.command()
def beat(
    schedule_file: Annotated[
        Path | None,
        typer.Option(
            help="Where beat keeps its last-run times (its folder is created). Default: "
            "$XDG_STATE_HOME/shadowplane/celerybeat-schedule, or "
            "~/.local/state/shadowplane/celerybeat-schedule without XDG_STATE_HOME; never "
            "the working directory."
        ),
    ] = None,
    loglevel: Annotated[
        str | None, typer.Option(help="Log level (default: SHADOWPLANE_LOG_LEVEL).")
    ] = None,
) -> None:
    """Run Celery beat: queues the window plan every SHADOWPLANE_TICK_SECONDS (run exactly one)."""
    _need_redis()
    path = schedule_file or default_beat_schedule()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(f"schedule-file: cannot create {path.parent}: {exc.strerror or exc}") from None
    _celery("beat", f"--loglevel={loglevel or get_settings().log_level}", f"--schedule={path}")


def default_beat_schedule() -> Path:
    """Beat's schedule file by default: state of this user's, outside any checkout. (Losing
    it is harmless: beat then runs each periodic job at once and goes on from there.)"""
    state = Path(os.environ.get("XDG_STATE_HOME") or "")
    if not state.is_absolute():  # unset, empty or relative: ignored, as XDG says
        state = Path.home() / ".local" / "state"
    return state / "shadowplane" / "celerybeat-schedule"


def _celery(*args: str) -> None:
    # The Celery app lives in shadowplane_workers/, beside the doors: this process becomes Celery's own
    # program (`python -m shadowplane_workers`, its logging set up first), which loads the app by name
    # (nothing under controlplane imports shadowplane_workers). The worker consumes the app's default
    # queue.
    os.execv(sys.executable, [sys.executable, "-m", "shadowplane_workers", *args])


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
    """Remove results and payloads older than a cut-off (by result time); metrics stay.

    On PostgreSQL whole days are dropped (the day the cut-off falls in stays until it is
    wholly older); elsewhere, and in the default partition, rows are deleted in batches."""
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
    cut = pruned.before or before
    days = f"{len(pruned.days_dropped)} whole days dropped and " if pruned.days_dropped else ""
    typer.echo(
        f"deleted {pruned.results} results and {pruned.payloads} payloads with ts before "
        f"{cut.isoformat()} ({days}{pruned.batches} batches), and {pruned.keys} request-id "
        "keys; window metrics are kept"
    )
    if pruned.days_busy:
        typer.echo(
            "not dropped, busy (queries were reading them; run prune again): "
            + ", ".join(day.isoformat() for day in pruned.days_busy),
            err=True,
        )


@app.command()
def queue() -> None:
    """The jobs waiting in Redis: queued, and taken by a worker but not acknowledged (running,
    or held by a worker that died, until its visibility timeout gives them back)."""
    import time

    import redis

    from controlplane.notify.delivery import JOB_QUEUE

    _need_redis()
    url = get_settings().redis_url or ""
    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        # Celery's Redis transport (kombu) keeps a taken job in the hash `unacked`, and when
        # it was taken in the sorted set `unacked_index`, until the job is acknowledged.
        with client.pipeline() as pipe:
            pipe.llen(JOB_QUEUE)
            pipe.hlen("unacked")
            pipe.zrange("unacked_index", 0, 0, withscores=True)
            queued, taken, oldest = pipe.execute()
    except redis.RedisError as exc:
        raise _fail(f"Redis at {_safe_url(url)} did not answer: {exc}") from None
    finally:
        client.close()
    since = f" (the oldest for {max(0.0, time.time() - oldest[0][1]):.0f} s)" if oldest else ""
    typer.echo(
        f"{queued + taken} jobs: {queued} queued, {taken} taken by a worker and not "
        f"acknowledged{since}"
    )


@app.command()
def grade(
    task: Annotated[str | None, typer.Option(help="Only this task (default: every task).")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the grade documents as JSON.")
    ] = False,
) -> None:
    """Grade tasks from their own traffic now and keep today's grade: tier, score and the
    first reason (or what is missing) per task; --json prints the documents."""
    from controlplane.db import session_scope
    from controlplane.grading import service
    from controlplane.models.base import utcnow

    veto = get_settings().error_cost_veto

    def run(engine: Engine) -> list[dict[str, Any]]:
        with session_scope(engine) as session:
            if task is not None:
                return [service.grade_task(session, task, veto=veto, now=utcnow())]
            return service.grade_all(session, veto=veto, now=utcnow())

    documents = _do(run)
    if as_json:
        body = documents[0] if task is not None else {"grades": documents}
        typer.echo(_detail(body))
        return
    for line in grade_table(documents):
        typer.echo(line)


def grade_table(documents: list[dict[str, Any]], width: int = 100) -> list[str]:
    """One line per task: name, tier, score and one reason (for `insufficient`, the first
    thing missing), the reason cut to fit `width` characters."""
    rows = [("task", "tier", "score", "why")]
    for d in documents:
        why = (d["missing"] if d["tier"] == "insufficient" else d["reasons"]) or d["reasons"]
        # As the API gives it (3 places): 2 would show 0.749, a shadow score, as 0.75.
        score = "-" if d["score"] is None else f"{d['score']:.3f}"
        rows.append((d["task"], d["tier"], score, why[0] if why else "no danger signal"))
    if len(rows) == 1:
        return ["no tasks to grade"]
    name = max(len(r[0]) for r in rows)
    tier = max(len(r[1]) for r in rows)
    room = max(width - name - tier - 5 - 6, 20)
    return [
        f"{r[0]:<{name}}  {r[1]:<{tier}}  {r[2]:>5}  "
        + (r[3] if len(r[3]) <= room else r[3][: room - 1] + "…")
        for r in rows
    ]


@app.command()
def demo(
    port: Annotated[int, typer.Option(help="Port for the API (a free one if taken).")] = 8000,
    rate: Annotated[float, typer.Option(help="Simulated results per second per task.")] = 20.0,
    duration: Annotated[float, typer.Option(help="Seconds of simulated traffic at most.")] = 180.0,
    scenario_after: Annotated[
        float, typer.Option(help="Seconds of canary traffic before the scenario starts.")
    ] = 30.0,
    once: Annotated[
        bool,
        typer.Option(
            help="Stop after the rollback and the loop closed after it (or the duration), "
            "print, exit; no serving."
        ),
    ] = False,
    scenario: Annotated[
        str,
        typer.Option(
            help="What goes wrong on the canary: long_tickets (the edge fails 2048+ token "
            "tickets), costly_edge (its cost rises until it saves nothing), longer_inputs "
            "(inputs grow 3x)."
        ),
    ] = "long_tickets",
    shadow_seconds: Annotated[
        float,
        typer.Option(
            hidden=True,
            help="For tests: the shadow phase's least length in seconds (it also lasts long "
            "enough for 150 repeat pairs per task at --rate).",
        ),
    ] = 20.0,
) -> None:
    """Everything on the embedded default: serve, canary, simulated traffic, a real rollback."""
    from controlplane.demo import SCENARIOS, run_demo

    if scenario not in SCENARIOS:
        raise _fail(f"scenario: {scenario!r} is not one of {', '.join(SCENARIOS)}")
    _migrate(get_settings().database_url)
    run_demo(
        port,
        rate,
        duration,
        once,
        scenario_after,
        scenario,
        shadow_seconds=shadow_seconds,
        migrated=True,
    )


@app.command()
def simulate(
    url: Annotated[str, typer.Option(help="Base URL of the API.")] = "http://127.0.0.1:8000",
    key: Annotated[
        str,
        typer.Option(
            envvar="SHADOWPLANE_KEY",
            help="A key with the scopes ingest (to post results) and flags:read (the "
            "simulated routers route by the flags); refused without either.",
        ),
    ] = "",
    task: Annotated[
        list[str] | None,
        typer.Option(help="Task to simulate; repeatable (default: every profile)."),
    ] = None,
    rate: Annotated[float, typer.Option(help="Results per second per task.")] = 20.0,
    duration: Annotated[float, typer.Option(help="Seconds to run.")] = 60.0,
    scenario: Annotated[
        str,
        typer.Option(
            help="none, long_tickets, edge_outage, silence, traffic_jump, costly_edge, "
            "longer_inputs."
        ),
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
    progress_every: Annotated[
        float,
        typer.Option(
            help="Seconds between progress lines (sent, accepted, rejected, not delivered, "
            "the flag held, per task; and a line when a flag changes); 0: none, only the "
            "totals at the end."
        ),
    ] = 5.0,
) -> None:
    """Play routing services against a running API: post realistic results over HTTP, live.

    Every --progress-every seconds: one line per task, counted at the end of
    that second; and a line whenever the flag a task's routers hold changes.

    At the end, the totals: exit status 1 if any result was rejected or not
    delivered. Ctrl-C stops the traffic early: what was sent is delivered,
    then the totals."""
    import signal
    import threading

    from controlplane.sim.profiles import GENERATORS, SCENARIOS
    from controlplane.sim.runner import FLUSH_SECONDS, Plan, Totals, stream

    tasks = task or list(GENERATORS)
    if scenario not in SCENARIOS:
        raise _fail(f"scenario: {scenario!r} is not one of {', '.join(SCENARIOS)}")
    unknown = [t for t in [*tasks, *(scenario_task or [])] if t not in GENERATORS]
    if unknown:
        raise _fail(f"task: no simulator profile for {unknown}; profiles: {', '.join(GENERATORS)}")
    if rate <= 0 or duration <= 0:
        raise _fail("rate and duration must be positive")
    if progress_every < 0:
        raise _fail("progress-every: must be 0 (no progress lines) or a number of seconds")
    if not key:
        raise _fail("key: pass --key or set SHADOWPLANE_KEY (scopes ingest and flags:read)")
    _router_key_or_fail(url, key)
    plan = Plan(scenario, set(scenario_task) if scenario_task else None, scenario_after)
    due = progress_every
    stop = threading.Event()
    held: dict[str, str] = {}  # the flag each task's routers held at the last count

    def progress(elapsed: float, totals: dict[str, Totals]) -> None:
        # Called at the end of each second: what was sent by then and what the API answered.
        nonlocal due
        at = round(elapsed)
        for name, t in totals.items():
            if progress_every and held.get(name, t.flag) != t.flag:
                typer.echo(f"[{at:5d}s] {name}: the routers' flag is now {t.flag}")
            held[name] = t.flag
        if not progress_every or at < due:
            return
        due += progress_every * (1 + int((at - due) // progress_every))
        for name, t in totals.items():
            typer.echo(
                f"[{at:5d}s] {name}: sent {t.generated}, accepted {t.accepted}, "
                f"duplicates {t.duplicates}, rejected {t.rejected}, not delivered {t.dropped}, "
                f"in flight {t.in_flight}; flag {t.flag}"
            )

    def flushing(totals: dict[str, Totals]) -> None:
        if progress_every:
            why = " (Ctrl-C)" if stop.is_set() else ""
            waiting = sum(t.in_flight for t in totals.values())
            typer.echo(
                f"traffic stopped{why}; delivering the {waiting} results still in flight "
                f"(at most {FLUSH_SECONDS:g} s)"
                if waiting
                else f"traffic stopped{why}; every result sent has its answer"
            )

    def interrupted(signum: int, frame: object) -> None:
        if stop.is_set():  # a second Ctrl-C: quit without waiting for deliveries
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        totals = stream(
            url,
            key,
            tasks,
            rate=rate,
            duration=duration,
            plan=plan,
            batch_size=batch_size,
            seed=seed,
            stop=stop,
            every_second=progress,
            on_flush=flushing,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
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


def _router_key_or_fail(url: str, key: str) -> None:
    """Refuse a key the simulated routers could not work with, naming the scope it lacks:
    without flags:read they would route everything to the cloud, without ingest post
    nothing. An API that does not answer is left to the run, which counts and retries."""
    import httpx

    from controlplane.client.tls import default_tls

    base, headers = url.rstrip("/"), {"Authorization": f"Bearer {key}"}
    try:
        with httpx.Client(
            base_url=base, headers=headers, timeout=10, verify=default_tls()
        ) as client:
            answers = {
                "flags:read": client.get("/v1/flags"),
                # An empty batch: stores nothing, and a key without the scope gets 403.
                "ingest": client.post("/v1/results", json={"results": []}),
            }
    except httpx.HTTPError:
        return
    if any(answer.status_code == 401 for answer in answers.values()):
        detail = answers["flags:read"].text[:200]
        raise _fail(f"key: the API at {base} refused it (401): {detail}")
    missing = [scope for scope, answer in answers.items() if answer.status_code == 403]
    if missing:
        raise _fail(
            f"key: it lacks the scope {' and '.join(missing)}: the simulated routers read "
            "their flags (flags:read) and post their results (ingest) with it"
        )


def _parsed_url(url: str) -> Any:
    """The URL as SQLAlchemy reads it, or None when it cannot (ArgumentError, or ValueError
    for a port that is not a number)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url)
    except Exception:  # noqa: BLE001 - both mean the same: not a URL this can read
        return None


def _safe_url(url: str) -> str:
    """The URL to print: its password masked, given before the host or as a query parameter
    (`?password=`, libpq's keyword); a URL that cannot be read is not printed."""
    parsed = _parsed_url(url)
    if parsed is None:
        return "(a URL that cannot be read)"
    query = {k: "***" if "password" in k.lower() else v for k, v in parsed.query.items()}
    return parsed.set(query=query).render_as_string(hide_password=True)


def _unreadable(url: str) -> str | None:
    """Why a database URL cannot be read (never quoting it: it may hold a password), or None."""
    if _parsed_url(url) is not None:
        return None
    return (
        "not a database URL this can read: it must be dialect+driver://user:password@"
        "host:port/database (is '://' there after the scheme? is the port a number?)"
    )


if __name__ == "__main__":
    app()
