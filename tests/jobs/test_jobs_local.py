"""Local jobs: every format round trip, bad rows, SQL rows, cancel, a rerun that resumes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

from storage import ResultRow, ResultStore
from storage.jobs import JobConflict, JobStore, WindowCounts
from worker.jobs.local import JobError, LocalJob
from worker.jobs.outputs import errors_path, parts_dir
from worker.jobs.params import JobParams
from worker.models import ModelRegistry

from .files import CSV_COLUMNS, digits, write_csv, write_jsonl, write_parquet

N = 2500


def read_output(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        return pq.read_table(path)
    if path.suffix == ".csv":
        return pacsv.read_csv(
            path, convert_options=pacsv.ConvertOptions(column_types={"id": pa.string()})
        )
    return pa.Table.from_pylist([orjson.loads(line) for line in path.read_bytes().splitlines()])


def expected_labels(registry: ModelRegistry, n: int) -> list[int]:
    model = registry.get("digits")
    x, _ = digits(n)
    return [o["label"] for o in model.run(list(x))]  # type: ignore[index]


def run_job(
    registry: ModelRegistry, url: str, source: Path, output: Path, **params: object
) -> tuple[str, JobStore, object]:
    job_params = JobParams(
        model="digits",
        input=source,
        output=output,
        id_column="id",
        label_column="label",
        window_rows=700,
        **params,
    )  # type: ignore[arg-type]
    with ResultStore(url) as store:
        record = LocalJob("t", job_params, registry, store).run()
    return "t", JobStore(ResultStore(url, migrate=False).engine), record


@pytest.mark.parametrize(
    ("source_kind", "output_name"),
    [
        ("parquet", "out.parquet"),
        ("csv", "out.csv"),
        ("jsonl", "out.jsonl"),
        ("parquet", "out.jsonl"),
        ("jsonl", "out.parquet"),
    ],
)
def test_each_format_round_trips_in_input_order_with_ids(
    demo_registry: ModelRegistry, tmp_path: Path, source_kind: str, output_name: str
) -> None:
    writers = {"parquet": write_parquet, "csv": write_csv, "jsonl": write_jsonl}
    source = writers[source_kind](tmp_path / f"in.{source_kind}", N)
    columns = (CSV_COLUMNS,) if source_kind == "csv" else ("inputs",)
    output = tmp_path / output_name
    url = f"sqlite:///{tmp_path / 'jobs.db'}"

    _, _, record = run_job(demo_registry, url, source, output, input_columns=columns)

    table = read_output(output)
    assert table.column("row").to_pylist() == list(range(N))
    assert table.column("id").to_pylist() == [f"id-{i}" for i in range(N)]
    assert table.column("predicted_label").to_pylist() == expected_labels(demo_registry, N)
    assert errors_path(output).read_bytes() == b""
    assert not parts_dir(output).exists()
    assert record.state == "done" and record.checkpoint == N and record.errors == 0  # type: ignore[attr-defined]
    assert record.labelled == N and record.correct > 0.9 * N  # type: ignore[attr-defined]


def test_results_and_drift_rows_are_written_once_per_row(
    demo_registry: ModelRegistry, tmp_path: Path, db_url: str
) -> None:
    source = write_parquet(tmp_path / "in.parquet", N)
    run_job(demo_registry, db_url, source, tmp_path / "out.parquet")
    with ResultStore(db_url) as store, store.engine.connect() as conn:
        results = conn.execute(
            text(
                "SELECT COUNT(*), COUNT(DISTINCT request_id) FROM inference_results"
                " WHERE request_id LIKE 't:%' AND status = 'ok'"
            )
        ).one()
        drift = conn.execute(text("SELECT COUNT(*) FROM inference_log")).scalar_one()
        off = conn.execute(
            text("SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5")
        ).scalar_one()
        job = JobStore(store.engine).get("t")
    assert tuple(results) == (N, N)
    assert drift == N
    assert job is not None and off == N - job.correct


def test_bad_rows_go_to_the_errors_file_and_the_job_goes_on(
    demo_registry: ModelRegistry, tmp_path: Path
) -> None:
    x, y = digits(6)
    good = [{"id": f"id-{i}", "inputs": x[i].tolist(), "label": int(y[i])} for i in range(6)]
    lines = [orjson.dumps(r) for r in good[:2]]
    lines += [b"{not json", orjson.dumps({"id": "short", "inputs": [1.0, 2.0]})]
    lines += [orjson.dumps({"id": "text", "inputs": "seven"}), orjson.dumps({"id": "no-inputs"})]
    lines += [b'{"id": "nan", "inputs": [' + b",".join([b"NaN"] * 64) + b"]}"]
    lines += [orjson.dumps(r) for r in good[2:]]
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    output = tmp_path / "out.jsonl"

    _, _, record = run_job(demo_registry, f"sqlite:///{tmp_path / 'j.db'}", source, output)

    errors = [orjson.loads(line) for line in errors_path(output).read_bytes().splitlines()]
    assert [e["row"] for e in errors] == [2, 3, 4, 5, 6]
    assert "not JSON" in errors[0]["error"]
    assert "shape" in errors[1]["error"] and errors[1]["id"] == "short"
    assert "list of numbers" in errors[2]["error"]
    assert "no inputs" in errors[3]["error"]
    assert record.errors == 5  # type: ignore[attr-defined]
    table = read_output(output)
    assert table.column("row").to_pylist() == [0, 1, 7, 8, 9, 10]


def test_bad_rows_in_arrow_columns_are_found_without_a_row_loop(
    demo_registry: ModelRegistry, tmp_path: Path
) -> None:
    x, _ = digits(5)
    rows = [
        x[0].tolist(),
        None,
        x[1].tolist()[:10],
        [*x[2].tolist()[:63], float("inf")],
        x[3].tolist(),
    ]
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"inputs": pa.array(rows, type=pa.list_(pa.float64()))}), source)
    output = tmp_path / "out.parquet"
    params = JobParams(model="digits", input=source, output=output)
    with ResultStore(f"sqlite:///{tmp_path / 'j.db'}") as store:
        record = LocalJob("t", params, demo_registry, store).run()
    errors = [orjson.loads(line) for line in errors_path(output).read_bytes().splitlines()]
    assert [e["row"] for e in errors] == [1, 2, 3]
    assert "finite" in errors[2]["error"]
    assert record.errors == 3
    assert pq.read_table(output).column("row").to_pylist() == [0, 4]


def test_a_checkpoint_that_lost_its_job_rolls_back_its_results(
    demo_registry: ModelRegistry, tmp_path: Path, db_url: str
) -> None:
    source = write_parquet(tmp_path / "in.parquet", 10)
    params = JobParams(model="digits", input=source, output=tmp_path / "o.parquet")
    with ResultStore(db_url) as store:
        jobs = JobStore(store.engine)
        jobs.create("c", kind="local", model="digits", params=params.stored(), rows_total=10)
        assert jobs.cancel("c")
        row = ResultRow(
            "c:0",
            "digits",
            "1",
            "ok",
            "low",
            [1],
            None,
            None,
            0.0,
            0.0,
            0.0,
            None,
            1,
            "job:c",
            0,
            0,
            datetime.now(UTC),
        )
        with pytest.raises(JobConflict):
            store.write([row], [], [], also=jobs.advance("c", 0, WindowCounts(1)))
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM inference_results")).scalar_one() == 0
        with pytest.raises(JobError, match="cancelled"):
            LocalJob("c", params, demo_registry, store).run()


def test_the_same_job_with_other_parameters_is_refused(
    demo_registry: ModelRegistry, tmp_path: Path
) -> None:
    source = write_parquet(tmp_path / "in.parquet", 10)
    url = f"sqlite:///{tmp_path / 'j.db'}"
    run_job(demo_registry, url, source, tmp_path / "o.parquet")
    with pytest.raises(JobError, match="other parameters"):
        run_job(demo_registry, url, source, tmp_path / "o.parquet", batch_size=3)
    # The same parameters: already done, nothing to do.
    _, _, record = run_job(demo_registry, url, source, tmp_path / "o.parquet")
    assert record.checkpoint == 10  # type: ignore[attr-defined]
    assert np.array_equal(pq.read_table(tmp_path / "o.parquet").column("row"), np.arange(10))


def test_bad_csv_cells_and_lines_are_listed_and_the_rest_scored(
    demo_registry: ModelRegistry, tmp_path: Path
) -> None:
    x, _ = digits(3)
    header = "id," + CSV_COLUMNS + ",label"

    def line(i: int, cells: list[str]) -> str:
        return ",".join([f"id-{i}", *cells, "1"])

    bad_cell = [str(v) for v in x[1]]
    bad_cell[3] = "abc"
    text_lines = [
        header,
        line(0, [str(v) for v in x[0]]),
        line(1, bad_cell),
        "id-x,1,2",  # too few columns: the parser skips it
        line(2, [str(v) for v in x[2]]),
    ]
    source = tmp_path / "in.csv"
    source.write_text("\n".join(text_lines) + "\n")
    output = tmp_path / "out.csv"
    params = JobParams(
        model="digits", input=source, output=output, input_columns=(CSV_COLUMNS,), id_column="id"
    )
    with ResultStore(f"sqlite:///{tmp_path / 'j.db'}") as store:
        record = LocalJob("t", params, demo_registry, store).run()

    errors = [orjson.loads(e) for e in errors_path(output).read_bytes().splitlines()]
    assert errors[0] == {
        "row": 1,
        "id": "id-1",
        "error": "inputs must contain only numbers, got strings",
    }
    assert errors[1]["row"] is None and "columns" in errors[1]["error"]
    assert record.errors == 2
    assert read_output(output).column("id").to_pylist() == ["id-0", "id-2"]


def test_text_scored_in_length_sorted_batches_keeps_row_order_and_each_row_once(
    demo_registry: ModelRegistry, tmp_path: Path
) -> None:
    n = 300
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"]
    sentences = [" ".join(words[: 1 + i % 9] * (1 + i % 5)) + f" {i}" for i in range(n)]
    source = tmp_path / "text.parquet"
    pq.write_table(pa.table({"id": [f"s{i}" for i in range(n)], "text": sentences}), source)
    output, url = tmp_path / "out.parquet", f"sqlite:///{tmp_path / 'jobs.db'}"
    params = JobParams(
        model="minilm",
        input=source,
        output=output,
        input_columns=("text",),
        id_column="id",
        window_rows=128,
    )
    with ResultStore(url) as store:
        job = LocalJob("txt", params, demo_registry, store)
        record = job.run()
        with store.engine.connect() as conn:
            stored = conn.execute(
                text(
                    "SELECT COUNT(*), COUNT(DISTINCT request_id), MAX(batch_size)"
                    " FROM inference_results WHERE status = 'ok'"
                )
            ).one()

    assert record.state == "done" and record.checkpoint == n and record.errors == 0
    table = pq.read_table(output)
    assert table.column("row").to_pylist() == list(range(n))
    assert table.column("id").to_pylist() == [f"s{i}" for i in range(n)]
    # Each row's embedding is its own sentence's, whatever batch it rode in.
    model = demo_registry.get("minilm")
    alone = np.array([model.run([s])[0] for s in sentences[::23]])
    got = np.array(table.column("embedding").to_pylist())[::23]
    assert np.allclose(got, alone, atol=1e-4)
    assert stored[0] == stored[1] == n
    assert job.sizer is not None and sum(job.sizer.batches.elements()) > 1 < stored[2]
