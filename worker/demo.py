"""``inferlane demo``: a labelled, mixed workload through the whole system, then a report.

The worker, a publisher and a results reader share one event loop; the report reads
the results topic for latency and the SQL store for accuracy and the anomaly query.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from consumers.contract import InferenceResult
from storage import DriftSummary, anomaly_count, drift_summary, make_engine, result_counts
from worker.config import WorkerSettings
from worker.models import ModelRegistry
from worker.service import Worker
from worker.workload import (
    Labelled,
    diabetes_requests,
    digits_requests,
    minilm_requests,
    spread_over_lanes,
)

# Records that must end as dead letters (keyed by request id, as producers should):
# the demo shows them going there, each with a ``rejected`` result.
BAD_RECORDS = (
    (b"bad-json", b'{"request_id": "bad-json", "model": "digits", "inputs": [1, 2'),
    (b"bad-shape", b'{"request_id": "bad-shape", "model": "digits", "inputs": [1, 2, 3]}'),
    (b"bad-model", b'{"request_id": "bad-model", "model": "no-such-model", "inputs": [1]}'),
)
# With nothing new for this long, the demo reports what it has instead of waiting on.
STALL_S = 60.0


@dataclass
class DemoReport:
    sent: int
    seconds: float  # from the first publish to the last result: includes the group join
    serving_s: float  # from the first result to the last: the steady rate
    results: list[InferenceResult] = field(default_factory=list)
    drift: dict[str, DriftSummary] = field(default_factory=dict)
    anomalies: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return len(self.results) / self.serving_s if self.serving_s else 0.0


def workload(
    n_digits: int, n_diabetes: int, n_minilm: int, settings: WorkerSettings
) -> list[Labelled]:
    requests = digits_requests(n_digits) + diabetes_requests(n_diabetes) + minilm_requests(n_minilm)
    return spread_over_lanes(requests, settings.topics)


async def run_demo(
    settings: WorkerSettings, registry: ModelRegistry, items: list[Labelled], console: Console
) -> DemoReport:
    assert settings.bootstrap is not None
    expected = len(items) + len(BAD_RECORDS)
    # Leaving the block drains the worker: every result is in SQL after it.
    async with Worker(settings, registry):
        reader = await _results_reader(settings)
        producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap, linger_ms=5)
        await producer.start()
        try:
            started = time.monotonic()
            sends = [await producer.send(i.topic, i.value, key=i.key) for i in items]
            sends += [await producer.send(settings.topics.normal, v, key=k) for k, v in BAD_RECORDS]
            await asyncio.gather(*sends)
            results, first_s = await _collect(reader, expected, console)
            done_s = time.monotonic()
        finally:
            await producer.stop()
            await reader.stop()
    engine = make_engine(settings.database_url)
    try:
        return DemoReport(
            sent=expected,
            seconds=done_s - started,
            serving_s=done_s - first_s,
            results=results,
            drift=drift_summary(engine, 0.5),
            anomalies=anomaly_count(engine, 0.5, model="digits"),
            statuses=result_counts(engine),
        )
    finally:
        engine.dispose()


async def _results_reader(settings: WorkerSettings) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap, enable_auto_commit=False)
    await consumer.start()
    topic = settings.topics.results
    await consumer.topics()  # refresh metadata: the worker has just created the topic
    tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(tps)
    # Tansu's end offsets count record batches, a lower bound of the real end: seek
    # there, then skip to the high watermark that the fetches report.
    for tp, end in (await consumer.end_offsets(tps)).items():
        consumer.seek(tp, end)
    while not await _caught_up(consumer, tps):
        await consumer.getmany(*tps, timeout_ms=100)
    return consumer


async def _caught_up(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
    for tp in tps:
        highwater = consumer.highwater(tp)
        if highwater is None or await consumer.position(tp) < highwater:
            return False
    return True


async def _collect(
    reader: AIOKafkaConsumer, expected: int, console: Console
) -> tuple[list[InferenceResult], float]:
    """The results, and when the first one arrived (monotonic)."""
    seen: dict[str, InferenceResult] = {}
    columns = (TextColumn("results"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("results", total=expected)
        last_news = time.monotonic()
        first_s: float | None = None
        while len(seen) < expected:
            if time.monotonic() - last_news > STALL_S:
                console.print(f"[red]no results for {STALL_S:.0f}s; reporting what arrived")
                break
            batches = await reader.getmany(timeout_ms=200, max_records=5000)
            for messages in batches.values():
                last_news = time.monotonic()
                first_s = first_s or last_news
                for m in messages:
                    result = InferenceResult.model_validate_json(m.value)
                    seen.setdefault(result.request_id, result)
            progress.update(task, completed=len(seen))
    return list(seen.values()), first_s or time.monotonic()


def render(report: DemoReport, console: Console) -> None:
    console.print(
        f"[bold]{len(report.results)}[/] results in {report.seconds:.1f}s "
        f"(worker start and consumer-group join included); "
        f"[bold]{report.throughput:,.0f}[/] requests/s from the first result to the last"
    )
    lanes = Table(title="latency per lane (ms, receipt to result)")
    for col in ("lane", "requests", "p50", "p99", "max"):
        lanes.add_column(col, justify="right")
    for lane in ("high", "normal", "low"):
        totals = sorted(
            r.latency_ms.total for r in report.results if r.priority == lane and r.status == "ok"
        )
        if totals:
            lanes.add_row(lane, str(len(totals)), *(f"{q:.1f}" for q in _quantiles(totals)))
    console.print(lanes)
    models = Table(title="drift log per model (anomaly: |output - expected| > 0.5)")
    for col in ("model", "checked", "anomalies", "within 0.5", "mean |error|"):
        models.add_column(col, justify="right")
    for model, d in sorted(report.drift.items()):
        within = 1 - d.anomalies / d.rows if d.rows else 0.0
        models.add_row(
            model, str(d.rows), str(d.anomalies), f"{within:.1%}", f"{d.mean_abs_error:.2f}"
        )
    console.print(models)
    console.print(f"statuses in SQL: {report.statuses}")
    console.print(
        "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5 "
        f"AND model = 'digits'  →  [bold]{report.anomalies}[/] (misclassified digits)"
    )


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    def at(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return at(0.5), at(0.99), values[-1]
