"""A job's parameters: what it reads, how, and where it writes; stored with the job."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from worker.jobs.decode import Columns

# Request ids are "{job}:{row}" and at most 128 characters.
MAX_NAME_CHARS = 100


class JobParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    input: Path
    output: Path | None = None  # None: a distributed job exports later
    input_columns: tuple[str, ...] = ("inputs",)
    id_column: str | None = None
    label_column: str | None = None
    window_rows: int = Field(default=8192, ge=1)
    batch_size: int | None = Field(default=None, ge=1)  # None: the model's max_batch
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
