"""compose/: a valid file (docker-compose config), pinned images, the CLI's env names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from worker.settings import WorkerSettings

from .support import require_binary

COMPOSE = Path(__file__).parents[2] / "compose"


@pytest.fixture(scope="module")
def resolved() -> dict:
    binary = require_binary("docker-compose")
    done = subprocess.run(
        [binary, "-f", str(COMPOSE / "docker-compose.yml"), "config"],
        capture_output=True, text=True, timeout=60, cwd=COMPOSE,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config: dict = yaml.safe_load(done.stdout)
    return config


def test_stack_has_every_service_with_pinned_images(resolved: dict) -> None:
    services = resolved["services"]
    assert set(services) == {
        "kafka", "postgres", "worker-1", "worker-2", "publisher", "prometheus", "grafana",
    }  # fmt: skip
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "KAFKA_PROCESS_ROLES" in services["kafka"]["environment"]  # KRaft
    assert not any("zookeeper" in name for name in services)
    for name, service in services.items():
        image = service.get("image", "")
        tag = image.rsplit(":", 1)[-1] if ":" in image else ""
        assert tag and tag != "latest" and any(c.isdigit() for c in tag), (name, image)
    for worker in ("worker-1", "worker-2"):
        assert services[worker]["build"]["dockerfile"] == "compose/Dockerfile"
    # Scale-out: both workers in one consumer group.
    groups = {
        services[w]["environment"]["INFERLANE_KAFKA__GROUP_ID"] for w in ("worker-1", "worker-2")
    }
    assert groups == {"inferlane"}


def test_worker_env_is_what_the_cli_reads(resolved: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    env = resolved["services"]["worker-1"]["environment"]
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    settings = WorkerSettings()
    assert settings.bootstrap == "kafka:9092"
    assert settings.database_url.startswith("postgresql://inferlane:")
    assert (settings.ops.http_host, settings.ops.http_port) == ("0.0.0.0", 9400)
    assert settings.topics.partitions == 6


def test_prometheus_scrapes_both_workers_and_loads_the_rules() -> None:
    config = yaml.safe_load((COMPOSE / "prometheus" / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job["job_name"] == "inferlane"  # the alert rules' up{job="inferlane"}
    assert job["static_configs"][0]["targets"] == ["worker-1:9400", "worker-2:9400"]
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
