"""SQL storage: tables, migrations, the result/drift/offset writer and anomaly queries.

It takes plain records and imports nothing from ``worker`` or ``consumers``.
"""

from storage.engine import make_engine, redacted_url
from storage.errors import RowsRefused, StoreUnavailable
from storage.migrate import upgrade
from storage.queries import (
    DriftSummary,
    anomaly_count,
    count_results,
    drift_summary,
    result_counts,
)
from storage.records import DriftRow, GenerationRow, OffsetRow, ResultRow, RowColumns, Same
from storage.writer import ResultStore

__all__ = [
    "DriftRow",
    "DriftSummary",
    "GenerationRow",
    "OffsetRow",
    "ResultRow",
    "ResultStore",
    "RowColumns",
    "RowsRefused",
    "Same",
    "StoreUnavailable",
    "anomaly_count",
    "count_results",
    "drift_summary",
    "make_engine",
    "redacted_url",
    "result_counts",
    "upgrade",
]
