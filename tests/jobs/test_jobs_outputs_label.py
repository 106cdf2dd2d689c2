"""``score``'s output keeps the input's ground truth beside the prediction, and never
overwrites its input or another job's output unasked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from worker.models import ModelRegistry

from .files import CSV_COLUMNS, digits, write_csv, write_jsonl, write_parquet
from .test_jobs_local import expected_labels, read_output, run_job

N = 300


@pytest.mark.parametrize("output_name", ["out.parquet", "out.csv", "out.jsonl"])
def test_the_output_keeps_the_label_as_expected_beside_the_predicted_label(
    demo_registry: ModelRegistry, tmp_path: Path, output_name: str
) -> None:
    source = write_parquet(tmp_path / "in.parquet", N)
    output = tmp_path / output_name

    run_job(demo_registry, f"sqlite:///{tmp_path / 'j.db'}", source, output)

    table = read_output(output)
    assert "label" not in table.column_names
    assert table.column("predicted_label").to_pylist() == expected_labels(demo_registry, N)
    assert table.column("expected").to_pylist() == digits(N)[1].tolist()


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_missing_and_unusable_labels_are_empty_and_the_rest_read_as_numbers(
    demo_registry: ModelRegistry, tmp_path: Path, kind: str
) -> None:
    """CSV cells are text: the labels come back as class numbers all the same."""
    writers = {"csv": write_csv, "jsonl": write_jsonl}
    source = writers[kind](tmp_path / f"in.{kind}", 4)
    lines = source.read_text().splitlines(keepends=True)
    x, y = digits(4)
    if kind == "csv":
        lines[2] = lines[2].rsplit(",", 1)[0] + ",\n"  # row 1: empty cell
        lines[3] = lines[3].rsplit(",", 1)[0] + ",2.5\n"  # row 2: not a class number
    else:
        lines[1] = orjson.dumps({"id": "id-1", "inputs": x[1].tolist()}).decode() + "\n"
        lines[2] = orjson.dumps({"id": "id-2", "inputs": x[2].tolist(), "label": "two"}).decode()
        lines[2] += "\n"
    source.write_text("".join(lines))
    columns = (CSV_COLUMNS,) if kind == "csv" else ("inputs",)
    output = tmp_path / "out.jsonl"

    run_job(demo_registry, f"sqlite:///{tmp_path / 'j.db'}", source, output, input_columns=columns)

    rows = [orjson.loads(line) for line in output.read_bytes().splitlines()]
    assert [r["expected"] for r in rows] == [int(y[0]), None, None, int(y[3])]
    assert all(isinstance(r["predicted_label"], int) for r in rows)


def score(demo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``inferlane score`` with the demo digits, as a user runs it."""
    command = [sys.executable, "-m", "worker", "score", "--model", "digits", "--models", str(demo)]
    command += ["--database", f"sqlite:///{tmp_path / 'j.db'}", "--label-column", "label", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_score_refuses_to_write_over_its_input(demo_registry_path: Path, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", 20)
    before = source.read_bytes()
    (tmp_path / "sub").mkdir()
    for spelled in ("in.jsonl", "sub/../in.jsonl"):
        done = score(demo_registry_path, tmp_path, "--input", "in.jsonl", "--output", spelled)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "is the input file" in done.stderr and "Traceback" not in done.stderr
        assert source.read_bytes() == before
    assert not (tmp_path / "in.jsonl.parts").exists()


def test_an_existing_output_is_replaced_only_with_overwrite_but_a_rerun_may_reuse_it(
    demo_registry_path: Path, tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "in.jsonl", 20)
    output = tmp_path / "out.jsonl"
    output.write_text("somebody's results\n")
    files = ("--input", "in.jsonl", "--output", "out.jsonl")

    refused = score(demo_registry_path, tmp_path, *files)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--overwrite" in refused.stderr and "Traceback" not in refused.stderr
    assert output.read_text() == "somebody's results\n"
    assert not (tmp_path / "out.jsonl.parts").exists()

    replaced = score(demo_registry_path, tmp_path, *files, "--overwrite")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    written = output.read_bytes()
    assert len(written.splitlines()) == 20 and b'"expected"' in written

    # The same command again is the same job (done): it reports, and leaves the file.
    again = score(demo_registry_path, tmp_path, *files)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "20 of 20" in again.stdout and output.read_bytes() == written
