"""run_batch: one output per input; a poison input fails alone (bisection)."""

from __future__ import annotations

import pytest
import torch
from pipeline_factories import classifier, pending

from worker.base.pending import Batch
from worker.execution.executor import ThreadExecutor, run_batch
from worker.models import LoadedModel

POISON = 13.0


class Poisonable(torch.nn.Module):
    """A fixed linear classifier that raises when any input holds ``POISON``."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]))
            self.linear.bias.zero_()
        self.calls: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.shape[0])
        if bool((x == POISON).any()):
            raise RuntimeError("poison value in batch")
        return self.linear(x)


class WrongCount(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0] + 1, 3)


def loaded(module: torch.nn.Module) -> LoadedModel:
    return LoadedModel("m", "v7", module, classifier(), 64, torch.device("cpu"))


def batch_of(*inputs: list[float]) -> Batch:
    return Batch("m", [pending(inputs=list(x)) for x in inputs], formed_s=0.0)


def one_hot(i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(4)]


def test_a_clean_batch_gives_one_output_per_item_in_order() -> None:
    module = Poisonable()
    batch = batch_of([5.0, 0, 0, 0], [0, 5.0, 0, 0], [0, 0, 5.0, 0])

    run = run_batch(lambda name: loaded(module), batch)

    assert [r.error for r in run.results] == [None, None, None]
    assert [r.outputs["label"] for r in run.results] == [0, 1, 2]  # type: ignore[index]
    assert module.calls == [3]  # one forward pass
    assert run.model_version == "v7"
    assert run.compute_s >= 0.0


def test_one_poison_item_fails_alone_and_the_others_get_outputs() -> None:
    module = Poisonable()
    inputs = [[0, 0, 9.0, 0], [9.0, 0, 0, 0], [POISON, 0, 0, 0], [0, 9.0, 0, 0], [0, 0, 9.0, 0]]
    run = run_batch(lambda name: loaded(module), batch_of(*inputs))

    assert len(run.results) == len(inputs)
    failed = [i for i, r in enumerate(run.results) if r.error is not None]
    assert failed == [2]
    error = run.results[2].error
    assert error is not None and error.code == "model_error"
    assert "poison value in batch" in error.message
    assert run.results[2].outputs is None
    labels = [r.outputs["label"] for r in run.results if r.error is None]  # type: ignore[index]
    assert labels == [2, 0, 1, 2]
    assert run.model_version == "v7"


def test_good_outputs_after_bisection_match_a_clean_run() -> None:
    clean_inputs = [[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0], [0.5, 0.1, 0.2, 0.0]]
    clean = run_batch(lambda name: loaded(Poisonable()), batch_of(*clean_inputs))
    mixed = run_batch(
        lambda name: loaded(Poisonable()),
        batch_of(clean_inputs[0], [POISON] * 4, *clean_inputs[1:]),
    )
    survivors = [r for r in mixed.results if r.error is None]
    assert len(survivors) == 3
    for got, want in zip(survivors, clean.results, strict=True):
        assert got.outputs["label"] == want.outputs["label"]  # type: ignore[index]
        assert got.outputs["probs"] == pytest.approx(want.outputs["probs"])  # type: ignore[index]


@pytest.mark.parametrize("poisoned", [[0], [7], [0, 7], [1, 2, 3], list(range(8))])
def test_exactly_the_poison_items_fail(poisoned: list[int]) -> None:
    inputs = [[POISON] * 4 if i in poisoned else one_hot(i % 4) for i in range(8)]
    run = run_batch(lambda name: loaded(Poisonable()), batch_of(*inputs))
    assert len(run.results) == 8
    assert [i for i, r in enumerate(run.results) if r.error] == poisoned
    assert all(r.outputs is not None for r in run.results if r.error is None)


def test_a_model_that_returns_the_wrong_count_fails_every_item_but_one_result_each() -> None:
    run = run_batch(lambda name: loaded(WrongCount()), batch_of(*[one_hot(0)] * 3))
    assert len(run.results) == 3
    assert all(r.error is not None and r.error.code == "model_error" for r in run.results)
    assert all(r.outputs is None for r in run.results)


def test_a_model_that_cannot_load_fails_all_items_with_model_error() -> None:
    def resolve(name: str) -> LoadedModel:
        raise FileNotFoundError(f"no weights for {name}")

    run = run_batch(resolve, batch_of(one_hot(0), one_hot(1)))

    assert len(run.results) == 2
    for result in run.results:
        assert result.outputs is None
        assert result.error is not None and result.error.code == "model_error"
        assert "model 'm' could not be loaded" in result.error.message
        assert "FileNotFoundError: no weights for m" in result.error.message
    assert run.model_version is None and run.compute_s == 0.0


def test_the_thread_executor_runs_a_batch_off_the_calling_thread() -> None:
    executor = ThreadExecutor(lambda name: loaded(Poisonable()))
    try:
        run = executor.submit(batch_of(one_hot(1), [POISON] * 4)).result(timeout=10)
    finally:
        executor.shutdown()
    assert [r.error is None for r in run.results] == [True, False]


class Overflowing(torch.nn.Module):
    """Scales by 1e38: an input of 10 overflows float32 to Infinity, 0 * inf gives NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :3] * 1e38


def test_a_non_finite_output_fails_only_its_own_request_with_its_own_code() -> None:
    batch = batch_of([1.0, 0, 0, 0], [10.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0])

    run = run_batch(lambda name: loaded(Overflowing()), batch)

    errors = [r.error.code if r.error else None for r in run.results]
    assert errors == [None, "non_finite_output", None, None]
    assert [r.outputs["label"] for r in run.results if r.error is None] == [0, 1, 2]  # type: ignore[index]


def test_items_whose_deadline_passed_in_the_executor_queue_are_not_computed() -> None:
    """A batch waits behind a running one; what expired meanwhile comes back expired."""
    module = Poisonable()
    fresh, stale = pending(inputs=one_hot(1)), pending(inputs=one_hot(2), deadline_s=0.0)
    batch = Batch("m", [stale, fresh, stale], formed_s=0.0)

    run = run_batch(lambda name: loaded(module), batch)

    assert [r.expired for r in run.results] == [True, False, True]
    assert module.calls == [1]  # only the live item ran
    assert run.results[1].outputs["label"] == 1  # type: ignore[index]
    assert run.results[0].outputs is None and run.results[0].error is None

    everyone_late = run_batch(lambda name: loaded(module), Batch("m", [stale], formed_s=0.0))
    assert [r.expired for r in everyone_late.results] == [True]
    assert module.calls == [1]  # no forward pass at all
