"""minilm over a Parquet file of sentences: the job against the ceiling, side by side.

The ceiling is the model's own forward pass at each batch size, over batches of the
same sentences sorted by length across the whole file (the least padding any batcher
could achieve), pre-tokenized. It is measured in slices between the job's windows (the
job's progress callback), so that both see the same machine: on the shared VM a
ceiling timed a minute apart from the job moved by up to 30%. The job's time leaves
the slices out; each size's ceiling is its items over its time across all the slices;
the ratio is to the best size's. ``--rounds`` jobs, each against its own slices: the
median and the spread of the ratios are reported.
``python -m bench.jobs --only minilm``.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from bench import workloads
from storage import ResultStore
from worker.jobs.local import LocalJob, Progress
from worker.jobs.params import JobParams
from worker.models import LoadedModel, ModelRegistry

# Ceiling batch sizes: minilm's best moved between 4 and 64 on the shared VM.
SIZES = (4, 8, 16, 32, 64)
SLICE_ITEMS = 128  # sentences per size in each slice
SAMPLE_ITEMS = 2048  # tokenized sentences per size, cycled through


class Ceiling:
    def __init__(self, model: LoadedModel, sentences: list[str], sizes: list[int]) -> None:
        self._model = model
        ordered = sorted(sentences, key=model.adapter.cost)
        self._batches: dict[int, list[Any]] = {}
        for size in sizes:
            chunks = [ordered[i : i + size] for i in range(0, len(ordered) - size + 1, size)]
            random.Random(size).shuffle(chunks)  # any run of them spans every length
            kept = chunks[: max(1, SAMPLE_ITEMS // size)]
            self._batches[size] = [model.adapter.collate(chunk) for chunk in kept]
        self._next = Counter[int]()
        self._turn = 0
        self.reset()

    def reset(self) -> None:
        self.items = Counter[int]()
        self.seconds = dict.fromkeys(self._batches, 0.0)

    def slice(self) -> None:
        """``SLICE_ITEMS`` sentences at each size; sizes in turn forwards, then backwards."""
        sizes = list(self._batches)
        self._turn += 1
        for size in sizes if self._turn % 2 else reversed(sizes):
            batches, done = self._batches[size], 0
            started = time.perf_counter()
            with torch.inference_mode():
                while done < SLICE_ITEMS:
                    self._model.module(**batches[self._next[size] % len(batches)])
                    self._next[size] += 1
                    done += size
            self.seconds[size] += time.perf_counter() - started
            self.items[size] += done

    def rates(self) -> dict[int, float]:
        return {size: self.items[size] / self.seconds[size] for size in self.items}


def job_beside(
    registry: ModelRegistry,
    work: Path,
    name: str,
    source: Path,
    ceiling: Ceiling,
    batch_size: int | None = None,
) -> tuple[float, dict[str, Any]]:
    """Rows per second of the job (its time, less the ceiling slices between windows)."""
    spent = [0.0]

    def between(_: Progress) -> None:
        # The job's batch sizer sees the slice as idle time: one decision per window
        # (a 20% step at most) is made on a lower utilization than the job's own.
        started = time.perf_counter()
        ceiling.slice()
        spent[0] += time.perf_counter() - started

    params = JobParams(
        model="minilm",
        input=source,
        output=work / f"{name}.parquet",
        input_columns=("text",),
        batch_size=batch_size,
        sql_results=False,
    )
    with ResultStore(f"sqlite:///{work / (name + '.db')}") as store:
        job = LocalJob(name, params, registry, store, on_progress=between)
        started = time.perf_counter()
        record = job.run()
        elapsed = time.perf_counter() - started - spent[0]
    sizes = job.sizer.batches if job.sizer else Counter[int]()
    return record.checkpoint / elapsed, {
        "rows": record.checkpoint,
        "seconds": round(elapsed, 2),
        "ceiling_slices_s": round(spent[0], 2),
        # forward passes per batch size, most used first
        "batch_sizes": {str(size): n for size, n in sizes.most_common()},
    }


def runs(
    registry: ModelRegistry,
    work: Path,
    rows: int,
    rounds: int,
    say: Any,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """``batch_size``: pinned (``--minilm-batch-size``); None: the job's controller."""
    sentences = workloads.texts(rows)
    source = work / "sentences.parquet"
    pq.write_table(pa.table({"text": sentences}), source)
    warmup = work / "warmup.parquet"
    pq.write_table(pa.table({"text": sentences[:256]}), warmup)
    model = registry.get("minilm")
    ceiling = Ceiling(model, sentences, [s for s in SIZES if s <= model.max_batch])
    registry.warmup("minilm", model.max_batch)
    job_beside(registry, work, "minilm-warmup", warmup, ceiling)  # every shape, both paths
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        ceiling.reset()
        rps, info = job_beside(registry, work, f"minilm-{r}", source, ceiling, batch_size)
        rates = ceiling.rates()
        best = max(rates, key=lambda size: rates[size])
        ratio = rps / rates[best]
        out.append(
            {
                "job_rows_per_s": round(rps, 1),
                "ceiling_rows_per_s": {str(k): round(v, 1) for k, v in rates.items()},
                "ceiling_best_batch": best,
                "ratio": round(ratio, 3),
                **info,
            }
        )
        curve = ", ".join(f"{k}: {v:,.0f}" for k, v in rates.items())
        say(
            f"minilm {rows:,} sentences, round {r + 1}: job {rps:,.1f}/s vs ceiling "
            f"{rates[best]:,.1f}/s at batch {best}: {ratio:.3f}x (ceiling by batch: {curve}; "
            f"job's forward passes by size: {info['batch_sizes']})"
        )
    ratios = sorted(o["ratio"] for o in out)
    median = statistics.median(ratios)
    say(
        f"minilm ratio over {rounds} rounds: median {median:.3f}x, "
        f"min {ratios[0]:.3f}, max {ratios[-1]:.3f}"
    )
    return {"rows": rows, "rounds": out, "ratio_median": median, "ratio_spread": ratios}
