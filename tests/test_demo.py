"""`shadowplane demo --once` on the embedded default: stored, scored results, and a key that works."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text


def test_demo_stores_scored_results_without_servers(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWPLANE_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "demo",
            "--once",
            "--results",
            "300",
            "--port",
            "0",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "ticket_classify    accepted 300, duplicates 0, rejected 0" in out
    assert "invoice_extract    accepted 300, duplicates 0, rejected 0" in out
    assert "reply_rewrite      accepted 300, duplicates 0, rejected 0" in out
    key = out.strip().splitlines()[-1].removeprefix("KEY=")
    assert key.startswith("sp_")
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        outcomes = dict(
            conn.execute(text("SELECT outcome, count(*) FROM results GROUP BY outcome")).all()
        )
    engine.dispose()
    assert sum(outcomes.values()) == 900
    assert outcomes["agree"] > 400 and outcomes["conflict"] > 0
    # The printed key is a real admin key (the API is gone; check it against the stored hash).
    from controlplane.auth.service import hash_key

    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        scopes = conn.execute(
            text("SELECT scopes FROM api_keys WHERE key_hash = :h"), {"h": hash_key(key)}
        ).scalar_one()
    engine.dispose()
    assert "admin" in scopes
    # The reply rewriter's payloads are stored redacted: no customer email or phone left.
    engine = create_engine(f"sqlite:///{tmp_path / 'shadowplane.db'}")
    with engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT p.input, p.edge_output, p.cloud_output FROM payloads p "
                "JOIN results r ON r.id = p.result_id JOIN tasks t ON t.id = r.task_id "
                "WHERE t.name = 'reply_rewrite'"
            )
        ).all()
    engine.dispose()
    assert stored, "conflicting rewrites keep their payloads"
    joined = " ".join(str(v) for row in stored for v in row)
    assert "@example.com" not in joined and "<EMAIL_1>" in joined
