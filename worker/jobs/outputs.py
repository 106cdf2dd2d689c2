"""Output and error files, written as numbered parts and assembled once the job is done.

Each committed window leaves one part named by its first row; a part is written to a
temporary name and renamed, so a part either exists whole or not at all. Parts at or
past the job's checkpoint belong to a window whose SQL commit did not happen: a resumed
job deletes them and scores those rows again. An empty ``.inflight`` marker names the
window being scored, so that work lost before its part was written is counted too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from worker.jobs.sources import format_of

ERRORS_SUFFIX = ".errors.jsonl"
# The input's ground truth (``--label-column``) in an output file. A prediction's
# ``label`` is written as ``predicted_label``: under its own name it would read as the
# input's label, which the output keeps beside it as ``expected``.
EXPECTED_COLUMN = "expected"
_PREDICTION_NAMES = {"label": "predicted_label"}


def output_table(
    keys: dict[str, pa.Array], predictions: dict[str, pa.Array], expected: pa.Array | None
) -> pa.Table:
    """An output file's rows: ``keys`` (``row``, ``id``), then the prediction's columns
    as files name them, then ``expected`` when the job has a label column."""
    named = {_PREDICTION_NAMES.get(k, k): v for k, v in predictions.items()}
    truth = {EXPECTED_COLUMN: expected} if expected is not None else {}
    return pa.table({**keys, **named, **truth})


def errors_path(output: Path) -> Path:
    return output.with_name(output.name + ERRORS_SUFFIX)


def parts_dir(output: Path) -> Path:
    return output.with_name(output.name + ".parts")


class Parts:
    """The part files of one job's output: ``{start:012d}-{rows}.{kind}``."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.kind = format_of(output)
        self.folder = parts_dir(output)
        self.folder.mkdir(parents=True, exist_ok=True)

    def write(self, start: int, table: pa.Table, errors: list[dict[str, Any]]) -> None:
        """The window's outputs and errors; both are in place when this returns."""
        if errors:
            lines = b"".join(orjson.dumps(e) + b"\n" for e in errors)
            self._atomic(self.folder / f"{start:012d}-{len(errors)}.errors", lines)
        if table.num_rows:
            tmp = self.folder / f"{start:012d}.tmp"
            _write_table(table, tmp, self.kind)
            _sync(tmp)
            tmp.rename(self.folder / f"{start:012d}-{table.num_rows}.{self.kind}")

    def begin(self, start: int, rows: int) -> None:
        (self.folder / f"{start:012d}-{rows}.inflight").touch()

    def end(self, start: int, rows: int) -> None:
        (self.folder / f"{start:012d}-{rows}.inflight").unlink()

    def _atomic(self, path: Path, data: bytes) -> None:
        tmp = path.with_suffix(".tmp")
        with tmp.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        tmp.rename(path)

    def discard_from(self, checkpoint: int) -> int:
        """Delete parts of rows at or past ``checkpoint``; return how many rows their
        windows held (work to redo: one window, the one in flight at the crash)."""
        lost: dict[int, int] = {}
        for path in self.folder.iterdir():
            start, count = _parse(path)
            marker = path.name.endswith(".inflight")
            if start is not None and start < checkpoint:
                if marker:  # committed; the crash came before the marker was removed
                    path.unlink()
                continue
            if start is not None and not path.name.endswith(".errors"):
                lost[start] = max(lost.get(start, 0), count)
            path.unlink()
        return sum(lost.values())

    def _sorted(self, errors: bool) -> Iterator[Path]:
        paths = [
            p
            for p in self.folder.iterdir()
            if p.name.endswith(".errors") == errors and not p.name.endswith(".inflight")
        ]
        return iter(sorted(p for p in paths if _parse(p)[0] is not None))

    def assemble(self) -> None:
        """Concatenate the parts, in row order, into the output and errors files."""
        _replace(self.output, lambda tmp: _concat(list(self._sorted(False)), tmp, self.kind))
        self.assemble_errors(errors_path(self.output))

    def assemble_errors(self, dest: Path) -> None:
        error_parts = list(self._sorted(True))
        _replace(dest, lambda tmp: _cat(error_parts, tmp))

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _parse(path: Path) -> tuple[int | None, int]:
    stem = path.name.split(".", 1)[0]
    start, _, count = stem.partition("-")
    if path.name.endswith(".tmp") or not (start.isdigit() and count.isdigit()):
        return None, 0
    return int(start), int(count)


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(dest: Path, write: Any) -> None:
    tmp = dest.with_name(dest.name + ".tmp")
    write(tmp)
    tmp.replace(dest)


def write_table_file(path: Path, table: pa.Table) -> None:
    """The whole output at once, in the format of ``path``'s extension."""
    _replace(path, lambda tmp: _write_table(table, tmp, format_of(path)))


def write_error_file(path: Path, errors: list[dict[str, Any]]) -> None:
    lines = b"".join(orjson.dumps(e) + b"\n" for e in errors)
    _replace(path, lambda tmp: tmp.write_bytes(lines))


def _write_table(table: pa.Table, path: Path, kind: str) -> None:
    if kind == "parquet":
        pq.write_table(table, path)
    elif kind == "csv":
        pacsv.write_csv(flat(table), path)
    else:
        with path.open("wb") as file:
            file.writelines(orjson.dumps(row) + b"\n" for row in table.to_pylist())


def flat(table: pa.Table) -> pa.Table:
    """CSV cells hold no lists: list columns become JSON text."""
    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_fixed_size_list(field.type):
            text = [orjson.dumps(v).decode() for v in table.column(i).to_pylist()]
            table = table.set_column(i, field.name, pa.array(text, type=pa.string()))
    return table


def _concat(parts: list[Path], dest: Path, kind: str) -> None:
    if kind != "parquet":
        _cat(parts, dest, skip_header=kind == "csv")
        return
    if not parts:
        pq.write_table(pa.table({"row": pa.array([], type=pa.int64())}), dest)
        return
    schema = pq.read_schema(parts[0])
    with pq.ParquetWriter(dest, schema) as writer:
        for part in parts:
            table = pq.read_table(part)
            writer.write_table(table if table.schema == schema else table.cast(schema))


def _cat(parts: list[Path], dest: Path, *, skip_header: bool = False) -> None:
    with dest.open("wb") as out:
        for i, part in enumerate(parts):
            with part.open("rb") as src:
                if skip_header and i:
                    src.readline()
                shutil.copyfileobj(src, out, 1 << 20)
