"""What ``inferlane score`` refuses before it creates a job or opens the database: an
input that is not a regular file, of an unknown type or without the columns named, and
a model the registry does not have, and a generative model with ``--distributed``."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from worker.cli.errors import UsageFailed
from worker.jobs.params import JobParams
from worker.jobs.sources import check_columns, filesystem, format_of, is_uri


def check_job(params: JobParams, models: Path | None, *, distributed: bool = False) -> None:
    """``UsageFailed`` naming the flag and the value at fault, else nothing."""
    from worker.cli.registry import check_registry
    from worker.demo.models import ensure_demo_models

    source = params.input
    if isinstance(source, str):
        _check_object(source)
    elif not source.is_file():
        # A job counts its rows, then reads them, and reads them again when it resumes.
        raise UsageFailed(
            f"--input {source} is not a regular file (a job reads its input more than once)",
            "copy what it holds into a file first",
        )
    try:
        format_of(source)
    except ValueError as exc:
        raise UsageFailed(f"--input {exc}") from None
    try:
        check_columns(source, params.columns.names)
    except ValueError as exc:  # a column named that the file does not have
        raise UsageFailed(
            f"--input {exc}", "name the columns with --input-column, --id-column, --label-column"
        ) from None
    path = models or ensure_demo_models()
    specs = {m.name: m for m in check_registry(path).models}
    spec = specs.get(params.model)
    if spec is None:
        raise UsageFailed(
            f"--model {params.model!r}: no such model in {path} (it has {', '.join(sorted(specs))})"
        )
    # A worker's engine serves its event loop; a chunk thread cannot drive it too.
    if distributed and spec.adapter.kind == "generative":
        raise UsageFailed(
            f"--model {params.model!r} is generative: --distributed does not take generative"
            " models; run the job without --distributed"
        )


def local_or_uri(value: str | None, flag: str, distributed: bool) -> Path | str | None:
    """A flag's path (absolute) or URI; URIs only for a distributed job, whose workers
    read and write them through pyarrow's filesystems."""
    if value is None or not is_uri(value):
        return Path(value).resolve() if value is not None else None
    if not distributed:
        raise UsageFailed(
            f"{flag} {value}: a local job reads and writes local files",
            "add --distributed, or copy the object to a local file first",
        )
    return value


def _check_object(uri: str) -> None:
    """The object exists (and the credentials in the environment reach it)."""
    try:
        fs, path = filesystem(uri)
        found = fs.get_file_info(path).type == pafs.FileType.File
    except (pa.ArrowException, OSError) as exc:
        raise UsageFailed(f"--input {uri}: {exc}") from None
    if not found:
        raise UsageFailed(f"--input {uri}: no such object")
