"""A job's parameters: what it reads, how, and where it writes; stored with the job."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from worker.jobs.decode import Columns, NumericAdapter
from worker.models import Adapter

# Request ids are "{job}:{row}" and at most 128 characters.
MAX_NAME_CHARS = 100
NUMERIC_WINDOW_ROWS = 32_768
TEXT_WINDOW_ROWS = 2048


class JobParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    input: Path
    output: Path | None = None  # None: a distributed job exports later
    input_columns: tuple[str, ...] = ("inputs",)
    id_column: str | None = None
    label_column: str | None = None
    # Rows per checkpoint; None: by the model's kind (below).
    window_rows: int | None = Field(default=None, ge=1)
    batch_size: int | None = Field(default=None, ge=1)  # None: the batch controller decides
    sql_results: bool = True

    @field_validator("input_columns")
    @classmethod
    def _split_commas(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        split = tuple(c.strip() for name in names for c in name.split(",") if c.strip())
        if not split:
            raise ValueError("at least one input column is required")
        return split

    @property
    def columns(self) -> Columns:
        return Columns(self.input_columns, self.id_column, self.label_column)

    def window_for(self, adapter: Adapter) -> int:
        """Numeric rows are cheap (large windows: fewer commits); text costs a forward
        pass of milliseconds per row (small windows: little to redo after a crash)."""
        if self.window_rows is not None:
            return self.window_rows
        return NUMERIC_WINDOW_ROWS if isinstance(adapter, NumericAdapter) else TEXT_WINDOW_ROWS

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def default_name(self) -> str:
        """Stable for the same command, so running it again resumes the same job."""
        key = f"{self.model}|{self.input.resolve()}|{self.output and self.output.resolve()}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        stem = re.sub(r"[^\w.-]", "_", self.input.stem)[:60]
        return f"{stem}-{self.model[:24]}-{digest}"


def check_name(name: str) -> str:
    if not 1 <= len(name) <= MAX_NAME_CHARS or ":" in name:
        raise ValueError(f"job names are 1-{MAX_NAME_CHARS} characters without ':', got {name!r}")
    return name
