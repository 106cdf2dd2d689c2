"""A distributed job whose input and output are objects in an S3 store (moto's server on
this machine): the worker reads its chunks and writes its parts through pyarrow's S3
filesystem, and the export assembles them into an object, in input order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from storage import ResultStore
from storage.jobs import DONE, JobStore
from tests.e2e.support import settings_for
from worker.facade import Worker
from worker.intake.broker import EmbeddedBroker
from worker.jobs.distributed import export_job, publish
from worker.jobs.params import JobParams
from worker.models import ModelRegistry

from .files import digits

server = pytest.importorskip("moto.server")

N = 1200


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[pafs.S3FileSystem, str]]:
    """The store, and the query that points an ``s3://`` URI at it (as for MinIO)."""
    moto = server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    # Credentials as any worker's environment would hold them.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    fs = pafs.S3FileSystem(
        endpoint_override=f"{host}:{port}",
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    fs.create_dir("rows")
    yield fs, f"?endpoint_override={host}:{port}&scheme=http&region=us-east-1"
    moto.stop()


async def test_chunks_are_read_from_and_written_to_an_object_store(
    s3: tuple[pafs.S3FileSystem, str],
    broker: EmbeddedBroker,
    tmp_path: Path,
    demo_registry: ModelRegistry,
) -> None:
    fs, endpoint = s3
    x, y = digits(N)
    table = pa.table(
        {
            "id": pa.array(range(N)),
            "inputs": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 64),
            "label": pa.array(y),
        }
    )
    pq.write_table(table, "rows/in.parquet", filesystem=fs, row_group_size=300)
    url = f"sqlite:///{tmp_path / 's3.db'}"
    settings = settings_for(broker.bootstrap, url)
    params = JobParams(
        model="digits",
        input=f"s3://rows/in.parquet{endpoint}",
        output=f"s3://rows/out.parquet{endpoint}",
        id_column="id",
        label_column="label",
        window_rows=300,
    )
    with ResultStore(url) as store:
        jobs = JobStore(store.engine)
        async with Worker(settings, demo_registry):
            await asyncio.to_thread(
                publish, "s3j", params, demo_registry, store, broker.bootstrap, settings=settings
            )
            deadline = time.monotonic() + 60
            while (record := jobs.get("s3j")) is None or record.state != DONE:
                assert time.monotonic() < deadline, "the job did not finish"
                await asyncio.sleep(0.1)
        assert export_job("s3j", store.engine) == N
    scored = pq.read_table("rows/out.parquet", filesystem=fs)
    assert scored.column("row").to_pylist() == list(range(N))
    parts = fs.get_file_info(pafs.FileSelector("rows/out.parquet.parts"))
    assert len([p for p in parts if p.base_name.endswith(".parquet")]) == N // 300
