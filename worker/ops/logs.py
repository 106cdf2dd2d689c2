"""Process logging: text or one JSON object per line; secrets scrubbed, payloads never logged.

Structured fields come from ``extra=`` (only the names in ``FIELDS``), so a log call
cannot leak a request body by accident: payloads are simply not a field.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Literal

import orjson

LogFormat = Literal["text", "json"]

FIELDS = (
    "request_id", "error_code", "model", "status", "lane", "topic", "partition", "offset",
    "count", "suppressed",
)  # fmt: skip
# scheme://user:password@host -> scheme://user:***@host, wherever a URL shows up.
_URL_PASSWORD = re.compile(r"(\w[\w+.-]*://[^:/@\s]*:)[^@\s]+@")
# SQLAlchemy appends the statement and its parameters (result rows: outputs, echoed
# metadata) to a driver error's text; keep the driver's message, drop those.
_SQL_DETAIL = re.compile(r"\n\[SQL: .*?(?=\n\(Background on this error|\Z)", re.DOTALL)


def scrub(text: str) -> str:
    text = _SQL_DETAIL.sub("\n[SQL and parameters omitted]", text)
    return _URL_PASSWORD.sub(r"\1***@", text)


class _Scrubbed(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return scrub(super().format(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": scrub(record.getMessage()),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = scrub(self.formatException(record.exc_info))
        return orjson.dumps(entry, default=str).decode()


def configure(fmt: LogFormat = "text", level: int = logging.INFO) -> None:
    """Replace the root handlers with one on stderr in the chosen format."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(_Scrubbed("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
