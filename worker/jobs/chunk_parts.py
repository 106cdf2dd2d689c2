"""A distributed job's part files: written by whichever worker scores a window, read back
in row order by ``jobs export``.

The folder is a local path that every worker reaches (a shared filesystem) or a URI of
an object store, through pyarrow's filesystems. A window's output part is Parquet and
its bad rows a JSON Lines part, both named by the window's first row and the claim's
attempt, so a worker that lost its claim never overwrites the files of the one that took
over. Only the files that SQL records as committed (``job_parts``) are ever read.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.job_chunks import Claim, Part
from worker.jobs.outputs import flat
from worker.jobs.params import JobParams
from worker.jobs.sources import Source, filesystem, format_of, is_uri, sibling


def parts_folder(name: str, params: JobParams) -> Source:
    """Beside the output, or beside the input when the job was published without one."""
    return sibling(params.output or sibling(params.input, f".{name}"), ".parts")


class ChunkParts:
    def __init__(self, folder: Source) -> None:
        self._fs, self._folder = filesystem(folder)
        self._local = not is_uri(folder)
        self._fs.create_dir(self._folder, recursive=True)

    def write(
        self, claim: Claim, start: int, table: pa.Table, errors: list[dict[str, Any]]
    ) -> Part:
        """The window's files, whole in place when this returns; their names for SQL."""
        stem = f"{start:012d}-a{claim.attempt}"
        output = errors_name = None
        if table.num_rows:
            output = f"{stem}.parquet"
            self._put(output, lambda sink: pq.write_table(table, sink))
        if errors:
            lines = b"".join(orjson.dumps(e) + b"\n" for e in errors)
            errors_name = f"{stem}.errors.jsonl"
            self._put(errors_name, lambda sink: sink.write(lines))
        return Part(start, len(table), output, errors_name)

    def discard(self, claim: Claim) -> None:
        """Files of earlier attempts at this chunk's uncommitted rows: their windows did
        not commit, and this claim scores them again."""
        selector = pafs.FileSelector(self._folder, allow_not_found=True)
        for info in self._fs.get_file_info(selector):
            start, attempt = _parse(info.base_name)
            if start is None or attempt >= claim.attempt:
                continue
            if claim.checkpoint <= start < claim.end:
                self._fs.delete_file(info.path)

    def read(self, name: str) -> pa.Table:
        with self._fs.open_input_file(f"{self._folder}/{name}") as file:
            return pq.read_table(file)

    def lines(self, name: str) -> bytes:
        with self._fs.open_input_stream(f"{self._folder}/{name}") as file:
            return bytes(file.read())

    def remove(self) -> None:
        self._fs.delete_dir(self._folder)

    def _put(self, name: str, write: Any) -> None:
        """Whole or not at all: an object store shows an object once it is closed; a
        local file is written under a temporary name, synced and renamed."""
        path = f"{self._folder}/{name}"
        if not self._local:
            with self._fs.open_output_stream(path) as sink:
                write(sink)
            return
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as sink:
            write(sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(tmp, path)


def _parse(name: str) -> tuple[int | None, int]:
    """``(first row, attempt)`` of a part file's name; None for any other file."""
    stem = name.split(".", 1)[0]
    start, _, attempt = stem.partition("-a")
    if name.endswith(".tmp") or not (start.isdigit() and attempt.isdigit()):
        return None, 0
    return int(start), int(attempt)


def assemble(parts: ChunkParts, committed: list[Part], dest: Source) -> int:
    """The committed windows' outputs, in row order, as one file in ``dest``'s format
    (written under a temporary name, then renamed); returns the rows written."""
    kind = format_of(dest)
    fs, path = filesystem(dest)
    tables = (parts.read(p.output) for p in committed if p.output is not None)
    tmp = f"{path}.tmp"
    with fs.open_output_stream(tmp) as sink:
        written = _write_all(tables, sink, kind)
    fs.move(tmp, path)
    return written


def _write_all(tables: Iterator[pa.Table], sink: Any, kind: str) -> int:
    written = 0
    first = next(tables, None)
    if first is None:
        empty = pa.table({"row": pa.array([], type=pa.int64())})
        if kind == "parquet":
            pq.write_table(empty, sink)
        elif kind == "csv":
            pacsv.write_csv(empty, sink)
        return 0
    schema, every = first.schema, itertools.chain([first], tables)
    if kind == "parquet":
        with pq.ParquetWriter(sink, schema) as writer:
            for table in every:
                writer.write_table(table if table.schema == schema else table.cast(schema))
                written += table.num_rows
    elif kind == "csv":
        with pacsv.CSVWriter(sink, flat(first).schema) as writer:
            for table in every:
                writer.write_table(flat(table))
                written += table.num_rows
    else:
        for table in every:
            sink.write(b"".join(orjson.dumps(row) + b"\n" for row in table.to_pylist()))
            written += table.num_rows
    return written


def assemble_errors(parts: ChunkParts, committed: list[Part], dest: Source) -> int:
    """The committed windows' bad rows, in row order, as one JSON Lines file; a CSV
    line that could not be split is read by every chunk that parses past it, so each
    line number is kept once. Returns the lines written."""
    fs, path = filesystem(dest)
    seen: set[int] = set()
    written = 0
    tmp = f"{path}.tmp"
    with fs.open_output_stream(tmp) as sink:
        for p in committed:
            if p.errors is None:
                continue
            for line in parts.lines(p.errors).splitlines():
                unparsed = orjson.loads(line).get("line")
                if unparsed is not None:
                    if unparsed in seen:
                        continue
                    seen.add(unparsed)
                sink.write(line + b"\n")
                written += 1
    fs.move(tmp, path)
    return written
