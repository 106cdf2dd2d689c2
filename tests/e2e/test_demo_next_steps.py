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
    commands = [line.strip() for line in after if line.startswith("  ")]
    assert [c.split()[-3:] for c in commands] == [
        ["anomalies", "--database", "sqlite:///inferlane-demo.db"],
        ["drift", "--database", "sqlite:///inferlane-demo.db"],
    ]
    anomalies, drift = (run(shlex.split(c)) for c in commands)
    assert anomalies.returncode == 0 and "rows with |output - expected| > 0.5" in anomalies.stdout
    assert drift.returncode == 0 and "digits" in drift.stdout, drift.stdout + drift.stderr

    guess = run([sys.executable, "-m", "worker", "anomalies"])
    assert guess.returncode == 1
    assert "add --database sqlite:///inferlane-demo.db" in " ".join(guess.stderr.split())
    assert not (tmp_path / "inferlane.db").exists()
