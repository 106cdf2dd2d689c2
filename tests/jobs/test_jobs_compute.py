"""Scoring a window: failing rows alone, text by length in batches the controller sizes,
every output back in row order, and every pass on the executor's compute thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch

from worker.execution.aside import submit_rows
from worker.execution.executor import ThreadExecutor
from worker.jobs.batch_size import BatchSizer
from worker.jobs.compute import Forward, score
from worker.models import Adapter, ClassifierAdapter, LoadedModel
from worker.settings.controller_params import ControllerParams


@pytest.fixture
def on_executor() -> Iterator[Any]:
    """Binds a model to a compute thread as jobs do: ``submit_rows`` on a ThreadExecutor."""
    executors: list[ThreadExecutor] = []

    def bind(model: LoadedModel, timeout_s: float | None = None) -> Forward:
        executor = ThreadExecutor(lambda _: model, timeout_s_for=lambda _: timeout_s)
        executors.append(executor)
        return partial(submit_rows, executor.submit, model.name)

    yield bind
    for executor in executors:
        executor.shutdown()


def fussy(x: torch.Tensor) -> torch.Tensor:
    """Logits (x0, x1); NaN where x0 < 0; raises on any x0 > 100."""
    if bool((x[:, 0] > 100).any()):
        raise RuntimeError("too big")
    logits = x.clone()
    logits[x[:, 0] < 0] = float("nan")
    return logits


def test_failing_and_non_finite_rows_are_isolated_and_the_rest_keep_their_order(
    on_executor: Any,
) -> None:
    model = LoadedModel("fussy", "1", fussy, ClassifierAdapter(2, 2), 4, torch.device("cpu"))
    items = np.array([[2, 1], [1, 2], [-1, 0], [3, 1], [101, 0], [0, 5], [1, 0]], dtype=np.float32)
    scored = score(model, items, BatchSizer(ControllerParams(), 4, fixed=4), on_executor(model))

    assert scored.keep.tolist() == [True, True, False, True, False, True, True]
    assert sorted((i, code) for i, code, _ in scored.failures) == [
        (2, "non_finite_output"),
        (4, "model_error"),
    ]
    assert scored.columns["label"].to_pylist() == [0, 1, 0, 1, 0]
    assert np.isfinite(np.array(scored.columns["probs"].to_pylist())).all()


class Numbered(Adapter):
    """Text "<n> " + padding: cost is the length; the model returns n, so the output
    says which row it came from."""

    variable_cost = True

    def __init__(self) -> None:
        self.batches: list[list[int]] = []  # the costs of each forward pass's items

    def prepare(self, inputs: Any) -> str:
        return str(inputs)

    def cost(self, item: Any) -> int:
        return len(item)

    def collate(self, items: Sequence[Any]) -> torch.Tensor:
        self.batches.append([len(i) for i in items])
        return torch.tensor([[float(i.split()[0])] for i in items])

    def split(self, output: Any, n: int) -> list[Any]:
        return list(output.tolist())

    def check_expected(self, expected: Any) -> None:
        return None

    def drift(self, output: Any, expected: Any) -> None:
        return None

    def example(self) -> str:
        return "0"


def numbered_texts(n: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [f"{i} " + "x" * int(rng.integers(1, 80)) for i in range(n)]


def test_text_is_scored_in_length_sorted_batches_and_comes_back_in_row_order(
    on_executor: Any,
) -> None:
    adapter = Numbered()
    model = LoadedModel("numbered", "1", lambda x: x, adapter, 16, torch.device("cpu"))
    texts = numbered_texts(500)
    sizer = BatchSizer(ControllerParams(max_batch_cost=16 * 60), 16)

    scored = score(model, texts, sizer, on_executor(model))

    assert scored.keep.all()
    assert scored.columns["embedding"].to_pylist() == [[float(i)] for i in range(500)]
    # Batches were cut from the texts sorted by length: each one's costs follow on from
    # the last one's, and none exceeds the padded size cap (items x widest).
    flat = [c for batch in adapter.batches for c in batch]
    assert flat == sorted(len(t) for t in texts)
    assert all(len(b) * max(b) <= 16 * 60 for b in adapter.batches)
    assert any(len(b) < sizer.size for b in adapter.batches[:-1])  # the cap cut some
    # Each row's batch size is the size of the forward pass that scored it.
    assert round(sum(1 / size for size in scored.batch_sizes.tolist())) == len(adapter.batches)


def seconds(size: int) -> float:
    """A made-up device: fixed cost per batch, then per item, and slower past 16 items."""
    return 0.01 + 0.001 * size + 0.003 * max(0, size - 16)


def test_the_sizer_settles_on_the_size_with_the_most_items_per_second() -> None:
    # Across the run the text grows 7x longer (a length-sorted window): time is scaled
    # by width, so the sizes measured late are not taken for slow ones.
    now = [0.0]
    sizer = BatchSizer(ControllerParams(), 64, clock=lambda: now[0])
    assert sizer.size == 32  # the controller's first cap
    for i in range(600):
        widest = 10 + i // 10
        size = sizer.size
        compute_s = seconds(size) * widest / 10
        now[0] += compute_s
        sizer.ran(size, widest, compute_s, waiting=10_000)
    assert sizer.size == 16
    assert {32, 64, 16} <= set(sizer.batches)  # it measured its way there


def test_a_given_batch_size_is_kept() -> None:
    now = [0.0]
    sizer = BatchSizer(ControllerParams(), 64, fixed=5, clock=lambda: now[0])
    for _ in range(50):
        now[0] += seconds(5)
        sizer.ran(5, 10, seconds(5), waiting=10_000)
    assert sizer.size == 5


def test_time_between_windows_is_not_taken_for_an_idle_device() -> None:
    """Busy batches with long gaps between windows: the cap is not grown for headroom."""
    now = [0.0]
    sizer = BatchSizer(ControllerParams(), 64, clock=lambda: now[0])
    for _ in range(40):
        now[0] += 5.0  # writing the last window's parts and SQL rows
        sizer.window()
        for _ in range(20):
            size = sizer.size
            now[0] += seconds(size)
            sizer.ran(size, 10, seconds(size), waiting=10_000)
    assert sizer.size == 16


def test_every_pass_runs_on_the_executors_compute_thread_and_a_hung_one_fails_its_rows(
    on_executor: Any,
) -> None:
    """Not on the job's thread: the executor's (its watchdog, nice value and lanes); a
    pass past the compute timeout fails that batch's rows with model_timeout and the
    next batch is scored."""
    threads: list[str] = []

    def slow_once(x: torch.Tensor) -> torch.Tensor:
        threads.append(threading.current_thread().name)
        if len(threads) == 1:
            time.sleep(1.0)
        return x.clone()

    model = LoadedModel("slow", "1", slow_once, ClassifierAdapter(2, 2), 4, torch.device("cpu"))
    items = np.array([[2, 1], [1, 2], [0, 3], [4, 1], [5, 0], [0, 5]], dtype=np.float32)
    sizer = BatchSizer(ControllerParams(), 4, fixed=2)
    scored = score(model, items, sizer, on_executor(model, 0.3))

    assert threads and all(name.startswith("inferlane-compute-") for name in threads)
    assert threading.current_thread().name not in threads
    timed_out = [(i, code) for i, code, _ in scored.failures]
    assert timed_out == [(0, "model_timeout"), (1, "model_timeout")]
    assert scored.keep.tolist() == [False, False, True, True, True, True]
    assert scored.columns["label"].to_pylist() == [1, 0, 0, 1]
