"""`shadowplane demo`: the whole system on the embedded default, for a first look.

Migrates the SQLite file, registers the example tasks, starts the API in this process,
posts simulated shadow traffic over HTTP, and prints where to look and a key to look with.
"""

from __future__ import annotations

import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import typer
import uvicorn
import yaml

from controlplane.api import create_app
from controlplane.auth.service import create_key
from controlplane.catalog.service import RuntimeCache, apply_config
from controlplane.db import get_engine, session_scope
from controlplane.ingest.service import conflict_ids, outcome_counts
from controlplane.migrate import ROOT, upgrade
from controlplane.settings import get_settings
from controlplane.sim.runner import simulate

EXAMPLE_TASKS = ROOT / "examples" / "tasks"


def _free_port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_demo(port: int, per_task: int, once: bool) -> None:
    settings = get_settings()
    upgrade(settings.database_url)
    engine = get_engine(settings.database_url)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    with session_scope(engine) as session:
        applied = [
            apply_config(session, yaml.safe_load(path.read_text(encoding="utf-8")), actor="demo")
            for path in sorted(EXAMPLE_TASKS.glob("*.yaml"))
        ]
        _, admin_key = create_key(
            session, name=f"demo-admin-{stamp}", scopes=["admin"], actor="demo"
        )
        _, router_key = create_key(
            session, name=f"demo-router-{stamp}", scopes=["ingest"], actor="demo"
        )
    tasks = [a.task for a in applied]

    port = _free_port(port)
    # Request log lines would bury the summary; the demo's API logs warnings only.
    app = create_app(settings.model_copy(update={"log_level": "WARNING"}))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise typer.Exit(1)
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    typer.echo(f"API on {base} (database: {settings.database_url})")

    totals = simulate(base, router_key, tasks, per_task=per_task, seed=int(time.time()))
    with session_scope(engine) as session:
        runtimes = RuntimeCache().runtimes(session, set(tasks))
        counts = {task: outcome_counts(session, runtimes[task]) for task in tasks}
        conflicts = {task: conflict_ids(session, runtimes[task].id, limit=1) for task in tasks}

    typer.echo("\nSimulated shadow traffic (edge beside cloud), posted over HTTP:")
    for task in tasks:
        t = totals[task]
        by_outcome = ", ".join(f"{k} {v}" for k, v in sorted(counts[task].items()))
        typer.echo(
            f"  {task:<18} accepted {t.accepted}, duplicates {t.duplicates}, "
            f"rejected {t.rejected}; stored now: {by_outcome}"
        )
        for error in t.errors[:3]:
            typer.echo(f"    ! {error}")
    examples = "\n".join(
        f'  curl -H "Authorization: Bearer $KEY" {base}/v1/results/{task}/{ids[0]}   (a conflict)'
        for task, ids in conflicts.items()
        if ids
    )
    where = (
        f"  database file: {Path(settings.database_url.removeprefix('sqlite:///')).resolve()}"
        if settings.is_sqlite
        else ""
    )
    typer.echo(f"""
Where to look (admin key below, shown once):
  {base}/docs                      the API, interactive
  curl -H "Authorization: Bearer $KEY" {base}/v1/tasks
  curl -H "Authorization: Bearer $KEY" {base}/v1/tasks/ticket_classify
{examples}
{where}
KEY={admin_key}""")
    if once:
        server.should_exit = True
        thread.join(timeout=10)
        return
    typer.echo("\nServing until Ctrl-C.")
    try:
        while thread.is_alive():
            thread.join(timeout=0.5)
    except KeyboardInterrupt:
        server.should_exit = True
        thread.join(timeout=10)
