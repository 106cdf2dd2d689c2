"""A distributed job's chunks: row ranges of its input, and the descriptor each one
travels as on the jobs topic.

A Parquet input is cut at row-group boundaries: a worker reads only the row groups of
its chunk (a row group larger than a chunk is cut into ranges, and each reads the group
from its first row). Other formats are cut every ``chunk_rows`` rows; a worker reads
from the file's start to its chunk (JSON Lines skips lines; CSV parses them), so large
distributed jobs read best from Parquet.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from storage.job_chunks import Span
from worker.jobs.sources import Source, format_of, parquet_file

# Numeric windows per chunk by default: a chunk is claimed, read and committed as a
# unit of work; after a worker dies, another takes over from the chunk's checkpoint.
WINDOWS_PER_CHUNK = 4


class ChunkDescriptor(BaseModel):
    """What a worker needs to find its work: the job (its parameters are in SQL), the
    input, the chunk's rows and where its checkpoint stood when it was published."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str = Field(min_length=1, max_length=128)
    chunk: int = Field(ge=0)
    input: str = Field(min_length=1)
    start: int = Field(ge=0)
    rows: int = Field(ge=0)
    checkpoint: int = Field(ge=0)


def plan(source: Source, chunk_rows: int, window_rows: int, total: int) -> list[Span]:
    """The input's chunks, of about ``chunk_rows`` rows (a multiple of ``window_rows``)."""
    rows = max(window_rows, chunk_rows // window_rows * window_rows)
    if format_of(source) == "parquet":
        meta = parquet_file(source).metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        return _by_groups(groups, rows)
    return _ranges(0, total, rows)


def _by_groups(groups: list[int], rows: int) -> list[Span]:
    """Whole row groups, as many as fit in ``rows`` (at least one); a group larger than
    ``rows`` alone is cut into ranges of ``rows``."""
    spans: list[Span] = []
    start = held = 0
    for n in groups:
        if held and held + n > rows:
            spans.append(Span(start, held))
            start, held = start + held, 0
        if n > rows:
            spans += _ranges(start, n, rows)
            start += n
            continue
        held += n
    if held:
        spans.append(Span(start, held))
    return spans


def _ranges(start: int, n: int, rows: int) -> list[Span]:
    return [Span(s, min(rows, start + n - s)) for s in range(start, start + n, rows)]
