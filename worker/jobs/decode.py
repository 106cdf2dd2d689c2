"""A window of input rows → the model's prepared items, ids, labels, and the bad rows.

Numeric models read Arrow columns straight into one float32 matrix (a list column, or
several number columns side by side), checked with whole-array operations: no Python
object per row. Everything else goes row by row through the adapter's own
``prepare``, the same validation a Kafka request gets. A generative model's several
input columns are the fields of its inputs object, by name (``prompt``,
``max_new_tokens``, ...), and its labels are the expected text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from consumers.errors import BadInput
from worker.jobs.sources import Window
from worker.models.adapters import Adapter, ClassifierAdapter, RegressorAdapter
from worker.models.generative import GenerativeAdapter

_FLOAT32_MAX = float(np.finfo(np.float32).max)

# Adapters whose items are fixed-size float32 rows.
NumericAdapter = ClassifierAdapter | RegressorAdapter


@dataclass(frozen=True, slots=True)
class Columns:
    inputs: tuple[str, ...]  # one column holds the inputs; several: one number each
    id: str | None = None
    label: str | None = None

    @property
    def names(self) -> list[str]:
        return [*self.inputs, *(c for c in (self.id, self.label) if c is not None)]


@dataclass(slots=True)
class RowError:
    row: int | None  # None: a line the parser could not split into columns
    id: Any
    reason: str
    line: int | None = None
    code: str | None = None  # why the model failed on it; None: the input is bad


@dataclass(slots=True)
class Decoded:
    """The window's good rows, in input order, and its bad ones."""

    rows: np.ndarray  # int64 row numbers
    items: np.ndarray | list[Any]  # a (n, features) float32 matrix for numeric models
    ids: pa.Array | None
    # float64, NaN where a row has no usable label; for a generative model objects, the
    # expected text or None.
    expected: np.ndarray | None
    errors: list[RowError]


def decode(window: Window, adapter: Adapter, columns: Columns) -> Decoded:
    errors = [RowError(None, None, reason, line) for line, reason in window.unparsed]
    if window.lines is not None:
        return _decode_lines(window, adapter, columns, errors)
    table = window.table
    assert table is not None
    rows = np.arange(window.start, window.start + table.num_rows, dtype=np.int64)
    ids = table.column(columns.id).combine_chunks() if columns.id else None
    expected = _labels(table.column(columns.label), adapter) if columns.label else None
    matrix = _matrix(table, adapter, columns) if isinstance(adapter, NumericAdapter) else None
    if matrix is not None:
        items, good = matrix
        bad = np.flatnonzero(~good)
        values = _row_values(table, columns, bad, numeric=True)
        errors += [_error(adapter, rows[i], ids, i, v) for i, v in zip(bad, values, strict=True)]
    else:
        keep, prepared = [], []
        if isinstance(adapter, GenerativeAdapter) and len(columns.inputs) > 1:
            lists = [table.column(c).to_pylist() for c in columns.inputs]
            values = [_fields(columns.inputs, list(row)) for row in zip(*lists, strict=True)]
        else:
            numeric = isinstance(adapter, NumericAdapter)
            values = _row_values(table, columns, None, numeric=numeric)
        for i, value in enumerate(values):
            try:
                prepared.append(adapter.prepare(value))
                keep.append(i)
            except BadInput as exc:
                errors.append(RowError(int(rows[i]), _id(ids, i), exc.message))
        good = np.zeros(table.num_rows, dtype=bool)
        good[keep] = True
        items = np.stack(prepared) if prepared and isinstance(adapter, NumericAdapter) else prepared
    return Decoded(
        rows[good],
        items,
        ids.filter(pa.array(good)) if ids is not None else None,
        expected[good] if expected is not None else None,
        errors,
    )


def _matrix(table: pa.Table, adapter: NumericAdapter, columns: Columns) -> tuple[Any, Any] | None:
    """``(matrix of the good rows, good-row mask)``, or None when the columns do not
    hold flat numbers (nested lists, text): the row path handles those."""
    n, features = table.num_rows, adapter.features
    if len(columns.inputs) > 1:
        if len(columns.inputs) != features:
            return None
        parts = []
        for name in columns.inputs:
            part = _numbers(table.column(name))
            parts.append(part)
        matrix = np.stack(parts, axis=1) if parts else np.zeros((n, 0))
        good = np.isfinite(matrix).all(axis=1)
    else:
        array = table.column(columns.inputs[0]).combine_chunks()
        if not (
            pa.types.is_list(array.type)
            or pa.types.is_large_list(array.type)
            or pa.types.is_fixed_size_list(array.type)
        ):
            return None
        if not _is_number(array.type.value_type):
            return None
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy(zero_copy_only=False)
        good = lengths == features
        if not good.all():
            array = array.filter(pa.array(good))
        values = pc.list_flatten(array)
        flat = values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if values.null_count:
            flat = np.where(pc.is_valid(values).to_numpy(zero_copy_only=False), flat, np.nan)
        matrix = np.full((n, features), np.nan)
        matrix[good] = flat.reshape(-1, features)
    # NaN compares false: one reduction catches NaN, infinities and float32 overflow.
    good &= np.abs(matrix).max(axis=1, initial=0.0) <= _FLOAT32_MAX
    return matrix[good].astype(np.float32), good


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """A column as float64, NaN where a value is missing or not a number."""
    array = column.combine_chunks()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        try:  # CSV cells are read as text; numbers convert in one pass
            array = pc.cast(array, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return np.array([number_or_nan(v) for v in array.to_pylist()], dtype=np.float64)
    if not (_is_number(array.type) or pa.types.is_boolean(array.type)):
        return np.full(len(array), np.nan)
    as_float = pc.cast(array, pa.float64())
    return pc.fill_null(as_float, np.nan).to_numpy(zero_copy_only=False)


def _labels(column: pa.ChunkedArray, adapter: Adapter) -> np.ndarray:
    if not isinstance(adapter, GenerativeAdapter):
        return _numbers(column)
    return np.array([_label(v, adapter) for v in column.to_pylist()], dtype=object)


def _label(value: Any, adapter: Adapter) -> float | str | None:
    """A number (NaN: none); for a generative model the expected text (None: none)."""
    if isinstance(adapter, GenerativeAdapter):
        return value if isinstance(value, str) else None
    return number_or_nan(value)


def _fields(names: tuple[str, ...], cells: list[Any]) -> dict[str, Any]:
    """A generative row's inputs object from columns named after its fields; empty
    cells are left out (the defaults apply), and cells other than the prompt holding
    JSON text (a CSV's ``32``, ``["\\n"]``) are parsed."""
    found = {}
    for name, cell in zip(names, cells, strict=True):
        if cell is None or cell == "":
            continue
        found[name] = cell if name == "prompt" else _json(cell)
    return found


def number_or_nan(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _row_values(table: pa.Table, columns: Columns, which: Any, *, numeric: bool) -> list[Any]:
    """The ``inputs`` JSON value of each row (all rows, or those at ``which``)."""
    picked = table if which is None else table.take(pa.array(which, type=pa.int64()))
    if len(columns.inputs) > 1:
        lists = [picked.column(c).to_pylist() for c in columns.inputs]
        return [[_cell(v) for v in row] for row in zip(*lists, strict=True)]
    values = picked.column(columns.inputs[0]).to_pylist()
    return [_json(v) for v in values] if numeric else values


def _cell(value: Any) -> Any:
    """A CSV cell read as text becomes a number when it is one."""
    if isinstance(value, str):
        number = number_or_nan(value)
        return value if np.isnan(number) else number
    return value


def _json(value: Any) -> Any:
    """Inputs stored as JSON text (a CSV cell) are parsed; bad JSON stays text (rejected)."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def _error(adapter: Adapter, row: int, ids: pa.Array | None, i: Any, value: Any) -> RowError:
    try:
        adapter.prepare(value)
        reason = "inputs must be finite numbers"  # a missing cell among number columns
    except BadInput as exc:
        reason = exc.message
    return RowError(int(row), _id(ids, i), reason)


def _id(ids: pa.Array | None, i: int) -> Any:
    return ids[int(i)].as_py() if ids is not None else None


def _decode_lines(
    window: Window, adapter: Adapter, columns: Columns, errors: list[RowError]
) -> Decoded:
    assert window.lines is not None
    rows, items, ids, expected = [], [], [], []
    for offset, line in enumerate(window.lines):
        row, rid = window.start + offset, None
        try:
            obj = orjson.loads(line)
            if not isinstance(obj, dict):
                raise BadInput("a line must be a JSON object")
            rid = obj.get(columns.id) if columns.id else None
            items.append(adapter.prepare(_line_value(obj, adapter, columns.inputs)))
        except orjson.JSONDecodeError as exc:
            errors.append(RowError(row, None, f"not JSON: {exc}"))
            continue
        except BadInput as exc:
            errors.append(RowError(row, rid, exc.message))
            continue
        rows.append(row)
        ids.append(rid)
        if columns.label:
            expected.append(obj.get(columns.label))
    label_type = object if isinstance(adapter, GenerativeAdapter) else np.float64
    numeric = isinstance(adapter, NumericAdapter)
    return Decoded(
        np.array(rows, dtype=np.int64),
        np.stack(items) if numeric and items else items,
        _id_array(ids) if columns.id else None,
        np.array([_label(v, adapter) for v in expected], dtype=label_type)
        if columns.label
        else None,
        errors,
    )


def _line_value(obj: dict[str, Any], adapter: Adapter, names: tuple[str, ...]) -> Any:
    """A line's ``inputs`` value, from the input columns."""
    if isinstance(adapter, GenerativeAdapter) and len(names) > 1:
        return _fields(names, [obj.get(c) for c in names])  # the adapter names what is missing
    missing = [c for c in names if c not in obj]
    if missing:
        raise BadInput(f"no {', '.join(missing)} in this line")
    return obj[names[0]] if len(names) == 1 else [obj[c] for c in names]


def _id_array(ids: list[Any]) -> pa.Array:
    try:
        return pa.array(ids)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if i is None else str(i) for i in ids], type=pa.string())
