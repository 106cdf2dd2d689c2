"""README's Configuration table is the one the settings code writes, it fits in 40 rows,
and a setting without a row stops the table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worker.settings import table

README = Path(__file__).parent.parent.parent / "README.md"


def test_the_readme_table_is_the_generated_one() -> None:
    text = README.read_text()
    assert table.written_into(text) == text, (
        "run: python -m worker.settings.table --write README.md"
    )


def test_the_table_fits_in_40_rows_and_holds_every_setting() -> None:
    rows = table.rows_of_settings()
    assert len(rows) <= 40
    held = sorted(name for names, _ in rows for name in names)
    assert held == sorted(table.settings_paths())


def test_a_setting_without_a_row_stops_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    without_gc = tuple(r for r in table.ROWS if r.names != ("gc.full_every_s",))
    monkeypatch.setattr(table, "ROWS", without_gc)
    with pytest.raises(ValueError, match=r"settings without a row: gc\.full_every_s"):
        table.render()


def test_the_command_prints_the_table() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "worker.settings.table"], capture_output=True, text=True, check=True
    )
    assert printed.stdout == table.render()
