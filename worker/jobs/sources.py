"""Input files read in fixed windows of rows: Parquet and CSV as Arrow tables, JSONL as lines.

A window always starts at a multiple of the window size from its range's first row, so
a resumed job (or chunk) cuts its input exactly where the first run did. An input is a
local path or a URI that pyarrow's filesystems open (``s3://``, ``gs://``, ``hdfs://``,
``file://``): a distributed job's workers read their chunks from where the input is.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
FORMATS |= {".ndjson": "jsonl", ".json": "jsonl"}

_READ_BLOCK_BYTES = 1 << 22

# A local path, or a URI with a scheme (``s3://bucket/key``).
Source = Path | str


def is_uri(source: Source) -> bool:
    return isinstance(source, str) and "://" in source


def filesystem(source: Source) -> tuple[pafs.FileSystem, str]:
    """The filesystem that holds ``source``, and its path there."""
    if is_uri(source):
        fs, path = pafs.FileSystem.from_uri(str(source))
        return fs, path
    return pafs.LocalFileSystem(), str(Path(source).resolve())


def suffix(source: Source) -> str:
    path = urlsplit(source).path if isinstance(source, str) and is_uri(source) else str(source)
    return PurePosixPath(path).suffix.lower()


def sibling(location: Source, extra: str) -> Source:
    """``location`` with ``extra`` added to its name; a URI keeps its query (options
    such as ``?endpoint_override=host:port&scheme=http`` for an S3-compatible store)."""
    if isinstance(location, Path):
        return location.with_name(location.name + extra)
    parts = urlsplit(location)
    return urlunsplit(parts._replace(path=parts.path + extra))


def format_of(path: Source) -> str:
    try:
        return FORMATS[suffix(path)]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise ValueError(
            f"{path}: unknown file type {suffix(path)!r}; use one of {known}"
        ) from None


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


def count_rows(path: Source) -> int:
    """Rows in the file (Parquet: from its footer; others: one pass over the bytes)."""
    kind = format_of(path)
    if kind == "parquet":
        return int(parquet_file(path).metadata.num_rows)
    fs, where = filesystem(path)
    newlines, last = 0, b"\n"
    with fs.open_input_stream(where) as file:
        while chunk := file.read(_READ_BLOCK_BYTES):
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
    lines = newlines + (last != b"\n")
    return lines - 1 if kind == "csv" else lines


def parquet_file(path: Source) -> pq.ParquetFile:
    fs, where = filesystem(path)
    return pq.ParquetFile(fs.open_input_file(where))


def windows(
    path: Source,
    rows: int,
    *,
    start: int,
    columns: list[str],
    origin: int = 0,
    end: int | None = None,
) -> Iterator[Window]:
    """Windows of ``rows`` rows from row ``start`` (``origin`` plus a multiple of
    ``rows``) up to row ``end`` (None: the end of the input)."""
    kind = format_of(path)
    if kind == "jsonl":
        yield from _jsonl_windows(path, rows, start, end)
        return
    span = _Span(rows, start, origin, end)
    if kind == "parquet":
        yield from _rewindow(_parquet_batches(path, span, columns), span, [])
    else:
        unparsed: list[tuple[int | None, str]] = []
        yield from _rewindow(_csv_batches(path, columns, unparsed), span, unparsed)


@dataclass(frozen=True, slots=True)
class _Span:
    rows: int  # per window
    start: int  # the first row to yield
    origin: int  # windows end at origin + k * rows
    end: int | None  # the row to stop at; None: the end of the input


def check_columns(path: Source, columns: list[str]) -> None:
    """``ValueError`` naming the columns a Parquet or CSV input lacks; reads the footer
    or the header line only (a JSONL row names its own fields)."""
    kind = format_of(path)
    if kind == "jsonl":
        return
    names = parquet_file(path).schema_arrow.names if kind == "parquet" else _csv_header(path)
    _require(path, names, columns)


def _require(path: Source, names: list[str], columns: list[str]) -> None:
    missing = sorted(set(columns) - set(names))
    if missing:
        raise ValueError(f"{path}: no column {', '.join(missing)}")


def _csv_header(path: Source) -> list[str]:
    fs, where = filesystem(path)
    with fs.open_input_stream(where) as raw:
        header = io.TextIOWrapper(io.BufferedReader(raw), newline="").readline()
    return next(csv.reader([header]), [])


def _parquet_batches(path: Source, span: _Span, columns: list[str]) -> Iterator[pa.RecordBatch]:
    file = parquet_file(path)
    _require(path, file.schema_arrow.names, columns)
    # Only the row groups that hold rows start .. end; the rest is cut in ``_rewindow``.
    groups: list[int] = []
    skipped = first = 0
    for i in range(file.num_row_groups):
        n = file.metadata.row_group(i).num_rows
        if first + n <= span.start and not groups:
            skipped += n
        elif span.end is None or first < span.end:
            groups.append(i)
        first += n
    if skipped:
        yield pa.record_batch({"__skip__": pa.nulls(skipped)})
    if groups:
        yield from file.iter_batches(batch_size=span.rows, row_groups=groups, columns=columns)


def _csv_batches(
    path: Source, columns: list[str], unparsed: list[tuple[int | None, str]]
) -> Iterator[pa.RecordBatch]:
    def bad_row(row: pacsv.InvalidRow) -> str:
        unparsed.append(
            (row.number, f"expected {row.expected_columns} columns, got {row.actual_columns}")
        )
        return "skip"

    check_columns(path, columns)
    fs, where = filesystem(path)
    # Strings first: a column inferred as numbers from its first block would fail the
    # whole read at the first bad value further down; each window converts its own.
    reader = pacsv.open_csv(
        fs.open_input_stream(where),
        read_options=pacsv.ReadOptions(use_threads=False, block_size=_READ_BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(invalid_row_handler=bad_row),
        convert_options=pacsv.ConvertOptions(
            include_columns=columns, column_types={c: pa.string() for c in columns}
        ),
    )
    # Closed here, not by the collector: a chunk stops reading before the file's end, and a
    # reader still open at interpreter exit aborts the process (its read-ahead thread).
    with reader:
        yield from reader


def _rewindow(
    batches: Iterator[pa.RecordBatch], span: _Span, unparsed: list[tuple[int | None, str]]
) -> Iterator[Window]:
    """Cut batches into windows that end at ``origin`` plus multiples of ``rows`` (row
    numbers count from 0); windows before ``start`` are dropped, and rows from ``end``."""
    pending: list[pa.RecordBatch] = []
    held, position = 0, 0
    for batch in batches:
        if batch.schema.names == ["__skip__"]:
            position += batch.num_rows
            continue
        pending.append(batch)
        held += batch.num_rows
        while held and held >= (cut := _cut(span, position)):
            table = pa.Table.from_batches(pending)
            window, rest = table.slice(0, cut), table.slice(cut)
            pending, held = rest.to_batches(), rest.num_rows
            taken = _drain(unparsed)
            if position >= span.start:
                yield Window(position, window, unparsed=taken)
            position += cut
            if span.end is not None and position >= span.end:
                return
    if held and position >= span.start:
        yield Window(position, pa.Table.from_batches(pending), unparsed=_drain(unparsed))


def _cut(span: _Span, position: int) -> int:
    """Rows from ``position`` to the end of its window (at most up to ``end``)."""
    cut = span.rows - (position - span.origin) % span.rows
    return cut if span.end is None else min(cut, span.end - position)


def _drain(items: list[tuple[int | None, str]]) -> list[tuple[int | None, str]]:
    taken = list(items)
    items.clear()
    return taken


def _jsonl_windows(path: Source, rows: int, start: int, end: int | None) -> Iterator[Window]:
    fs, where = filesystem(path)
    with fs.open_input_stream(where) as raw:
        file = io.BufferedReader(raw, _READ_BLOCK_BYTES)
        for _ in range(start):
            if not file.readline():
                return
        position = start
        while end is None or position < end:
            n = rows if end is None else min(rows, end - position)
            lines = [line for line in (file.readline() for _ in range(n)) if line]
            if not lines:
                return
            yield Window(position, lines=[line.rstrip(b"\r\n") for line in lines])
            position += len(lines)
