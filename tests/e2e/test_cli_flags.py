"""One flag name for one thing: old spellings still work, with a warning on stderr, and
``publish`` says what its help says about ``--bootstrap``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

DIABETES = """\
[[models]]
name = "diabetes"
version = "1"
format = "factory"
factory = "worker.demo.models:build_diabetes"
path = "{weights}"
adapter = {{ kind = "regressor", features = 10 }}
"""


def inferlane(*args: str, cwd: Path, models: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLANE_")}
    env["INFERLANE_MODEL_CACHE"] = str(models.parent)
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("command", ["list", "check"])
def test_the_registry_as_an_argument_still_works_with_a_warning(
    command: str, tmp_path: Path, demo_registry_path: Path
) -> None:
    registry = tmp_path / "registry.toml"  # the demo's small regressor alone: quick to check
    weights = demo_registry_path.parent / "diabetes-1.safetensors"
    registry.write_text(DIABETES.format(weights=weights))
    old = inferlane("models", command, str(registry), cwd=tmp_path, models=demo_registry_path)
    new = inferlane("models", command, "--models", str(registry), cwd=tmp_path,
                    models=demo_registry_path)  # fmt: skip
    assert old.returncode == new.returncode == 0, old.stderr + new.stderr
    assert "diabetes" in old.stdout and old.stdout == new.stdout
    warning = "warning: the registry as an argument is deprecated and will go away; use --models"
    assert warning in old.stderr and "warning" not in new.stderr


def test_metrics_port_still_sets_the_http_port_with_a_warning(
    tmp_path: Path, demo_registry_path: Path
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        ran = inferlane("run", "--metrics-port", str(port), "--database", "sqlite:///x.db",
                        cwd=tmp_path, models=demo_registry_path)  # fmt: skip
    assert ran.returncode == 1
    assert "warning: --metrics-port is deprecated and will go away; use --http-port" in ran.stderr
    assert f"HTTP port {port} on 127.0.0.1 is already in use" in ran.stderr  # the port it took


def test_publish_without_bootstrap_is_the_usage_error_its_help_promises(
    tmp_path: Path, demo_registry_path: Path
) -> None:
    (tmp_path / "r.jsonl").write_text("{}\n")
    ran = inferlane("publish", "r.jsonl", cwd=tmp_path, models=demo_registry_path)
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert "Missing option '--bootstrap'" in ran.stderr and "INFERLANE_BOOTSTRAP" in ran.stderr
    shown = inferlane("publish", "--help", cwd=tmp_path, models=demo_registry_path)
    assert "required" in shown.stdout and "unset: start" not in shown.stdout
