"""The audit timeline (the dashboard's Audit page): flag changes, decisions, config versions
and the audit log's entries merged into one list, newest first, filtered by task, actor and
time, and written as CSV.

A flag change records its cause, not who made it; it is credited to the decision that
published it (same task and flag version) when there is one. The audit log also records
each decision and each config version it announces; those entries are kept (they are the
log), and each event says which record it comes from (`kind`)."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from controlplane.compare.jsonutil import dumps
from controlplane.models import AuditEntry, Decision, FlagHistory, Task, TaskConfigVersion

# The most events a timeline returns (each source is read up to this many).
LIMIT = 1000
KINDS = ("flag", "decision", "config", "action")


@dataclass(frozen=True, slots=True)
class Event:
    at: datetime
    # flag (a new flag version) | decision | config (a new config version) | action (the
    # audit log's entry of a change by a person, a key or the policy)
    kind: str
    task: str | None
    actor: str | None
    # What happened, in a few words (a decision's action, the audit action, "version 3").
    what: str
    # The sentence or the details: a decision's reason, a flag's cause and routing fields.
    detail: str


@dataclass(frozen=True, slots=True)
class Filters:
    task: str | None = None
    actor: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # Which kinds of event (KINDS); None: every kind.
    kinds: tuple[str, ...] | None = None


def _within(column: Any, filters: Filters) -> list[ColumnElement[bool]]:
    """The time range's conditions on `column`."""
    out = []
    if filters.since is not None:
        out.append(column >= filters.since)
    if filters.until is not None:
        out.append(column < filters.until)
    return out


def _flag_events(session: Session, filters: Filters, limit: int) -> list[Event]:
    query = (
        select(FlagHistory, Task.name, Decision.actor)
        .join(Task, Task.id == FlagHistory.task_id)
        .outerjoin(
            Decision,
            (Decision.task_id == FlagHistory.task_id)
            & (Decision.flag_version_after == FlagHistory.version),
        )
        .order_by(FlagHistory.created_at.desc(), FlagHistory.id.desc())
        .limit(limit)
    )
    if filters.task is not None:
        query = query.where(Task.name == filters.task)
    if filters.actor is not None:
        query = query.where(Decision.actor == filters.actor)
    query = query.where(*_within(FlagHistory.created_at, filters))
    out = []
    for flag, task, actor in session.execute(query):
        routing = flag.fields
        detail = (
            f"{flag.cause} (stage {routing.get('stage')}, edge {routing.get('edge_percent')}%"
            f"{', killed' if routing.get('killed') else ''})"
        )
        out.append(Event(flag.created_at, "flag", task, actor, f"version {flag.version}", detail))
    return out


def _decision_events(session: Session, filters: Filters, limit: int) -> list[Event]:
    query = (
        select(Decision, Task.name)
        .outerjoin(Task, Task.id == Decision.task_id)
        .order_by(Decision.created_at.desc(), Decision.id.desc())
        .limit(limit)
    )
    if filters.task is not None:
        query = query.where(Task.name == filters.task)
    if filters.actor is not None:
        query = query.where(Decision.actor == filters.actor)
    query = query.where(*_within(Decision.created_at, filters))
    out = []
    for decision, task in session.execute(query):
        move = ""
        if decision.stage_after:
            move = f" {decision.stage_before} → {decision.stage_after}"
        out.append(
            Event(
                decision.created_at,
                "decision",
                task,
                decision.actor,
                f"{decision.action}{move}",
                decision.reason,
            )
        )
    return out


def _config_events(session: Session, filters: Filters, limit: int) -> list[Event]:
    query = (
        select(TaskConfigVersion, Task.name)
        .join(Task, Task.id == TaskConfigVersion.task_id)
        .order_by(TaskConfigVersion.created_at.desc(), TaskConfigVersion.id.desc())
        .limit(limit)
    )
    if filters.task is not None:
        query = query.where(Task.name == filters.task)
    if filters.actor is not None:
        query = query.where(TaskConfigVersion.created_by == filters.actor)
    query = query.where(*_within(TaskConfigVersion.created_at, filters))
    return [
        Event(
            version.created_at,
            "config",
            task,
            version.created_by,
            f"version {version.version}",
            f"config hash {version.config_hash[:12]}",
        )
        for version, task in session.execute(query)
    ]


def _audit_events(session: Session, filters: Filters, limit: int) -> list[Event]:
    query = select(AuditEntry).order_by(AuditEntry.created_at.desc(), AuditEntry.id.desc())
    query = query.limit(limit)
    if filters.task is not None:
        query = query.where(AuditEntry.task == filters.task)
    if filters.actor is not None:
        query = query.where(AuditEntry.actor == filters.actor)
    query = query.where(*_within(AuditEntry.created_at, filters))
    return [
        Event(
            entry.created_at,
            "action",
            entry.task,
            entry.actor,
            entry.action,
            dumps(entry.details).decode(),
        )
        for entry in session.scalars(query)
    ]


def timeline(session: Session, filters: Filters | None = None, limit: int = LIMIT) -> list[Event]:
    """Every event matching the filters, newest first, at most `limit` (the newest)."""
    filters = filters or Filters()
    sources = {
        "flag": _flag_events,
        "decision": _decision_events,
        "config": _config_events,
        "action": _audit_events,
    }
    kinds = KINDS if filters.kinds is None else filters.kinds
    events = [e for kind in kinds for e in sources[kind](session, filters, limit)]
    order = {kind: i for i, kind in enumerate(KINDS)}
    events.sort(key=lambda e: (e.at, -order[e.kind]), reverse=True)
    return events[:limit]


def actors(session: Session) -> list[str]:
    """Everyone the timeline can name: decision actors, config authors, audit log actors."""
    names: set[str] = set()
    names.update(session.scalars(select(Decision.actor).distinct()))
    names.update(session.scalars(select(TaskConfigVersion.created_by).distinct()))
    names.update(session.scalars(select(AuditEntry.actor).distinct()))
    return sorted(names)


COLUMNS = tuple(f.name for f in fields(Event))


def rows(events: list[Event]) -> list[dict[str, Any]]:
    """The events as flat rows (`at` in ISO 8601), in COLUMNS order."""
    return [{**asdict(e), "at": e.at.isoformat()} for e in events]


# A cell a spreadsheet would read as a formula starts with one of these (OWASP's CSV
# injection rule): such a cell is written after a single quote, so it opens as text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """`value` as the CSV writes it: a text starting like a formula gets a leading `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(events: list[Event]) -> str:
    """The events as CSV with a header row (COLUMNS), as the Audit page downloads it; no
    cell starts like a formula (`csv_cell`), whoever wrote a reason or named a key."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows(events))
    return out.getvalue()
