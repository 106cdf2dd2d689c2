"""A job's parameters: what it reads, how, and where it writes; stored with the job."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from worker.jobs.decode import Columns, NumericAdapter
from worker.jobs.sources import is_uri
from worker.models import Adapter
from worker.models.generative import GenerativeAdapter

# Request ids are "{job}:{row}" and at most 128 characters.
MAX_NAME_CHARS = 100
NUMERIC_WINDOW_ROWS = 32_768
TEXT_WINDOW_ROWS = 2048
GENERATIVE_WINDOW_ROWS = 256


def _location(value: Any) -> Any:
    """A URI (``s3://bucket/key``) stays as written; any other text is a local path."""
    return Path(value) if isinstance(value, str) and not is_uri(value) else value


# A local path, or a URI of an object store (a distributed job's input and output).
Location = Annotated[Path | str, BeforeValidator(_location)]


class JobParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    input: Location
    output: Location | None = None  # None: a distributed job exports later
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
        pass of milliseconds per row, and a generated text a pass per token (small
        windows: little to redo after a crash)."""
        if self.window_rows is not None:
            return self.window_rows
        if isinstance(adapter, GenerativeAdapter):
            return GENERATIVE_WINDOW_ROWS
        return NUMERIC_WINDOW_ROWS if isinstance(adapter, NumericAdapter) else TEXT_WINDOW_ROWS

    def stored(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def default_name(self) -> str:
        """Stable for the same command, so running it again resumes the same job."""
        output = self.output and _absolute(self.output)
        key = f"{self.model}|{_absolute(self.input)}|{output}"
        digest = hashlib.sha256(key.encode()).hexdigest()[:8]
        stem = re.sub(r"[^\w.-]", "_", PurePosixPath(str(self.input)).stem)[:60]
        return f"{stem}-{self.model[:24]}-{digest}"


def _absolute(location: Path | str) -> Path | str:
    return location.resolve() if isinstance(location, Path) else location


def check_name(name: str) -> str:
    if not 1 <= len(name) <= MAX_NAME_CHARS or ":" in name:
        raise ValueError(f"job names are 1-{MAX_NAME_CHARS} characters without ':', got {name!r}")
    return name
