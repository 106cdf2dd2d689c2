"""``inferlane demo``: a labelled, mixed workload through the whole system, then a report.

The worker, a publisher and a results reader share one event loop; the report reads
the results topic for latency and the SQL store for accuracy and the anomaly query.
The labelled traffic comes in two phases: clean, then shifted (inverted digits,
rescaled diabetes features); the drift windows catch the shift, and a PNG report is
written next to the database. Then a few prompts go to the generative demo model, their
text shown as it streams (``stream``).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import Engine, make_url

from consumers.contract import InferenceResult
from storage import DriftSummary, anomaly_count, drift_summary, make_engine, result_counts
from storage.drift_windows import read_flags, read_windows
from storage.queries import error_rms
from worker.base.blocking import off_loop
from worker.demo.stream import stream_prompts
from worker.demo.workload import (
    Labelled,
    diabetes_requests,
    digits_requests,
    minilm_requests,
    spread_over_lanes,
    tinylm_requests,
)
from worker.facade import Worker
from worker.models import ClassifierAdapter, ModelRegistry
from worker.settings import DriftConfig, WorkerSettings
from worker.settings.drift_thresholds import DriftThresholds

# Records that must end as dead letters (keyed by request id, as producers should):
# the demo shows them going there, each with a ``rejected`` result.
BAD_RECORDS = (
    (b"bad-json", b'{"request_id": "bad-json", "model": "digits", "inputs": [1, 2'),
    (b"bad-shape", b'{"request_id": "bad-shape", "model": "digits", "inputs": [1, 2, 3]}'),
    (b"bad-model", b'{"request_id": "bad-model", "model": "no-such-model", "inputs": [1]}'),
)
# With nothing new for this long, the demo reports what it has instead of waiting on.
STALL_S = 60.0
# Short windows and a small reference, so a demo of a few seconds has several windows.
DEMO_DRIFT = DriftConfig(
    window_s=1,
    reference_rows=300,
    flush_s=0.25,
    labels_topic=None,
    thresholds=DriftThresholds(min_rows=50, min_labelled=20),
)
DIABETES_SHIFT_SCALE = 4.0
# A regressor's answer is an anomaly when its error is beyond this many times the root
# mean square of its errors on the clean traffic (about 0.3% of normal residuals).
ANOMALY_RMS = 3.0


@dataclass
class DemoWorkload:
    """Two phases: the shifted one starts once every clean result is back; the
    generative prompts go last, on their own."""

    clean: list[Labelled]
    shifted: list[Labelled]
    prompts: list[Labelled] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.clean) + len(self.shifted)


@dataclass(frozen=True, slots=True)
class ShiftCaught:
    """Per model: windows before the shift that were flagged (should be 0), windows
    after it, and the position of the first flagged one among those (0: at once)."""

    model: str
    clean_windows: int
    clean_flagged: int
    shifted_windows: int
    first_flagged: int | None


@dataclass
class DemoReport:
    sent: int
    seconds: float  # from the first publish to the last result: includes the group join
    serving_s: float  # from the first result to the last: the steady rate
    results: list[InferenceResult] = field(default_factory=list)
    drift: dict[str, DriftSummary] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)  # anomaly: |error| above
    anomalies: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    shift: list[ShiftCaught] = field(default_factory=list)
    drift_report: list[str] = field(default_factory=list)
    png: Path | None = None

    @property
    def throughput(self) -> float:
        return len(self.results) / self.serving_s if self.serving_s else 0.0


def workload(
    n_digits: int, n_diabetes: int, n_minilm: int, settings: WorkerSettings, n_tinylm: int = 0
) -> DemoWorkload:
    """Half the digits and diabetes requests clean, the other half shifted; then
    ``n_tinylm`` prompts on the normal lane."""
    shifted_digits, shifted_diabetes = n_digits // 2, n_diabetes // 2
    clean = (
        digits_requests(n_digits - shifted_digits)
        + diabetes_requests(n_diabetes - shifted_diabetes)
        + minilm_requests(n_minilm)
    )
    shifted = digits_requests(shifted_digits, prefix="digits-shifted", inverted=True)
    shifted += diabetes_requests(
        shifted_diabetes, prefix="diabetes-shifted", scale=DIABETES_SHIFT_SCALE
    )
    prompts = [Labelled(settings.topics.normal, r) for r in tinylm_requests(n_tinylm)]
    return DemoWorkload(
        spread_over_lanes(clean, settings.topics),
        spread_over_lanes(shifted, settings.topics, seed=2),
        prompts,
    )


async def run_demo(
    settings: WorkerSettings, registry: ModelRegistry, items: DemoWorkload, console: Console
) -> DemoReport:
    assert settings.bootstrap is not None
    settings = settings.model_copy(update={"drift": DEMO_DRIFT})
    expected = len(items) + len(BAD_RECORDS)
    # Leaving the block drains the worker: every result is in SQL after it.
    async with Worker(settings, registry):
        reader = await _results_reader(settings)
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap,
            linger_ms=5,
            **settings.kafka.security.aiokafka_kwargs(),
        )
        await producer.start()
        try:
            started = time.monotonic()
            sends = [await producer.send(i.topic, i.value, key=i.key) for i in items.clean]
            sends += [await producer.send(settings.topics.normal, v, key=k) for k, v in BAD_RECORDS]
            await asyncio.gather(*sends)
            seen: dict[str, InferenceResult] = {}
            first_s = await _collect(reader, seen, len(sends), console)
            shift_at = await _next_window(DEMO_DRIFT.window_s)
            sends = [await producer.send(i.topic, i.value, key=i.key) for i in items.shifted]
            await asyncio.gather(*sends)
            await _collect(reader, seen, expected, console)
            done_s = time.monotonic()
            await stream_prompts(producer, reader, items.prompts, console, stall_s=STALL_S)
        finally:
            await producer.stop()
            await reader.stop()
    engine = make_engine(settings.database_url)
    try:
        thresholds = anomaly_thresholds(engine, registry, shift_at)
        report = DemoReport(
            sent=expected + len(items.prompts),
            seconds=done_s - started,
            serving_s=done_s - first_s,
            results=list(seen.values()),
            drift={m: drift_summary(engine, t)[m] for m, t in thresholds.items()},
            thresholds=thresholds,
            anomalies=anomaly_count(engine, 0.5, model="digits"),
            statuses=result_counts(engine),
            shift=_shift_caught(engine, shift_at),
        )
        report.png = _png_path(settings.database_url)
        report.drift_report = await off_loop(_write_png, engine, report.png)
        return report
    finally:
        engine.dispose()


def anomaly_thresholds(
    engine: Engine, registry: ModelRegistry, clean_until: datetime
) -> dict[str, float]:
    """Per model in the drift log: 0.5 for a classifier (any misclassification), else
    ``ANOMALY_RMS`` times the root mean square of its errors before ``clean_until``."""
    spread = error_rms(engine, before=clean_until)
    return {
        model: 0.5 if isinstance(registry.adapter(model), ClassifierAdapter) else ANOMALY_RMS * rms
        for model, rms in spread.items()
    }


async def _next_window(window_s: int) -> datetime:
    """Wait for the clock to enter a new drift window, so the shift starts one."""
    boundary = math.ceil(time.time() / window_s) * window_s
    await asyncio.sleep(max(0.0, boundary - time.time()))
    return datetime.fromtimestamp(boundary, UTC)


def _shift_caught(engine: Engine, shift_at: datetime) -> list[ShiftCaught]:
    flagged = {(k.model, k.window_start) for k, *_ in read_flags(engine)}
    out = []
    for model in ("digits", "diabetes"):
        windows = read_windows(engine, model=model)
        clean = [w for w in windows if w.start < shift_at]
        shifted = [w for w in windows if w.start >= shift_at]
        hits = [i for i, w in enumerate(shifted) if (model, w.start) in flagged]
        out.append(
            ShiftCaught(
                model,
                len(clean),
                sum((model, w.start) in flagged for w in clean),
                len(shifted),
                hits[0] if hits else None,
            )
        )
    return out


def _png_path(database_url: str) -> Path:
    """Next to a SQLite file; in the current folder for a server database."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database).with_suffix(".png")
    return Path("inferlane-demo.png")


def _write_png(engine: Engine, png: Path) -> list[str]:
    from worker.drift.report import write_report

    thresholds = DEMO_DRIFT.thresholds
    return write_report(engine, png, model=None, since=None, default=thresholds, per_model={})


async def _results_reader(settings: WorkerSettings) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap,
        enable_auto_commit=False,
        **settings.kafka.security.aiokafka_kwargs(),
    )
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
    reader: AIOKafkaConsumer, seen: dict[str, InferenceResult], expected: int, console: Console
) -> float:
    """Read results into ``seen`` until it holds ``expected``; return when the first
    new one arrived (monotonic)."""
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
    return first_s or time.monotonic()


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
    models = Table(
        title="drift log per model (anomaly: |output - expected| > threshold)",
        caption=f"threshold: 0.5 for a classifier (misclassified), {ANOMALY_RMS:g} x the RMS "
        "of a regressor's errors on the clean traffic; mean |error|: a classifier's error "
        "rate, a regressor's mean absolute error",
    )
    for col in ("model", "checked", "threshold", "anomalies", "within", "mean |error|"):
        models.add_column(col, justify="right")
    for model, d in sorted(report.drift.items()):
        within = 1 - d.anomalies / d.rows if d.rows else 0.0
        models.add_row(
            model,
            str(d.rows),
            f"{report.thresholds[model]:.4g}",
            str(d.anomalies),
            f"{within:.1%}",
            f"{d.mean_abs_error:.3g}",
        )
    console.print(models)
    console.print(f"statuses in SQL: {report.statuses}")
    console.print(
        "SELECT COUNT(*) FROM inference_log WHERE ABS(output - expected) > 0.5 "
        f"AND model = 'digits'  →  [bold]{report.anomalies}[/] (misclassified digits)"
    )
    _render_shift(report, console)


def _render_shift(report: DemoReport, console: Console) -> None:
    shift = Table(title="drift windows: the second half of the traffic is shifted")
    for col in ("model", "clean windows", "flagged", "shifted windows", "caught in window"):
        shift.add_column(col, justify="right")
    for c in report.shift:
        caught = "not caught" if c.first_flagged is None else f"#{c.first_flagged + 1}"
        shift.add_row(
            c.model, str(c.clean_windows), str(c.clean_flagged), str(c.shifted_windows), caught
        )
    console.print(shift)
    for line in report.drift_report:
        console.print(line)
    if report.png is not None:
        console.print(f"drift report: [bold]{report.png}[/]")


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    def at(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return at(0.5), at(0.99), values[-1]
