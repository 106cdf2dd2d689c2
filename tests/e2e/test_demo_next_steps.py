"""What the demo tells the user to do next works exactly as printed, and the query a user
tries without its ``--database`` says where the demo's database is, creating nothing."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)


def test_the_demos_next_commands_run_as_printed(tmp_path: Path, demo_registry_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLANE_")}
    env["INFERLANE_MODEL_CACHE"] = str(demo_registry_path.parent)

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )

    demo = run([sys.executable, "-m", "worker", "demo", "--digits", "300", "--diabetes", "100",
                "--minilm", "20", "--http-port", "0"])  # fmt: skip
    assert demo.returncode == 0, demo.stdout + demo.stderr
    after = demo.stdout.split("Next:\n", 1)[1].splitlines()
    commands = [shlex.split(line) for line in after if line.startswith("  ")]
    where = ["--database", "sqlite:///inferlane-demo.db"]
    assert [c[-7:] for c in commands[:2]] == [
        ["anomalies", *where, "--model", "diabetes", "--threshold", commands[0][-1]],
        ["anomalies", *where, "--model", "digits", "--threshold", "0.5"],
    ]
    assert commands[2][-3:] == ["drift", *where] and len(commands) == 3
    # diabetes' outputs are in the hundreds: its threshold is the demo table's, not 0.5.
    assert float(commands[0][-1]) > 10
    for command in commands[:2]:
        anomalies = run(command)
        assert anomalies.returncode == 0, anomalies.stdout + anomalies.stderr
        assert f"rows with |output - expected| > {float(command[-1])}" in anomalies.stdout
    drift = run(commands[2])
    assert drift.returncode == 0 and "digits" in drift.stdout, drift.stdout + drift.stderr

    guess = run([sys.executable, "-m", "worker", "anomalies"])
    assert guess.returncode == 1
    assert "add --database sqlite:///inferlane-demo.db" in " ".join(guess.stderr.split())
    assert not (tmp_path / "inferlane.db").exists()
