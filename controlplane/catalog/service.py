"""Applying task configs (versioned, audited), reading tasks back, the one answer to an
unknown task name, and the per-process cache of parsed configs.

A changed config changes the task's flag: `controlplane.rollout.configs.apply_config`
composes this with the flag's publication (the catalog knows nothing of flags).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controlplane.audit.service import record
from controlplane.catalog import repository
from controlplane.catalog.schemas import (
    ConfigError,
    TaskConfig,
    config_document,
    config_hash,
    parse_config,
)
from controlplane.compare.comparators import comparator_version
from controlplane.errors import ActionError
from controlplane.models import Task, TaskConfigVersion
from controlplane.models.base import utcnow

log = logging.getLogger("shadowplane.catalog")


@dataclass(frozen=True, slots=True)
class Applied:
    task: str
    version: int
    changed: bool
    created: bool
    stage: str
    config: dict[str, Any]
    task_id: int = 0
    # The parsed config (None when unchanged: nothing to publish).
    parsed: TaskConfig | None = None


def unparsable(version: int, exc: Exception) -> str:
    """Why stored config `version` does not parse: a ConfigError's errors, or whatever else
    an odd stored document raised."""
    why = exc.errors if isinstance(exc, ConfigError) else [repr(exc)]
    return f"stored config version {version} does not parse: {'; '.join(why)}"


class TaskConflict(RuntimeError):
    """Two writers created the same task at once; the caller may retry."""


def apply_config(session: Session, raw: Any, *, actor: str) -> Applied:
    """Register a task or give it a new config version. Raises ConfigError on a bad config.

    An identical config keeps its version; a changed one makes a new version. `stage` in a
    config applies only when the task is created (stage changes are rollout actions)."""
    config = parse_config(raw)
    document = config_document(config)
    digest = config_hash(document)
    task = repository.task_by_name(session, config.task, for_update=True)
    if task is None:
        return _create(session, config, document, digest, actor)
    current = repository.config_version(session, task.id, task.config_version)
    if current is not None and current.config_hash == digest:
        return Applied(task.name, task.config_version, False, False, task.stage, document, task.id)
    version = task.config_version + 1
    session.add(
        TaskConfigVersion(
            task_id=task.id, version=version, config=document, config_hash=digest, created_by=actor
        )
    )
    task.config_version = version
    task.updated_at = utcnow()
    session.flush()
    record(
        session,
        actor=actor,
        action="task.config",
        task=task.name,
        details={"version": version, "previous_version": version - 1, "config_hash": digest},
    )
    return Applied(task.name, version, True, False, task.stage, document, task.id, config)


def _create(
    session: Session, config: TaskConfig, document: dict[str, Any], digest: str, actor: str
) -> Applied:
    task = Task(name=config.task, stage=config.stage, config_version=1, stage_changed_at=utcnow())
    try:
        with session.begin_nested():
            session.add(task)
            session.flush()
    except IntegrityError as exc:
        raise TaskConflict(f"task {config.task!r} was created concurrently; retry") from exc
    session.add(
        TaskConfigVersion(
            task_id=task.id, version=1, config=document, config_hash=digest, created_by=actor
        )
    )
    session.flush()
    record(
        session,
        actor=actor,
        action="task.create",
        task=task.name,
        details={"version": 1, "stage": task.stage, "config_hash": digest},
    )
    return Applied(task.name, 1, True, True, task.stage, document, task.id, config)


def no_task(name: str) -> str:
    """What every door answers for a task name that is not registered (404), naming the
    field; a long name is cut at 200 characters."""
    return f"task: no task {name[:200]!r}"


def task_or_404(session: Session, name: str, *, for_update: bool = False) -> Task:
    """The named task (locked with `for_update`); ActionError 404 when there is none."""
    task = repository.task_by_name(session, name, for_update=for_update)
    if task is None:
        raise ActionError(404, no_task(name))
    return task


def task_view(session: Session, task: Task) -> dict[str, Any]:
    current = repository.config_version(session, task.id, task.config_version)
    return _view(task, current.config if current else None)


def list_task_views(session: Session) -> list[dict[str, Any]]:
    tasks = repository.all_tasks(session)
    docs = repository.config_documents(session, [(t.id, t.config_version) for t in tasks])
    return [_view(t, docs.get((t.id, t.config_version))) for t in tasks]


def _view(task: Task, document: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "task": task.name,
        "stage": task.stage,
        "version": task.config_version,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
        "config": document,
    }


# --- what ingest needs: the current config of each task, parsed once per version -------


@dataclass(frozen=True, slots=True)
class TaskRuntime:
    id: int
    name: str
    stage: str
    config_version: int
    config: TaskConfig
    comparator_spec: dict[str, Any]
    comparator_version: int


class RuntimeCache:
    """Parsed configs by (task id, version), and which version is current.

    Versions never change, so parsed configs never expire. Which version is current is
    re-read after `current_seconds` (1 s): a new config version applies to ingest within a
    second (each result records the version it was scored with), and a task the cache does
    not know yet is always looked up at once.

    A stored config that no longer parses (one stored before a bound existed) leaves its
    task out, logged once with its errors, so one task never stops the others; a new
    config version brings it back.
    """

    def __init__(self, current_seconds: float = 1.0) -> None:
        self._parsed: dict[tuple[int, int], tuple[TaskConfig, dict[str, Any]]] = {}
        self._broken: dict[tuple[int, int], str] = {}
        self._current: dict[str, tuple[int, int, str]] = {}
        self._current_at = 0.0
        self._current_seconds = current_seconds
        self._lock = threading.Lock()

    def runtimes(self, session: Session, names: set[str]) -> dict[str, TaskRuntime]:
        """The named tasks that exist and whose current config parses."""
        return self.load(session, names)[0]

    def load(
        self, session: Session, names: set[str]
    ) -> tuple[dict[str, TaskRuntime], dict[str, str]]:
        """`runtimes`, and by name why each named task's current config does not parse."""
        fresh = time.monotonic() - self._current_at < self._current_seconds
        if not fresh or not names <= self._current.keys():
            rows = repository.current_versions(session, names)
            with self._lock:
                if not fresh:
                    self._current = {}
                    self._current_at = time.monotonic()
                self._current.update({name: (tid, v, stage) for tid, name, v, stage in rows})
        current = {n: self._current[n] for n in names if n in self._current}
        missing = [
            (tid, v)
            for tid, v, _ in current.values()
            if (tid, v) not in self._parsed and (tid, v) not in self._broken
        ]
        if missing:
            documents = repository.config_documents(session, missing)
            names_by_key = {(tid, v): n for n, (tid, v, _) in current.items()}
            with self._lock:
                for key, document in documents.items():
                    # A ConfigError, or whatever else an odd stored document raises.
                    try:
                        config = parse_config(document, stored=True)
                    except Exception as exc:
                        self._broken[key] = unparsable(key[1], exc)
                        log.exception(
                            "task %s: %s; skipped until a valid config is applied",
                            names_by_key[key],
                            self._broken[key],
                        )
                        continue
                    self._parsed[key] = (config, config.comparator.model_dump(mode="json"))
        out, broken = {}, {}
        for name, (task_id, version, stage) in current.items():
            if (task_id, version) in self._broken:
                broken[name] = self._broken[(task_id, version)]
                continue
            found = self._parsed.get((task_id, version))
            if found is None:
                broken[name] = f"stored config version {version} is missing"
                continue
            config, spec = found
            out[name] = TaskRuntime(
                task_id, name, stage, version, config, spec, comparator_version(spec["kind"])
            )
        return out, broken


# --- the one cache of task configs per process ------------------------------------------

# One RuntimeCache per database (tests and tools may talk to several in one process);
# ingest, window computation, alerts and rollout all read configs through it.
_runtimes: dict[str, RuntimeCache] = {}
_caches_lock = threading.Lock()


def runtime_cache(session: Session) -> RuntimeCache:
    """The process's cache of parsed configs for the session's database."""
    url = session.get_bind().engine.url.render_as_string(hide_password=False)
    with _caches_lock:
        return _runtimes.setdefault(url, RuntimeCache())


def task_runtimes(session: Session, names: set[str]) -> dict[str, TaskRuntime]:
    """The named tasks that exist and whose current config parses, by name."""
    return runtime_cache(session).runtimes(session, names)


def runtime_or_404(session: Session, name: str) -> TaskRuntime:
    """The named task's current config, parsed; ActionError 404 as `task_or_404` when there
    is none (a task whose stored config does not parse is skipped everywhere, as unknown)."""
    found = task_runtimes(session, {name}).get(name)
    if found is None:
        raise ActionError(404, no_task(name))
    return found


def runtimes(session: Session) -> dict[int, tuple[Task, TaskRuntime]]:
    """Every task whose current config parses, with that config, by task id."""
    return load_runtimes(session)[0]


def load_runtimes(
    session: Session,
) -> tuple[dict[int, tuple[Task, TaskRuntime]], dict[int, tuple[Task, str]]]:
    """`runtimes`, and the tasks whose current config does not parse, with why, by task id."""
    tasks = repository.all_tasks(session)
    parsed, broken = runtime_cache(session).load(session, {t.name for t in tasks})
    return (
        {t.id: (t, parsed[t.name]) for t in tasks if t.name in parsed},
        {t.id: (t, broken[t.name]) for t in tasks if t.name in broken},
    )
