"""A seeded database for the dashboard's tests: the simulated long-ticket rollout (two
tasks, four windows, ticket_classify rolled back at its third breaching window, review
items sampled, the first ones labelled and backfilled), keys of every scope, and a helper
that opens a page of the app through Streamlit's AppTest, signed in with one of them.

The seed runs once per backend; each test gets a copy of its own, and a module's read-only
page tests share one copy (`seeded_once`) and one render of each page they read."""

from __future__ import annotations

import functools
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from streamlit.components.v2 import manifest_scanner
from streamlit.testing.v1 import AppTest

from controlplane.db import get_engine, make_engine
from controlplane.keys import sessions
from controlplane.keys.actions import create_key
from controlplane.migrate import upgrade
from controlplane.review import actions as review
from controlplane.scheduler import fill_regression_sets
from controlplane.sim.evalset_example import END, REVIEWER, seed
from shadowplane_dashboard.common import SESSION_TOKEN
from tests.conftest import TEMPLATE_DB, _admin_engine, per_worker, pg_admin_url

# Each AppTest run scans every installed distribution's metadata for Streamlit components
# (about 0.1 s of CPU; `streamlit run` scans once, at start). What is installed does not
# change during the suite: the scan runs once a process, its answer kept.
manifest_scanner.scan_component_manifests = functools.cache(  # type: ignore[method-assign]
    manifest_scanner.scan_component_manifests
)

APP = str(Path(__file__).resolve().parents[2] / "shadowplane_dashboard" / "streamlit_app.py")
SEEDED_DB = per_worker("sp_test_dashboard_seed")  # one per pytest-xdist worker
# How many of the sampled review items the seed labels; the others wait in the queue.
LABELLED = 40
# A key per scope (and one of review + read), named after it: "admin", "read", ...
KEY_SCOPES = {
    "admin": ["admin"],
    "read": ["read"],
    "review": ["review"],
    "reviewer2": ["review"],
    "ingest": ["ingest"],
    "flags": ["flags:read"],
}


@dataclass
class Seeded:
    """A copy of the seeded database and the plaintext keys made in it."""

    url: str
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def engine(self):  # type: ignore[no-untyped-def]
        return get_engine(self.url)


def _seed(url: str) -> dict[str, str]:
    engine = make_engine(url)
    try:
        labelled = seed(engine, labelled=LABELLED)
        assert labelled == LABELLED, "the seed has fewer review items than it labels"
        _pair_at_the_head(engine)
        fill_regression_sets(engine)  # as the next scheduler pass does
        return {
            name: create_key(engine, name=name, scopes=scopes, actor="test")[1]
            for name, scopes in KEY_SCOPES.items()
        }
    finally:
        engine.dispose()


def _pair_at_the_head(engine: Engine) -> None:
    """Label the single items at the head of the seeded queue, so the next item any
    reviewer is handed is a pair (the page tests start at one): the rollback's regression
    sample, which holds single items too, is handed out first. A single item shows the
    cloud's answer, the simulator's truth: `correct`."""
    clock = END + timedelta(minutes=5)
    while (item := review.claim(engine, None, REVIEWER, clock)) is not None:
        if item["kind"] == "pair":
            review.release(engine, item["id"], REVIEWER, now=clock)
            return
        review.label(engine, item["id"], REVIEWER, verdict="correct", now=clock)


# The seeded database's keys, once it is made in this process. A test module elsewhere that
# imports `pg_seed` (tests/hostile) holds a fixture of its own, set up apart from this one:
# made again there, the database would get new keys, and the keys the other holds would no
# longer sign in. Both take the one made first.
_PG_SEEDS: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="session")
def pg_seed(pg_template: str) -> Iterator[dict[str, str]]:
    if SEEDED_DB not in _PG_SEEDS:
        admin = _admin_engine()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{SEEDED_DB}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{SEEDED_DB}" TEMPLATE "{TEMPLATE_DB}"'))
        url = make_url(pg_admin_url()).set(database=SEEDED_DB)
        _PG_SEEDS[SEEDED_DB] = _seed(url.render_as_string(hide_password=False))
    yield _PG_SEEDS[SEEDED_DB]
    if _PG_SEEDS.pop(SEEDED_DB, None) is not None:  # the first of them to end drops it
        admin = _admin_engine()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{SEEDED_DB}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def _seeded_copy(keys: dict[str, str]) -> Iterator[Seeded]:
    """A PostgreSQL copy of the seeded database, dropped on leaving."""
    name = f"sp_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{SEEDED_DB}"'))
    url = make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    try:
        yield Seeded(url, dict(keys))
    finally:
        get_engine(url).dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def seeded(pg_seed: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Seeded]:
    """A PostgreSQL copy of the seeded database, the dashboard pointed at it."""
    with _seeded_copy(pg_seed) as copy:
        monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", copy.url)
        yield copy


@pytest.fixture(scope="module")
def seeded_once(pg_seed: dict[str, str]) -> Iterator[Seeded]:
    """One PostgreSQL copy of the seeded database for a module's read-only page tests, the
    dashboard pointed at it while the module runs (a test's own `seeded` points it
    elsewhere for that test only). Nothing may change it: its renders are shared."""
    with _seeded_copy(pg_seed) as copy, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHADOWPLANE_DATABASE_URL", copy.url)
        yield copy


@pytest.fixture(scope="session")
def sqlite_seed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("dashboard-seed") / "seeded.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    keys = _seed(url)
    return path, keys


@pytest.fixture
def seeded_sqlite(
    sqlite_seed: tuple[Path, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Seeded]:
    """A SQLite copy of the seeded database (the embedded default), the dashboard on it."""
    source, keys = sqlite_seed
    path = tmp_path / "seeded.db"
    shutil.copy(source, path)
    url = f"sqlite:///{path}"
    monkeypatch.setenv("SHADOWPLANE_DATABASE_URL", url)
    yield Seeded(url, dict(keys))
    get_engine(url).dispose()


def session_of(seeded: Seeded, key: str) -> str:
    """A real dashboard session of the named key (as the sign-in page starts one): the
    token AppTest holds where a browser's cookie would (AppTest sends no cookies)."""
    token, _ = sessions.start(
        seeded.engine, seeded.keys[key], now=datetime.now(UTC), lasts=timedelta(hours=1)
    )
    return token


def open_page(
    seeded: Seeded, key: str | None, page: str | None = None, *, task: str | None = None
) -> AppTest:
    """The app signed in with the named key by a real session (None: signed out), on `page`
    (a path under dashboard/, e.g. "app_pages/task.py"; None: the default page), after one
    run that renders that page only; `task` opens it as a link with `?task=` does."""
    at = AppTest.from_file(APP, default_timeout=60)
    if key is not None:
        at.session_state[SESSION_TOKEN] = session_of(seeded, key)
    if task is not None:
        at.query_params["task"] = task
    if page is not None:
        # Before the first run AppTest names a page by its file's name, which is each
        # page's url_path in streamlit_app.py: the app runs, signed in, on that page alone.
        at.switch_page(page)
    at.run()
    if page is not None and key is not None:
        assert ran_page(at) == Path(APP).parent / page, f"{page} is not open for key {key!r}"
    return at


def ran_page(at: AppTest) -> Path | None:
    """The page script the last run rendered (None: a page given as a function)."""
    info = at._registered_pages.get(at._finished_page_script_hash, {})
    script = info.get("script_path")
    return Path(str(script)).resolve() if script else None


def shown(markdown: str) -> str:
    """Markdown written through `shadowplane_dashboard.formats.text` as the reader sees it: escapes
    dropped, no-break spaces as spaces, hard breaks as plain line breaks."""
    return _ESCAPED.sub(r"\1", markdown).replace("\u00a0", " ").replace("  \n", "\n")


_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|~<>$:&=^])")


def item_button(at: AppTest, name: str) -> Any:
    """The Review page's button `name` ("verdict-unclear", "review_skip") of the item shown:
    its key ends with the item's id (a press sent from another item's page finds none)."""
    found = [b for b in at.button if re.fullmatch(rf"{re.escape(name)}-\d+", b.key or "")]
    assert len(found) == 1, (name, [b.key for b in at.button])
    return found[0]


def label_first_unclear(at: AppTest) -> tuple[dict[str, Any], dict[str, Any]]:
    """On the Review page as opened: label the item held Unclear; that item, and the next
    item the page then holds."""
    first = dict(at.session_state["review_item"])
    item_button(at, "verdict-unclear").click().run()
    assert not at.exception
    following = dict(at.session_state["review_item"])
    assert following["id"] != first["id"]
    return first, following


def page_text(at: AppTest) -> str:
    """Every text the page wrote (markdown, titles, captions, alerts, metrics, tables), as
    shown: escapes of untrusted text taken out."""
    parts: list[str] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "text", "code"):
        parts += [shown(str(e.value)) for e in getattr(at, kind)]
    for kind in ("error", "warning", "info", "success"):
        parts += [shown(str(e.value)) for e in getattr(at, kind)]
    for m in at.metric:
        parts += [str(m.label), str(m.value)]
    for df in at.dataframe:
        parts.append(df.value.to_string())
    for t in at.table:
        parts.append(t.value.to_string())
    return "\n".join(parts)


# The browser fixtures (the dashboard's own process, Chromium), for every test module here.
from tests.dashboard.browser import (  # noqa: E402, F401
    browser,
    browser_once,
    dashboard,
    dashboard_once,
    screenshots,
)
