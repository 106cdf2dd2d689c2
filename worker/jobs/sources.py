"""Input files read in fixed windows of rows: Parquet and CSV as Arrow tables, JSONL as lines.

A window always starts at a multiple of the window size, so a resumed job cuts its
input exactly where the first run did.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
FORMATS |= {".ndjson": "jsonl", ".json": "jsonl"}

_READ_BLOCK_BYTES = 1 << 22


def format_of(path: Path) -> str:
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise ValueError(f"{path}: unknown file type {path.suffix!r}; use one of {known}") from None


@dataclass(slots=True)
class Window:
    """Rows ``start .. start + len`` of the input: an Arrow table or raw JSON lines."""

    start: int
    table: pa.Table | None = None
    lines: list[bytes] | None = None
    # Rows the CSV parser could not split into columns: (line number, reason); they
    # have no row number of their own.
    unparsed: list[tuple[int | None, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines) if self.lines is not None else self.table.num_rows  # type: ignore[union-attr]


def count_rows(path: Path) -> int:
    """Rows in the file (Parquet: from its footer; others: one pass over the bytes)."""
    kind = format_of(path)
    if kind == "parquet":
        return int(pq.ParquetFile(path).metadata.num_rows)
    newlines, last = 0, b"\n"
    with path.open("rb") as file:
        while chunk := file.read(_READ_BLOCK_BYTES):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    lines = newlines + (last != b"\n")
    return lines - 1 if kind == "csv" else lines


def windows(path: Path, rows: int, *, start: int, columns: list[str]) -> Iterator[Window]:
    """Windows of ``rows`` rows from row ``start`` (a multiple of ``rows``) to the end."""
    kind = format_of(path)
    if kind == "jsonl":
        yield from _jsonl_windows(path, rows, start)
    elif kind == "parquet":
        yield from _rewindow(_parquet_batches(path, rows, start, columns), rows, [], start)
    else:
        unparsed: list[tuple[int | None, str]] = []
        yield from _rewindow(_csv_batches(path, columns, unparsed), rows, unparsed, start)


def _parquet_batches(
    path: Path, rows: int, start: int, columns: list[str]
) -> Iterator[pa.RecordBatch]:
    file = pq.ParquetFile(path)
    missing = sorted(set(columns) - set(file.schema_arrow.names))
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)}")
    # Skip whole row groups before ``start``; the rest is cut in ``_rewindow``.
    groups: list[int] = []
    skipped = 0
    for i in range(file.num_row_groups):
        n = file.metadata.row_group(i).num_rows
        if skipped + n <= start and not groups:
            skipped += n
            continue
        groups.append(i)
    if skipped:
        yield pa.record_batch({"__skip__": pa.nulls(skipped)})
    if groups:
        yield from file.iter_batches(batch_size=rows, row_groups=groups, columns=columns)


def _csv_batches(
    path: Path, columns: list[str], unparsed: list[tuple[int | None, str]]
) -> Iterator[pa.RecordBatch]:
    def bad_row(row: pacsv.InvalidRow) -> str:
        unparsed.append(
            (row.number, f"expected {row.expected_columns} columns, got {row.actual_columns}")
        )
        return "skip"

    with path.open(newline="") as file:
        names = next(csv.reader(file), [])
    missing = sorted(set(columns) - set(names))
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)}")
    # Strings first: a column inferred as numbers from its first block would fail the
    # whole read at the first bad value further down; each window converts its own.
    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(use_threads=False, block_size=_READ_BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(invalid_row_handler=bad_row),
        convert_options=pacsv.ConvertOptions(
            include_columns=columns, column_types={c: pa.string() for c in columns}
        ),
    )
    yield from reader


def _rewindow(
    batches: Iterator[pa.RecordBatch],
    rows: int,
    unparsed: list[tuple[int | None, str]],
    start: int,
) -> Iterator[Window]:
    """Cut batches into windows that end at multiples of ``rows`` (row numbers count
    from 0); windows before ``start`` are dropped."""
    pending: list[pa.RecordBatch] = []
    held, position = 0, 0
    for batch in batches:
        if batch.schema.names == ["__skip__"]:
            position += batch.num_rows
            continue
        pending.append(batch)
        held += batch.num_rows
        while held and held >= (cut := rows - position % rows):
            table = pa.Table.from_batches(pending)
            window, rest = table.slice(0, cut), table.slice(cut)
            pending, held = rest.to_batches(), rest.num_rows
            taken = _drain(unparsed)
            if position >= start:
                yield Window(position, window, unparsed=taken)
            position += cut
    if held and position >= start:
        yield Window(position, pa.Table.from_batches(pending), unparsed=_drain(unparsed))


def _drain(items: list[tuple[int | None, str]]) -> list[tuple[int | None, str]]:
    taken = list(items)
    items.clear()
    return taken


def _jsonl_windows(path: Path, rows: int, start: int) -> Iterator[Window]:
    with path.open("rb") as file:
        for _ in range(start):
            if not file.readline():
                return
        position = start
        while True:
            lines = [line for line in (file.readline() for _ in range(rows)) if line]
            if not lines:
                return
            yield Window(position, lines=[line.rstrip(b"\r\n") for line in lines])
            position += len(lines)
