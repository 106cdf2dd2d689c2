"""``inferlane score`` and ``inferlane jobs`` as a user types them."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from storage import ResultStore
from storage.jobs import JobStore
from worker.cli import app
from worker.jobs.params import JobParams

from .files import write_csv

N = 1200


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    # Table borders out, whitespace folded: the words in the order a user reads them.
    return " ".join(re.sub(r"[\u2500-\u257f]", " ", result.output).split())


def test_score_then_list_show_and_cancel(tmp_path: Path, demo_registry_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", N)
    output = tmp_path / "out.jsonl"
    url = f"sqlite:///{tmp_path / 'j.db'}"
    columns = ",".join(f"f{j}" for j in range(64))
    summary = invoke(
        "score", "--model", "digits", "--input", str(source), "--output", str(output),
        "--database", url, "--input-column", columns, "--id-column", "id",
        "--label-column", "label", "--models", str(demo_registry_path), "--job", "cli",
    )  # fmt: skip
    assert f"{N:,} of {N:,}" in summary and "accuracy" in summary
    assert len(output.read_bytes().splitlines()) == N

    assert "cli local digits done" in invoke("jobs", "list", "--database", url)
    assert "checkpoint 1200" in invoke("jobs", "show", "cli", "--database", url)

    refused = CliRunner().invoke(app, ["jobs", "cancel", "cli", "--database", url])
    assert refused.exit_code == 1 and "no running job" in refused.output
    params = JobParams(model="digits", input=source, output=tmp_path / "o2.parquet")
    with ResultStore(url) as store:
        JobStore(store.engine).create(
            "other", kind="local", model="digits", params=params.stored(), rows_total=N
        )
    assert "cancelled" in invoke("jobs", "cancel", "other", "--database", url)
    assert "other local digits cancelled" in invoke("jobs", "list", "--database", url)


def test_reading_jobs_never_creates_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    for args in (["list"], ["show", "j"], ["cancel", "j"], ["export", "j"]):
        ran = CliRunner().invoke(app, ["jobs", *args, "--database", f"sqlite:///{missing}"])
        assert ran.exit_code == 1, (args, ran.output)
        assert f"no database at {missing}" in " ".join(ran.output.split()), ran.output
        assert not missing.exists(), args
