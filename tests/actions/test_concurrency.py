"""Actions racing each other on real PostgreSQL, with real commits: two promotes naming the
same expected stage (one wins, one 409), and the kill switch thrown and lifted while
people and configs publish flags (no deadlock, no 500). Also: a kill reaches every flag,
even a task's whose stored config no longer parses."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from controlplane.db import session_scope
from controlplane.errors import ActionError
from controlplane.models import Decision, Flag, Task
from controlplane.rollout import actions
from controlplane.rollout.configs import apply_tasks
from controlplane.rollout.evaluation import evaluate_rollout
from tests.conftest import Api, make_api
from tests.test_isolation import config, store_broken_config

pytestmark = pytest.mark.integration
VETO = 0.7


@pytest.fixture
def api(pg_url: str) -> Iterator[Api]:
    # The hammering is the point here: the admin rate limit is opened wide.
    yield from make_api(pg_url, rate_admin_per_second=10_000.0, rate_admin_burst=10_000)


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at once on threads (released together); each one's value or error."""
    start = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        start.wait()
        try:
            out[i] = call()
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "an action hung"
    return out


def stage_of(api: Api, task: str) -> tuple[str, int]:
    with session_scope(api.engine) as session:
        found = session.scalars(select(Task).where(Task.name == task)).one()
        return found.stage, found.canary_step


def promotes(api: Api, task: str) -> int:
    with session_scope(api.engine) as session:
        return len(
            session.scalars(
                select(Decision.id)
                .join(Task, Task.id == Decision.task_id)
                .where(Task.name == task, Decision.action == "promote")
            ).all()
        )


def test_two_promotes_expecting_the_same_stage_one_wins_one_gets_409(api: Api) -> None:
    steps = {"canary_steps": [5, 50]}
    for name in ("raced", "unguarded"):
        apply_tasks(api.engine, [{**config(name), "promotion": steps}], actor="test")

    def promote(task: str, expected: str | None) -> Callable[[], Any]:
        return lambda: actions.promote(
            api.engine,
            task,
            actor="test",
            reason="go",
            force=True,
            expected_stage=expected,
            veto=VETO,
        )

    outcomes = race(*(promote("raced", "shadow") for _ in range(2)))
    won = [o for o in outcomes if isinstance(o, dict)]
    refused = [o for o in outcomes if isinstance(o, ActionError)]
    assert len(won) == 1 and len(refused) == 1, outcomes
    assert refused[0].status == 409 and "it has moved" in str(refused[0].detail)
    assert stage_of(api, "raced") == ("canary", 0) and promotes(api, "raced") == 1
    # The same race at a canary step, named by its edge percent.
    outcomes = race(*(promote("raced", "canary:5") for _ in range(2)))
    assert sorted(type(o).__name__ for o in outcomes) == ["ActionError", "dict"], outcomes
    assert stage_of(api, "raced") == ("canary", 1) and promotes(api, "raced") == 2

    # Without an expected stage both go through, one after the other: two stages on (what
    # the expected stage is for; it also shows the race above is a real one).
    outcomes = race(*(promote("unguarded", None) for _ in range(2)))
    assert all(isinstance(o, dict) for o in outcomes), outcomes
    assert stage_of(api, "unguarded") == ("canary", 1)


def test_the_kill_switch_and_flag_publishers_hammered_at_once_never_deadlock_or_fail(
    api: Api,
) -> None:
    for name in ("busy_a", "busy_b"):
        apply_tasks(api.engine, [config(name)], actor="test")
    stop = threading.Event()
    statuses: Counter[int] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def post(path: str, body: dict[str, Any]) -> None:
        answer = api.client.post(path, json=body, headers=api.headers())
        with lock:
            statuses[answer.status_code] += 1
        assert answer.status_code in (200, 201, 409), (path, answer.status_code, answer.text)

    def hammer(work: Callable[[int], None]) -> Callable[[], None]:
        def loop() -> None:
            i = 0
            try:
                while not stop.is_set() and i < 40:
                    work(i)
                    i += 1
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        return loop

    def kill_and_lift(i: int) -> None:
        post("/v1/kill" if i % 2 == 0 else "/v1/kill/lift", {"reason": f"drill {i}"})

    def people(task: str) -> Callable[[int], None]:
        def work(i: int) -> None:
            step = ("promote", "rollback", "rearm")[i % 3]
            post(f"/v1/tasks/{task}/{step}", {"reason": f"move {i}", "force": True})

        return work

    def configs(i: int) -> None:
        body = {**config("busy_b"), "shadow_rate": 0.5 + (i % 5) / 10}
        post("/v1/tasks", body)

    def policy(i: int) -> None:
        # A policy evaluation of each task: it takes the same locks when it acts.
        from controlplane.catalog.service import runtimes
        from controlplane.db import in_transaction

        with session_scope(api.engine) as session:
            ids = list(runtimes(session))
        for task_id in ids:
            in_transaction(
                api.engine,
                lambda s, t=task_id: evaluate_rollout(s, t, veto=VETO),  # type: ignore[misc]
            )

    threads = [
        threading.Thread(target=hammer(w))
        for w in (kill_and_lift, people("busy_a"), people("busy_b"), configs, policy)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
        assert not t.is_alive(), "deadlocked"
    assert not errors, errors
    assert statuses[200] > 0 and 500 not in statuses
    # Whatever the last kill state, every flag agrees with it.
    with session_scope(api.engine) as session:
        from controlplane.models import FlagState

        killed = session.get(FlagState, 1).killed  # type: ignore[union-attr]
        assert {f.document["killed"] for f in session.scalars(select(Flag))} == {killed}


def test_a_kill_reaches_the_flag_of_a_task_whose_stored_config_does_not_parse(api: Api) -> None:
    apply_tasks(api.engine, [config("broken_task")], actor="test")
    actions.promote(api.engine, "broken_task", actor="test", reason="go", force=True, veto=VETO)
    store_broken_config(api.engine, "broken_task")

    def flag(task: str) -> dict[str, Any]:
        answer = api.client.get(f"/v1/flags/{task}", headers=api.headers("flags:read"))
        return dict(answer.json())

    before = flag("broken_task")
    assert (before["killed"], before["edge_percent"]) == (False, 50)
    killed = actions.kill(api.engine, actor="test", reason="drill")
    after = flag("broken_task")
    assert (after["killed"], after["edge_percent"], after["shadow_rate"]) == (True, 0, 0.0)
    assert after["version"] == before["version"] + 1 and after["stage"] == "canary"
    assert flag("ticket_classify")["killed"] is True
    assert killed["evidence"]["tasks"] == 3
    # Lifting cannot say what a config it cannot read routes: that flag stays on the cloud,
    # and the decision says so.
    lifted = actions.lift(api.engine, actor="test", reason="drill over")
    assert lifted["evidence"]["left_killed"] == ["broken_task"]
    assert flag("broken_task")["killed"] is True and flag("ticket_classify")["killed"] is False


@pytest.mark.parametrize("action", ["promote", "rollback", "kill", "apply"])
def test_every_flag_writer_takes_the_flag_state_before_the_task(api: Api, action: str) -> None:
    """The lock order, observed: while another transaction holds the task's row, the action
    waits for it holding the flag state already (so no writer can hold a task or a flag
    and wait for the flag state: the deadlock of kill against publish cannot form)."""
    import time

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    apply_tasks(api.engine, [config("locked_task")], actor="test")
    if action == "rollback":
        actions.promote(api.engine, "locked_task", actor="t", reason="go", force=True, veto=VETO)
    run: Callable[[], Any] = {
        "promote": lambda: actions.promote(
            api.engine, "locked_task", actor="t", reason="go", force=True, veto=VETO
        ),
        "rollback": lambda: actions.rollback(api.engine, "locked_task", actor="t", reason="r"),
        "kill": lambda: actions.kill(api.engine, actor="t", reason="drill"),
        "apply": lambda: apply_tasks(
            api.engine, [{**config("locked_task"), "shadow_rate": 0.5}], actor="t"
        ),
    }[action]
    with api.engine.connect() as holder:
        holder.execute(text("SELECT id FROM tasks WHERE name = 'locked_task' FOR UPDATE"))
        done = race(lambda: None)  # (warm the pool; nothing else)
        assert done == [None]
        thread = threading.Thread(target=run)
        thread.start()
        with api.engine.connect() as probe:
            for _ in range(200):  # until the action waits on a row lock
                waiting = probe.scalar(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock'"
                    )
                )
                if waiting:
                    break
                # pg_stat_activity is read once per transaction: end it to look again.
                probe.rollback()
                time.sleep(0.05)
            assert waiting, "the action never waited for the task"
            with pytest.raises(OperationalError, match="could not obtain lock"):
                probe.execute(text("SELECT id FROM flag_state WHERE id = 1 FOR UPDATE NOWAIT"))
            probe.rollback()
        holder.rollback()
    thread.join(30)
    assert not thread.is_alive()


def test_the_policy_rolling_back_while_the_kill_switch_is_thrown_and_lifted(api: Api) -> None:
    """The policy really fires (it locks the flag state, the task, its flag, and publishes)
    while kill and lift are hammered at once: a pass per round rolls one canary back on
    regression traffic in windows already past their lateness. No deadlock, no error but the
    expected 409s, one rollback per task, and every flag agrees with the last kill or lift."""
    from datetime import timedelta

    from controlplane.models import FlagState
    from controlplane.scheduler import run_pass
    from tests.rollout.test_rollback_e2e import LATENESS, WINDOW, rewind, window_results
    from tests.rollout.test_rollback_e2e import config as regressing
    from tests.windowdata import post_all

    rounds = ["racing_a", "racing_b", "racing_c"]
    for name in rounds:
        apply_tasks(api.engine, [regressing(name)], actor="test")
        actions.promote(api.engine, name, actor="test", reason="go", force=True, veto=VETO)
    start = rewind(api, windows=3 * len(rounds) + 3)
    total: Counter[str] = Counter()
    lock = threading.Lock()

    for r, task in enumerate(rounds):
        first = 3 * r  # each round its own three windows, none seen by an earlier pass
        for k in range(first, first + 3):
            post_all(api, window_results(task, start, k, {"2048+": 0.4}))
        clock = start + timedelta(seconds=(first + 3) * WINDOW + LATENESS)
        passed = threading.Event()
        done: Counter[str] = Counter()

        def the_pass(clock: Any = clock, passed: threading.Event = passed) -> Any:
            try:
                return run_pass(api.engine, clock, veto=VETO)
            finally:
                passed.set()

        def switch(
            what: str, passed: threading.Event = passed, done: Counter[str] = done
        ) -> Callable[[], int]:
            def loop() -> int:
                refused = 0
                i = 0
                # Until the pass is over, and at least a few times each.
                while not passed.is_set() or i < 5:
                    try:
                        getattr(actions, what)(api.engine, actor="test", reason=f"drill {i}")
                    except ActionError as exc:
                        assert exc.status == 409, exc.detail
                        refused += 1
                    else:
                        with lock:
                            done[what] += 1
                    i += 1
                return refused

            return loop

        outcomes = race(the_pass, switch("kill"), switch("lift"), switch("kill"), switch("lift"))
        assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
        report = outcomes[0]
        assert report.failed == [], report.failed
        assert [(d["task"], d["action"], d["actor"]) for d in report.decisions] == [
            (task, "rollback", "policy")
        ]
        assert done["kill"] > 0 and done["lift"] > 0, (r, done)
        total.update(done)

        with session_scope(api.engine) as session:
            rollbacks = session.scalars(
                select(Decision)
                .join(Task, Task.id == Decision.task_id)
                .where(Task.name == task, Decision.action == "rollback")
            ).all()
            assert [d.actor for d in rollbacks] == ["policy"], r
            switched = session.scalars(
                select(Decision.action)
                .where(Decision.action.in_(("kill", "lift")))
                .order_by(Decision.id)
            ).all()
            # Every kill and lift that succeeded wrote its decision, and they alternate
            # (each needs the other state), so the last one says the state.
            assert Counter(switched) == total, (Counter(switched), total)
            assert all(a != b for a, b in zip(switched, switched[1:], strict=False)), switched
            killed = session.get(FlagState, 1).killed  # type: ignore[union-attr]
            assert killed == (switched[-1] == "kill")
            documents = {f.task_id: f.document for f in session.scalars(select(Flag))}
            assert {d["killed"] for d in documents.values()} == {killed}
            found = session.scalars(select(Task).where(Task.name == task)).one()
            assert found.stage == "rolled_back"
            assert (documents[found.id]["stage"], documents[found.id]["edge_percent"]) == (
                "rolled_back",
                0,
            )
        for other in rounds[r + 1 :]:
            assert stage_of(api, other) == ("canary", 0)
