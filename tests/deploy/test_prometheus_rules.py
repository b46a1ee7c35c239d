"""deploy/prometheus: `promtool check rules` and `promtool test rules` pass; every alert
fires in the unit tests; every rule is shaped for paging (a `for:`, a severity, a summary,
a description and a runbook that exists in the repository)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
README = ROOT / "deploy" / "README.md"
UNIT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
SEVERITIES = {"critical", "warning"}


def promtool(*args: str, cwd: Path) -> None:
    """Runs promtool; fails with its output."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail(
            "promtool not found: run scripts/test, which installs Debian's prometheus "
            "package (promtool is in it), to check deploy/prometheus."
        )
    done = subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


def alerting_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules() -> None:
    promtool("check", "rules", RULES.name, cwd=RULES.parent)


def test_promtool_unit_tests_pass() -> None:
    promtool("test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)


def test_every_alert_fires_in_the_unit_tests_and_one_test_is_all_silence() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    checks = [check for test in tests for check in test.get("alert_rule_test", [])]
    firing = {check["alertname"] for check in checks if check.get("exp_alerts")}
    names = {rule["alert"] for rule in alerting_rules()}
    assert names - firing == set(), "alerts no unit test sees firing"
    assert firing - names == set(), "unit tests expecting alerts alerts.yml does not have"
    silent = [
        test["name"]
        for test in tests
        if {c["alertname"] for c in test.get("alert_rule_test", []) if not c.get("exp_alerts")}
        == names
    ]
    assert silent, "no unit test where every alert stays silent"


def test_the_readme_table_lists_every_alert_with_its_severity() -> None:
    """deploy/README.md's table is what an SRE routes and reads by: one row per rule, with
    the severity the rule carries."""
    rows = re.findall(r"^\| `(Shadowplane\w+)` \| (\w+) \|", README.read_text(), re.M)
    assert dict(rows) == {rule["alert"]: rule["labels"]["severity"] for rule in alerting_rules()}
    assert len(rows) == len(dict(rows))


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (not a `#` line of a code block)."""
    prose = re.sub(r"^ *```.*?^ *```", "", markdown, flags=re.M | re.S)
    headings = re.findall(r"^#{1,6} +(.+?) *$", prose, re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


def test_every_rule_has_a_for_a_severity_a_summary_and_a_runbook_that_exists() -> None:
    for rule in alerting_rules():
        name = rule["alert"]
        assert re.fullmatch(r"[1-9]\d*[smh]", rule.get("for", "")), (
            f"{name}: for: {rule.get('for')}"
        )
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name
        path, _, anchor = annotations["runbook_url"].partition("#")
        runbook = ROOT / path
        assert runbook.is_file(), f"{name}: {path} is not a file of the repository"
        assert anchor in github_anchors(runbook.read_text(encoding="utf-8")), (
            f"{name}: {path} has no heading #{anchor}"
        )


def test_github_anchors_are_made_as_github_makes_them() -> None:
    text = (
        "## Alerts\n### Input shift: the alert, a rollback, `needs_regrade`\n"
        "```sh\n# a comment, not a heading\n```\n#### A rollback fired\n"
    )
    assert github_anchors(text) == {
        "alerts",
        "input-shift-the-alert-a-rollback-needs_regrade",
        "a-rollback-fired",
    }
