"""Every import points one way (README, "Layout"): the contracts in pyproject.toml's
``[tool.importlinter]`` hold, and they fail on an arrow back up or on a cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` in ``root``, as a developer runs it there (it reads the contracts
    from ``root/pyproject.toml``)."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_packages_keep_their_contracts() -> None:
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the three packages' sources and the contracts, to break on purpose."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for package in ("worker", "consumers", "storage"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def _add_import(tree: Path, module: str, imported: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\nimport {imported}  # noqa\n")


@pytest.mark.parametrize(
    ("module", "imported", "broken"),
    [
        # settings sit below every stage: one reaching up to the facade is an arrow back up
        (
            "worker.settings.sections",
            "worker.facade",
            "worker.settings is not allowed to import worker.facade",
        ),
        # the wire never imports the worker
        ("consumers.contract", "worker.base.pending", "consumers is not allowed to import worker"),
        # drift reads ops' metrics; ops reading drift back closes a cycle between siblings
        ("worker.ops.metrics", "worker.drift.runtime", "No cycles are allowed in worker"),
    ],
)
def test_an_arrow_back_up_or_a_cycle_breaks_a_contract(
    tree: Path, module: str, imported: str, broken: str
) -> None:
    _add_import(tree, module, imported)
    run = lint_imports(tree)
    assert run.returncode == 1, run.stdout + run.stderr
    assert broken in run.stdout


def test_the_worker_and_its_cli_load_without_transformers() -> None:
    """transformers takes seconds to import: it loads with the first generative model,
    so a command that serves or scores none (or fails on its arguments) starts without."""
    probe = (
        "import sys, worker.cli.main, worker.launch, worker.jobs.local;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"
