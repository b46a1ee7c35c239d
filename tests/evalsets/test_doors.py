"""The eval set doors: the endpoints (scope review; with `read` the NDJSON answer is the
export byte for byte) and `shadowplane evalset backfill|export|compare`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from controlplane.cli import app
from controlplane.db import session_scope
from controlplane.evalsets import service
from controlplane.rollout.configs import apply_config
from tests.conftest import Api, make_api
from tests.evalsets.helpers import TASK, TASK_CONFIG, cli_env, label_by_truth, post_tickets


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    for one in make_api(sqlite_url):
        with session_scope(one.engine) as session:
            apply_config(session, TASK_CONFIG, actor="test")
        yield one


def cli(*args: str, ok: bool = True) -> str:
    done = CliRunner().invoke(app, list(args))
    if ok:
        assert done.exit_code == 0, done.output
    else:
        assert done.exit_code == 1, done.output
    return done.output


def test_endpoints_backfill_list_page_and_serve_the_export(api: Api, tmp_path: Path) -> None:
    ids = post_tickets(api, 7)
    label_by_truth(api.engine, TASK, ids)
    review = api.headers("review")
    assert (
        api.client.post("/v1/evalsets/backfill", json={}, headers=api.headers("read")).status_code
        == 403
    )
    answer = api.client.post("/v1/evalsets/backfill", json={"task": TASK}, headers=review)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "added": 7,
        "tasks": {TASK: {"boundary": 7}},
        "needs_correction": 0,
        "invalid_expected": 0,
        "duplicates": 0,
        "remade": 0,
        "withdrawn": 0,
    }
    assert api.client.post("/v1/evalsets/backfill", headers=review).json()["added"] == 0
    bad = api.client.post("/v1/evalsets/backfill", json={"layer": "gold"}, headers=review)
    assert bad.status_code == 422
    unknown = api.client.post("/v1/evalsets/backfill", json={"task": "nope"}, headers=review)
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]

    with session_scope(api.engine) as session:
        service.export(session, tmp_path)
    exported = (tmp_path / TASK / "boundary.jsonl").read_bytes()
    listing = api.client.get("/v1/evalsets", headers=review).json()
    import hashlib

    assert listing["sets"] == [
        {
            "task": TASK,
            "layer": "boundary",
            "count": 7,
            "sha256": hashlib.sha256(exported).hexdigest(),
        }
    ]
    assert (
        listing["manifest_sha256"]
        == hashlib.sha256((tmp_path / "manifest.json").read_bytes()).hexdigest()
    )

    # The full form needs `read` (a review key reads the blind form: test_blind_export).
    read = api.headers("read")
    raw = api.client.get(
        f"/v1/evalsets/{TASK}/boundary", headers={**read, "Accept": "application/x-ndjson"}
    )
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("application/x-ndjson")
    assert raw.content == exported

    seen, after = [], 0
    while True:
        page = api.client.get(
            f"/v1/evalsets/{TASK}/boundary", params={"after": after, "limit": 3}, headers=read
        ).json()
        seen.extend(page["items"])
        if page["next"] is None:
            break
        after = page["next"]
    assert [json.loads(x) for x in exported.decode().splitlines()] == seen
    assert api.client.get(f"/v1/evalsets/{TASK}/regression", headers=review).json() == {
        "items": [],
        "next": None,
    }
    assert api.client.get("/v1/evalsets/nope/boundary", headers=review).status_code == 404
    assert api.client.get(f"/v1/evalsets/{TASK}/gold", headers=review).status_code == 422


def test_cli_backfill_export_and_compare(api: Api, tmp_path: Path) -> None:
    ids = post_tickets(api, 9)
    label_by_truth(api.engine, TASK, ids)
    out_dir = tmp_path / "sets"
    with cli_env(api.url, str(out_dir)):
        assert "added 9 eval items" in cli(
            "evalset", "backfill", "--task", TASK, "--layer", "boundary"
        )
        assert "added 0 eval items" in cli("evalset", "backfill")
        assert f"{TASK}/boundary.jsonl: 9 items" in cli("evalset", "export", "--task", TASK)
        first = (out_dir / TASK / "boundary.jsonl").read_bytes()
        cli("evalset", "export", "--task", TASK)
        assert (out_dir / TASK / "boundary.jsonl").read_bytes() == first
        assert f"{TASK}/boundary.csv: 9 items" in cli("evalset", "export", "--format", "csv")
        assert "format" in cli("evalset", "export", "--format", "xml", ok=False)
        assert "nope" in cli("evalset", "export", "--task", "nope", ok=False)

        items = [json.loads(x) for x in first.decode().splitlines()]
        run_a = tmp_path / "a.jsonl"
        run_b = tmp_path / "b.jsonl"
        run_a.write_text(
            "".join(
                json.dumps({"id": x["id"], "output": x["edge_output"], "model": "small@3"}) + "\n"
                for x in items
            )
        )
        run_b.write_text(
            "".join(
                json.dumps({"id": x["id"], "output": x["expected"], "model": "small@4"}) + "\n"
                for x in reversed(items)
            )
        )
        table = cli("evalset", "compare", str(run_a), str(run_b))
        assert f"{TASK}: A = small@3, B = small@4; 9 items" in table
        total = [line for line in table.splitlines() if line.startswith("all")][-1].split()
        # Conflicts are every third result: the old model got 6 of 9, the new one all.
        assert total[:6] == ["all", "all", "9", "0.667", "1.000", "+0.333"]

        short = tmp_path / "short.jsonl"
        short.write_text("".join(run_b.read_text().splitlines(keepends=True)[1:]))
        refused = cli("evalset", "compare", str(run_a), str(short), ok=False)
        assert "hold different items" in refused and items[-1]["id"] in refused
        alien = tmp_path / "alien.jsonl"
        alien.write_text(json.dumps({"id": "0" * 64, "output": "x"}) + "\n")
        assert "in no eval set" in cli("evalset", "compare", str(alien), str(alien), ok=False)
        assert "missing.jsonl" in cli(
            "evalset", "compare", str(run_a), str(tmp_path / "missing.jsonl"), ok=False
        )


def test_compare_refuses_unreadable_runs_naming_the_file_line_and_reason(
    api: Api, tmp_path: Path
) -> None:
    from controlplane.evalsets.scoring import MAX_LINE_BYTES

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    good = b'{"id": "x", "output": 1}\n'
    cases = [
        (b"", b"\n", f"{a}: no lines"),
        (good, b"\n\n", f"{b}: no lines"),
        (b'{"id": "\xff\xfe", "output": 1}\n', good, f"{a}:1: not valid UTF-8"),
        (good + b"[" * 100_000 + b"]" * 100_000 + b"\n", good, f"{a}:2: nested deeper than 64"),
        (
            b'{"id": "x", "output": "' + b"y" * MAX_LINE_BYTES + b'"}\n',
            good,
            f"{a}:1: longer than {MAX_LINE_BYTES} bytes",
        ),
        (b"\x00\x01binary", good, f"{a}:1: not a JSON object"),
    ]
    with cli_env(api.url):
        for left, right, words in cases:
            a.write_bytes(left)
            b.write_bytes(right)
            done = CliRunner().invoke(app, ["evalset", "compare", str(a), str(b)])
            assert done.exit_code == 1 and done.exception is not None
            assert isinstance(done.exception, SystemExit), repr(done.exception)
            assert f"error: {words}" in done.output, (words, done.output)


def test_export_into_a_file_or_an_unwritable_folder_is_refused(api: Api, tmp_path: Path) -> None:
    target = tmp_path / "evalsets.jsonl"
    target.write_text("not a folder")
    with cli_env(api.url):
        done = CliRunner().invoke(app, ["evalset", "export", "--out", str(target)])
        assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
        assert f"error: out: {target} is a file, not a folder" in done.output
        assert target.read_text() == "not a folder"
        below = target / "sets"
        done = CliRunner().invoke(app, ["evalset", "export", "--out", str(below)])
        assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
        assert "error: out: cannot write" in done.output
