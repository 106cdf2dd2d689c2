"""``inferlane models``: list, check, build-demo."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from worker.cli import app

runner = CliRunner()


def test_build_demo_with_copies_then_list_and_check(tmp_path: Path) -> None:
    built = runner.invoke(app, ["models", "build-demo", str(tmp_path), "--copies", "3"])
    assert built.exit_code == 0, built.output
    copies = tmp_path / "copies" / "registry.toml"
    assert sorted(p.name for p in copies.parent.glob("*.pt2")) == [
        f"digits-copy-{i}.pt2" for i in (1, 2, 3)
    ]
    listed = runner.invoke(app, ["models", "list", str(copies), "--load"])
    assert listed.exit_code == 0, listed.output
    assert listed.output.count("device") == 3 and "digits-copy-3" in listed.output
    checked = runner.invoke(app, ["models", "check", str(copies)])
    assert checked.exit_code == 0 and checked.output.count("ok") == 3, checked.output


def test_check_reports_each_broken_model_and_fails(tmp_path: Path, broken_registry: Path) -> None:
    checked = runner.invoke(app, ["models", "check", str(broken_registry)], terminal_width=200)
    assert checked.exit_code == 1
    assert "ok   digits" in checked.output
    assert "FAIL lost" in checked.output and "FAIL mute" in checked.output


def test_reload_touches_only_a_valid_registry(tmp_path: Path, broken_registry: Path) -> None:
    before = broken_registry.stat().st_mtime_ns
    assert runner.invoke(app, ["models", "reload", str(broken_registry)]).exit_code == 0
    assert broken_registry.stat().st_mtime_ns > before
    invalid = tmp_path / "invalid.toml"
    invalid.write_text("[[models]]\nname = 'x'\n")
    stamp = invalid.stat().st_mtime_ns
    assert runner.invoke(app, ["models", "reload", str(invalid)]).exit_code == 2
    assert invalid.stat().st_mtime_ns == stamp
