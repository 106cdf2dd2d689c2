"""Rows as PostgreSQL COPY text, built a column at a time with Arrow.

psycopg's ``Copy.write_row`` adapts each value in Python, as the bind processors do before
it: together they cost about as much CPU per row as PostgreSQL spends storing it. Here
each column becomes one Arrow array (a C loop over the column's values), Arrow's kernels
format, escape and join it, and the text goes to ``Copy.write`` in one buffer. What is
left per value in Python: the transpose, and JSON through the engine's serializer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Table
from sqlalchemy.types import TypeEngine

from storage.engine import json_text
from storage.errors import RowsRefused
from storage.records import RowColumns, Same

# Rows per Arrow array: each payload piece stays far below Arrow's 2 GiB string offsets.
SLICE_ROWS = 65_536

# What COPY's text format escapes (the delimiter, line ends, the escape itself).
_SPECIAL = r"[\\\t\n\r]"
_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))
_NULL = "\\N"


class _Kind(Enum):
    """Columns formatted in Python first; the rest are Arrow types, cast to text."""

    JSON = "json"
    TEXT = "text"
    TIME = "timestamp"


@dataclass(frozen=True, slots=True)
class CopyText:
    """The COPY text of ``columns`` of a table: each column's kind, from its SQL type."""

    columns: tuple[str, ...]
    kinds: tuple[_Kind | pa.DataType, ...]

    @classmethod
    def compile(cls, table: Table, columns: Sequence[str]) -> CopyText:
        return cls(tuple(columns), tuple(_kind(table.c[name].type) for name in columns))

    def payload(self, rows: Sequence[Sequence[Any]]) -> Iterator[memoryview]:
        """``rows`` (values in ``columns`` order, unbound) as COPY text, in pieces."""
        for start in range(0, len(rows), SLICE_ROWS):
            piece = rows[start : start + SLICE_ROWS]
            yield self._lines(list(zip(*piece, strict=True)), len(piece))

    def payload_columns(self, rows: RowColumns) -> Iterator[memoryview]:
        """``rows`` as COPY text, in pieces: a ``Same`` column is formatted once."""
        for start in range(0, rows.length, SLICE_ROWS):
            end = min(start + SLICE_ROWS, rows.length)
            columns = [rows.columns[name] for name in self.columns]
            yield self._lines(
                [c if isinstance(c, Same) else c[start:end] for c in columns], end - start
            )

    def _lines(self, columns: Sequence[Sequence[Any] | Same], length: int) -> memoryview:
        texts = [
            self._column(name, kind, values, length)
            for name, kind, values in zip(self.columns, self.kinds, columns, strict=True)
        ]
        lines = pc.binary_join_element_wise(
            *texts, "\t", null_handling="replace", null_replacement=_NULL
        )
        lines = pc.binary_join_element_wise(lines, "", "\n")  # each line ends in one
        _, offsets, data = lines.buffers()
        ends = np.frombuffer(offsets, np.int32)[lines.offset : lines.offset + len(lines) + 1]
        return memoryview(data)[ends[0] : ends[-1]]

    @staticmethod
    def _column(
        name: str, kind: _Kind | pa.DataType, values: Sequence[Any] | Same, length: int
    ) -> pa.Array:
        try:
            if isinstance(values, Same):
                return pa.repeat(_text(kind, [values.value])[0], length)
            # A column of rows often holds one value in every row: formatted once. (Not
            # JSON: equal values, such as 1 and 1.0, may be written differently.)
            if kind is not _Kind.JSON and values.count(values[0]) == len(values):
                return pa.repeat(_text(kind, values[:1])[0], length)
            return _text(kind, values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            # A value its column cannot hold, as the database would refuse it.
            raise RowsRefused(f"column {name}: {exc}") from exc


def _text(kind: _Kind | pa.DataType, values: Sequence[Any]) -> pa.Array:
    if kind is _Kind.JSON:  # none_as_null: None is SQL NULL, not the JSON text 'null'
        texts = [None if v is None else json_text(v) for v in values]
        return _escaped(pa.array(texts, pa.string()))  # typed: all None is a null array
    if kind is _Kind.TEXT:
        return _escaped(pa.array(values, pa.string()))
    if kind is _Kind.TIME:
        return _timestamps(values)
    # Through the values' own type: a safe cast refuses 1.5 for an integer column, which
    # pa.array(values, int64) would truncate.
    return pc.cast(pc.cast(pa.array(values), kind), pa.string())


def _kind(sql_type: TypeEngine[Any]) -> _Kind | pa.DataType:
    if isinstance(sql_type, JSON):
        return _Kind.JSON
    if isinstance(sql_type, String):
        return _Kind.TEXT
    if isinstance(sql_type, DateTime):
        return _Kind.TIME
    if isinstance(sql_type, Boolean):
        return pa.bool_()
    if isinstance(sql_type, Integer):
        return pa.int64()
    if isinstance(sql_type, Float):
        return pa.float64()  # formatted in the shortest form that reads back exactly
    raise TypeError(f"no COPY text format for the SQL type {sql_type!r}")


def _escaped(texts: pa.Array) -> pa.Array:
    if not pc.any(pc.match_substring_regex(texts, _SPECIAL)).as_py():
        return texts
    for old, new in _ESCAPES:
        texts = pc.replace_substring(texts, old, new)
    return texts


def _timestamps(values: Sequence[Any]) -> pa.Array:
    """ISO 8601 text from ``datetime.isoformat``, once per distinct time: Arrow takes
    about 2.5 µs to convert each aware datetime."""
    index: dict[Any, int] = {}
    positions = [index.setdefault(v, len(index)) for v in values]
    texts = pa.array([None if v is None else v.isoformat() for v in index], pa.string())
    return texts.take(pa.array(positions, pa.int32()))
