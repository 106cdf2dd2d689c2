"""Alert rules: valid for promtool, and every rule has a unit test that fires it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from .support import require_binary

PROMETHEUS = Path(__file__).parents[2] / "compose" / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = require_binary("promtool")
    return subprocess.run(
        [promtool, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60
    )


def test_rules_are_valid() -> None:
    done = _promtool("check", "rules", "alerts.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


def test_rule_unit_tests_pass() -> None:
    done = _promtool("test", "rules", "alerts_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_has_a_unit_test_that_expects_it_to_fire() -> None:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tests = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())
    fired = {
        t["alertname"]
        for case in tests["tests"]
        for t in case["alert_rule_test"]
        if t.get("exp_alerts")
    }
    assert names == fired
