"""Shared fixtures: real databases (a migrated SQLite file; a migrated PostgreSQL database
of each pytest worker's own, put back before each test), an app on them with keys of every
scope, and PostgreSQL servers of a test's own for tests that stop them.

PostgreSQL comes from SHADOWPLANE_TEST_DATABASE_URL, which `scripts/test` sets after
starting a private server. A test that needs it fails (it is not skipped) when it is absent.
In parallel (pytest-xdist) each worker has databases of its own names (`per_worker`) and a
Redis server of its own (SHADOWPLANE_TEST_REDIS_URL is replaced by it).
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import shutil
import sys
import traceback
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.pool import NullPool
from sqlalchemy.util import LRUCache

import controlplane.db
from controlplane.api import create_app
from controlplane.auth.scopes import SCOPES
from controlplane.compare import native
from controlplane.db import get_engine, session_scope
from controlplane.keys.service import create_key, generate_key
from controlplane.migrate import upgrade
from controlplane.rollout.configs import apply_config
from controlplane.settings import Settings
from tests.dbstate import TABLES, Rows, WorkerDatabase, table_counts
from tests.drills.servers import PgServer, copy_cluster, private_dir

pytest_plugins = ["tests.fixtures"]

# "gw0", "gw1", ... in a pytest-xdist worker; empty when pytest runs in one process.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# Tells this run's databases from another run's on the same server.
RUN = (os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"{os.getpid():x}")[:8]


def per_worker(name: str) -> str:
    """`name` made this run's and this worker's own (a database name every worker, and every
    run on the same server, would otherwise share)."""
    return f"{name}_{RUN}_{WORKER}" if WORKER else f"{name}_{RUN}"


TEMPLATE_DB = per_worker("sp_test_template")
# The day the template was migrated (its day partitions are that day's, a run crossing
# midnight keeps yesterday's).
TEMPLATE_MIGRATED: list[date] = []

# Shared, noisy machines: properties are judged by their examples, never by their speed.
settings.register_profile(
    "shadowplane", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shadowplane")


# The cyclic collector's full passes walk every object a pytest process keeps, and a worker
# keeps more with each module it runs (engines, compiled statements, Hypothesis's and pandas'
# caches): they were about a sixth of the suite's CPU. Collected less often (a young
# generation of 10,000 objects, not 700: most die young by reference counting), and what is
# still alive once a test module is done (collected first, so no garbage is kept) is frozen
# out of the collector's sight. Frozen objects are still freed when their last reference
# goes; only a cycle among them that becomes garbage later stays.
GC_THRESHOLDS = (10_000, 10, 10)


def pytest_configure(config: pytest.Config) -> None:
    gc.set_threshold(*GC_THRESHOLDS)
    controlplane.db.make_engine = _sharing_compiled_sql(controlplane.db.make_engine)  # type: ignore[assignment]
    _noting_where_opened()
    config.addinivalue_line(
        "markers",
        "fresh_db: pg_url is a database cloned for this test alone, dropped after it (for "
        "tests that migrate or change the schema)",
    )


# SQLAlchemy compiles a statement once per engine: its compiled cache is the engine's and
# keyed by the engine's dialect object. Each test has a database URL of its own, so an
# engine of its own, and compiled every statement again: tests/ingest, tests/rollout and
# tests/alerts spent 138 s of CPU with that, 125 s without.
# Here the engines that get_engine makes (controlplane.db.make_engine, so all with the same
# settings) share one dialect object and one compiled cache per backend, driver and server
# version. An engine joins once its own dialect has been initialised from its server (after
# create_engine's own listener, on its first connection: one whose initialisation failed
# joins none); pools, URLs and every cache keyed by a URL stay each test's own.
SHARED_COMPILED_STATEMENTS = 5000
_shared_dialects: dict[tuple[Any, ...], tuple[Dialect, LRUCache[Any, Any]]] = {}


def _sharing_compiled_sql(make: Callable[[str], Engine]) -> Callable[[str], Engine]:
    @functools.wraps(make)
    def make_engine(url: str) -> Engine:
        engine = make(url)
        _made.setdefault(url, []).append(weakref.ref(engine))
        _closing_what_comes_back_late(engine)
        held = weakref.ref(engine)

        def initialised(*_: Any) -> None:
            current = held()
            if current is None:
                return
            dialect = current.dialect
            if dialect.server_version_info is None:
                return  # not initialised: it keeps its own
            key = (dialect.name, dialect.driver, tuple(dialect.server_version_info))
            shared = _shared_dialects.setdefault(
                key, (dialect, LRUCache(SHARED_COMPILED_STATEMENTS))
            )
            current.dialect, current._compiled_cache = shared

        # Registered after create_engine's own listener, which initialises the dialect.
        event.listen(engine.pool, "connect", initialised, once=True)
        return engine

    return make_engine


def _closing_what_comes_back_late(engine: Engine) -> None:
    """A connection checked in after its engine was disposed (a thread of an app that was
    still finishing when the test's teardown disposed it) goes back to the pool that
    dispose() replaced, which nobody reads again: it was closed only when the collector
    freed that pool, and psycopg then warned in whichever test was running. It is closed as
    it comes back instead."""
    held = weakref.ref(engine)

    def checked_in(dbapi_connection: Any, record: Any) -> None:
        current = held()
        pool = record._ConnectionRecord__pool  # the pool it goes back to
        if dbapi_connection is not None and (current is None or pool is not current.pool):
            dbapi_connection.close()

    event.listen(engine.pool, "checkin", checked_in)


# Every engine made for a URL, the process's cache's and those it let go.
_made: dict[str, list[weakref.ref[Engine]]] = {}


def dispose_engines(url: str) -> None:
    """Close the pooled connections of every engine made for `url`. get_engine keeps at
    most controlplane.db.ENGINES; one it lets go during a test (its pool closed) opens
    connections anew for whoever still holds it, and those were left to the garbage
    collector, whose psycopg warns (an error here) in whichever test it runs."""
    for ref in _made.pop(url, []):
        engine = ref()
        if engine is not None:
            engine.dispose()


# A psycopg connection collected while open warns (an error here) in whichever test the
# collector runs in, far from the code that left it open: each connection notes where it
# was opened, and one collected open says so (in the test's captured stderr) as it warns.
def _noting_where_opened() -> None:
    connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]
    collected = psycopg.Connection.__del__

    @functools.wraps(connect)
    def noted(cls: type[psycopg.Connection[Any]], *args: Any, **kwargs: Any) -> Any:
        conn = connect(cls, *args, **kwargs)
        frames = traceback.walk_stack(sys._getframe(1))
        opened = traceback.StackSummary.extract(frames, limit=40, lookup_lines=False)
        opened.reverse()  # the outermost call first, as a traceback
        conn._opened_at = opened
        return conn

    def warned(self: psycopg.Connection[Any], *args: Any) -> None:
        opened = getattr(self, "_opened_at", None)
        if opened is not None and hasattr(self, "pgconn") and not self.closed:
            if not hasattr(self, "_pool"):
                where = "".join(opened.format())
                print(f"psycopg connection collected open; opened at:\n{where}", file=sys.stderr)
        collected(self, *args)

    psycopg.Connection.connect = classmethod(noted)  # type: ignore[assignment]
    psycopg.connect = psycopg.Connection.connect  # the module's name for it, bound at import
    psycopg.Connection.__del__ = warned  # type: ignore[method-assign]


# The tests that read texts run with each reader: the compiled one and the Python reference.
READERS = ("python",) if os.environ.get(native.ENV) == "python" else ("native", "python")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("text_reader") is not None:
        if "text_reader" not in metafunc.fixturenames:
            metafunc.fixturenames.append("text_reader")
        metafunc.parametrize("text_reader", READERS)


@pytest.fixture(autouse=True)
def _switch_text_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `text_reader` test runs with the reader its parameter names, from its first fixture
    on (autouse fixtures are set up before the others: an app it starts logs that reader)
    and in the processes it starts (through the environment)."""
    callspec = getattr(request.node, "callspec", None)
    choice = callspec.params.get("text_reader") if callspec is not None else None
    if choice is None:
        return
    monkeypatch.setenv(native.ENV, choice)
    reader = native._load()
    monkeypatch.setattr(native, "READER", reader)
    monkeypatch.setattr(native, "ACTIVE", reader is not None)


# The longest tests (most of them waiting on servers, windows and processes more than they
# compute), each run by one of the pytest-xdist workers early, so that no worker starts one
# near the end while the others have nothing left.
SLOW_FIRST = (
    "tests/test_demo.py",
    "tests/api/test_schema_fuzz.py",
    "tests/workers/test_after_window.py",
    "tests/drills/",
    "tests/dashboard/test_browser",
    "tests/review/test_blind_adversary.py",
    "tests/packaging/",
    "tests/rollout/test_rollback_e2e.py",
    "tests/test_readme_production.py",
    "tests/rollout/test_flag_serving.py",
    "tests/db/test_partitions_hostile.py",
    "tests/workers/",
    "tests/api/test_app_lifetime.py",
    "tests/db/test_migration_keeps_results.py",
    "tests/api/test_api_command.py",
    "tests/test_operators_worker.py",
    "tests/actions/test_concurrency.py",
    "tests/dashboard/test_hostile_sre.py",
)
# The first of them (the demo, the schema fuzz) start at once; the others are spread over
# the first half of their worker's part, between modules of quick tests.
LEADING = 2
# Before any of those, the two tests of one reset that must run one after the other on
# one worker: a worker runs the first tests it is given before any can be taken from it.
FIRST = "tests/test_database_reset.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `--dist worksteal` gives each of the W workers one contiguous run of the list, in
    # equal parts, then moves tests still waiting from a busy worker to an idle one. Each
    # part holds its share of the longest tests, dealt round; the tests of a module
    # that share a fixture built once per module (a dashboard and its browser, a reviewed
    # corpus) are dealt together, or each worker dealt one would build it again.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))

    def rank(item: pytest.Item) -> int:
        if item.nodeid.startswith(FIRST):
            return -1
        return next(
            (i for i, p in enumerate(SLOW_FIRST) if item.nodeid.startswith(p)), len(SLOW_FIRST)
        )

    ranked = sorted(items, key=rank)
    heads = [item for item in ranked if rank(item) < len(SLOW_FIRST)]
    rest = iter(item for item in ranked if rank(item) == len(SLOW_FIRST))
    parts: list[list[pytest.Item]] = [[] for _ in range(workers)]
    first = [item for item in heads if rank(item) < 0]
    parts[0] += first
    dealt: dict[str, int] = {}
    for item in heads[len(first) :]:
        deal = _shared_with(item)
        dealt.setdefault(deal, len(dealt) % workers)
        parts[dealt[deal]].append(item)
    remaining, ordered = len(items), []
    for i, part in enumerate(parts):
        size = remaining // (workers - i)  # what worksteal hands the i-th worker
        quick = list(itertools.islice(rest, max(size - len(part), 0)))
        leading = [item for item in part if rank(item) < LEADING]
        spread = [item for item in part if rank(item) >= LEADING]
        ordered += leading + _interleaved(spread, quick, phase=(i + 0.5) / workers)
        remaining -= len(part) + len(quick)
    ordered += rest
    items[:] = ordered


def _interleaved(
    slow: list[pytest.Item], quick: list[pytest.Item], phase: float
) -> list[pytest.Item]:
    """`slow`, module by module, spread evenly over the first half of `quick`: a worker
    waiting on a slow test's servers leaves the cores to the quick tests of the others,
    where four workers starting their slow tests together left them idle. Each worker's
    slow tests are a `phase` (0 to 1) of the spacing later than the first worker's, so the
    workers wait at different times. A module whose tests share a fixture built once per
    module is never parted."""
    chunks = [list(run) for _, run in itertools.groupby(slow, key=lambda item: item.path)]
    if not chunks:
        return quick
    shared = {item.path for item in quick if _shared_with(item) != item.nodeid}
    cuts = [
        i
        for i in range(1, len(quick) + 1)
        if i == len(quick) or quick[i].path != quick[i - 1].path or quick[i].path not in shared
    ]
    out: list[pytest.Item] = []
    start = 0
    for n, chunk in enumerate(chunks):
        due = int((n + phase) * len(quick) / (2 * len(chunks)))
        stop = next(cut for cut in cuts if cut >= due) if due > start else start
        out += quick[start:stop] + chunk
        start = stop
    return out + quick[start:]


def _shared_with(item: pytest.Item) -> str:
    """Its module's path when it uses a fixture that lives for a module (or a class or a
    package), else its own id."""
    fixtures = getattr(item, "_fixtureinfo", None)
    defs = fixtures.name2fixturedefs.values() if fixtures is not None else ()
    if any(d[-1].scope in ("module", "class", "package") for d in defs if d):
        return item.nodeid.split("::")[0]
    return item.nodeid


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collecting imported is frozen before the first module runs, as what each module
    # leaves is after it (below): a collection then looks only at what the tests since made.
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # the module's fixtures are torn down by now when the next test is another module's
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def worker_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """In a pytest-xdist worker, a Redis server of the worker's own in place of the shared
    one (SHADOWPLANE_TEST_REDIS_URL), for the whole run."""
    shared = os.environ.get("SHADOWPLANE_TEST_REDIS_URL")
    if not WORKER or not shared:
        yield
        return
    from tests.liveapi import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    os.environ["SHADOWPLANE_TEST_REDIS_URL"] = server.url
    try:
        yield
    finally:
        os.environ["SHADOWPLANE_TEST_REDIS_URL"] = shared
        server.stop()


def pg_admin_url() -> str:
    url = os.environ.get("SHADOWPLANE_TEST_DATABASE_URL")
    if not url:
        pytest.fail("SHADOWPLANE_TEST_DATABASE_URL is not set: run the suite with scripts/test")
    return url


def _admin_engine() -> Engine:
    # NullPool: the outage test restarts the server, so never reuse a pooled connection.
    return create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT", poolclass=NullPool)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A migrated PostgreSQL database that per-test databases are cloned from."""
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{TEMPLATE_DB}"'))
    url = make_url(pg_admin_url()).set(database=TEMPLATE_DB).render_as_string(hide_password=False)
    upgrade(url)
    TEMPLATE_MIGRATED.append(datetime.now(UTC).date())
    get_engine(url).dispose()
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)'))
    admin.dispose()


@contextmanager
def cloned_database() -> Iterator[str]:
    """A fresh migrated PostgreSQL database cloned from the template, dropped afterwards
    (the `pg_template` fixture must be active)."""
    name = f"sp_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"'))
    url = make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        dispose_engines(url)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def pg_worker_db(pg_template: str) -> Iterator[WorkerDatabase]:
    """This worker's PostgreSQL database: cloned from the template once, put back before
    each test that uses it."""
    database = WorkerDatabase(pg_admin_url(), per_worker("sp_test_worker"), TEMPLATE_DB)
    database.create()
    _SEEDS["postgresql"] = _take_seed(database.url, database.base_counts)
    database.reset()
    yield database
    database.drop()


_TEST_NUMBERS = itertools.count(1)


@pytest.fixture
def pg_url(request: pytest.FixtureRequest, pg_template: str) -> Iterator[str]:
    """A migrated PostgreSQL database with nothing written in it, committed to for real: the
    worker's own database put back to its migrated state (rows deleted, sequences
    restarted), or, for a test marked `fresh_db`, a clone of its own."""
    if request.node.get_closest_marker("fresh_db") is not None:
        with cloned_database() as url:
            yield url
        return
    database: WorkerDatabase = request.getfixturevalue("pg_worker_db")
    database.reset()
    # A URL of the test's own for the same database: what a process caches by database
    # URL (engines, parsed task configs keyed by task id and version) is never handed to
    # the next test, whose ids start again from 1.
    url = (
        make_url(database.url)
        .update_query_dict({"application_name": f"sp-test-{next(_TEST_NUMBERS)}"})
        .render_as_string(hide_password=False)
    )
    yield url
    dispose_engines(url)


@pytest.fixture(scope="session")
def migrated_cluster() -> Iterator[PgServer]:
    """A migrated PostgreSQL cluster, stopped: each drill starts a copy of it."""
    template = PgServer(private_dir("sp-drill-template-")).init().start()
    try:
        upgrade(template.url)
        get_engine(template.url).dispose()
    finally:
        template.stop()
    yield template
    shutil.rmtree(template.root, ignore_errors=True)


@pytest.fixture
def own_pg(migrated_cluster: PgServer) -> Iterator[PgServer]:
    """A migrated PostgreSQL server of the test's own, which it may stop, crash and restart
    while the other tests go on with theirs."""
    server = copy_cluster(migrated_cluster)
    try:
        yield server
    finally:
        dispose_engines(server.url)
        if server.running():
            try:
                server.stop("immediate")
            except Exception:  # already stopped by the drill: nothing to do
                pass
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    engine = get_engine(f"sqlite:///{path}")
    base = table_counts(engine)
    engine.dispose()
    seeded = path.with_name("seeded.db")
    shutil.copy(path, seeded)
    _SEEDS["sqlite"] = _take_seed(f"sqlite:///{seeded}", base)
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "shadowplane.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    yield url
    dispose_engines(url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each test using it runs on the embedded SQLite file and on real PostgreSQL."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


TICKET_TASK: dict[str, Any] = {
    "task": "ticket_classify",
    "comparator": {"kind": "label", "labels": ["refund", "exchange", "complaint", "inquiry"]},
}
INVOICE_TASK: dict[str, Any] = {
    "task": "invoice_extract",
    "comparator": {
        "kind": "json_fields",
        "fields": {"amount": "number", "currency": "string"},
        "required": ["amount"],
    },
    "payload_policy": "none",
}


@dataclass
class Api:
    """A running app on a real database, with one key per scope."""

    client: TestClient
    url: str
    keys: dict[str, str] = field(default_factory=dict)

    def headers(self, scope: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[scope]}"}

    def post_results(self, body: Any, scope: str = "ingest") -> Any:
        return self.client.post("/v1/results", json=body, headers=self.headers(scope))

    @property
    def engine(self) -> Engine:
        return get_engine(self.url)


@dataclass
class Seed:
    """What `make_api` writes (a key per scope, the two tasks), taken once per backend, and
    how many rows each table of a migrated database holds."""

    rows: Rows
    base: dict[str, int]


_SEEDS: dict[str, Seed] = {}


def _seed_by_hand(engine: Engine) -> dict[str, str]:
    keys = {}
    with session_scope(engine) as session:
        for scope in SCOPES:
            _, keys[scope] = create_key(session, name=f"{scope}-key", scopes=[scope], actor="test")
        apply_config(session, TICKET_TASK, actor="test")
        apply_config(session, INVOICE_TASK, actor="test")
    return keys


def _take_seed(url: str, base: dict[str, int]) -> Seed:
    engine = get_engine(url)
    every = {table.name for table in TABLES}
    before = Rows.take(engine, every, datetime.now(UTC))
    _seed_by_hand(engine)
    # Taken once the seed is written: every time it wrote lies before this one, so the
    # copies, moved to the time they are made, lie in the past as made by hand.
    after = Rows.take(engine, every, datetime.now(UTC))
    # The tables the seed wrote: new rows, or changed ones (the flag state's revision).
    written = {name for name in every if after.tables[name] != before.tables[name]}
    seed = Rows.take(engine, written, after.taken_at)
    engine.dispose()
    return Seed(seed, base)


def seed_api_data(engine: Engine) -> dict[str, str]:
    """A key per scope (by scope, its secret) and the two tasks, written into `engine`'s
    database: copied from the run's seed when the database holds nothing yet, else made
    one by one as `shadowplane keys create` and `tasks apply` make them."""
    seed = _SEEDS.get(engine.dialect.name)
    if seed is None or not seed.rows.holds_only_base(engine, seed.base):
        return _seed_by_hand(engine)
    keys = {scope: generate_key() for scope in SCOPES}
    seed.rows.write(engine, {f"{scope}-key": secret for scope, secret in keys.items()})
    return keys


def make_api(url: str, **settings: Any) -> Iterator[Api]:
    engine = get_engine(url)
    keys = seed_api_data(engine)
    # No background passes in tests: each test runs the pass itself, at the clock it chooses.
    # The suite's results carry fixed timestamps (2026-11-30…), so the ingest bound on old
    # results is opened wide here; tests of that bound pass their own `max_backfill`.
    defaults = {"tick_seconds": 0, "max_backfill": timedelta(days=36500)}
    app = create_app(Settings(database_url=url, **{**defaults, **settings}))
    with TestClient(app) as client:
        yield Api(client=client, url=url, keys=keys)


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    yield from make_api(db_url)


@pytest.fixture
def pg_api(pg_url: str) -> Iterator[Api]:
    """An app on a fresh migrated PostgreSQL database, for what only PostgreSQL shows."""
    yield from make_api(pg_url)


def make_result(**overrides: Any) -> dict[str, Any]:
    """A valid shadow-traffic result of ticket_classify; override any field."""
    result: dict[str, Any] = {
        "request_id": f"r-{uuid.uuid4().hex[:10]}",
        "task": "ticket_classify",
        "ts": "2026-11-30T02:00:00Z",
        "session_id": "s-1",
        "input_tokens": 300,
        "decision": "edge",
        "served": "cloud",
        "input": {"text": "I want my money back for order 1234"},
        "edge": {"output": "refund", "latency_ms": 41.0, "confidence": 0.9, "model": "small@3"},
        "cloud": {"output": "refund", "latency_ms": 380.0, "model": "large@7"},
    }
    result.update(overrides)
    return result


def _with_metrics_task(url: str) -> Iterator[Api]:
    from tests.windowdata import METRICS_TASK

    for api in make_api(url):
        with session_scope(api.engine) as session:
            apply_config(session, METRICS_TASK, actor="test")
        yield api


@pytest.fixture
def metrics_api(db_url: str) -> Iterator[Api]:
    """An app with `metrics_task` (one-minute windows, 30 s lateness) registered too."""
    yield from _with_metrics_task(db_url)


@pytest.fixture
def pg_metrics_api(pg_url: str) -> Iterator[Api]:
    """`metrics_api` on PostgreSQL only (for tests that share the database with servers)."""
    yield from _with_metrics_task(pg_url)
