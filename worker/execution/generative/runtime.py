"""The engine of a loaded generative model: made once per loaded model, its KV cache
charged to the model store.

``engine_of`` builds the engine on first use (call it off the event loop: it allocates
the KV cache), charges the cache's bytes to the model's device-tier charge through
``reserve`` (the store makes room for them as for a load), and attaches the engine to
the model as its runner, so that a model leaving memory stops its engine first.
``generate_all`` runs prepared items to the end on it (offline jobs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import torch

from consumers.contract import Priority
from worker.base.generation import GenerationItem
from worker.execution.generative.engine import EngineSettings, GenerativeEngine
from worker.execution.generative.sequences import Finished, Job
from worker.models.generative_model import GenerativeModel, RunnerLease

_lock = threading.Lock()


def engine_of(
    model: GenerativeModel,
    reserve: Callable[[int], None],
    shares: Mapping[Priority, float],
) -> GenerativeEngine:
    with _lock:
        lease = model.lease
        if isinstance(lease, RunnerLease) and isinstance(lease.runner, GenerativeEngine):
            return lease.runner
        adapter = model.generative_adapter
        limits = adapter.limits
        settings = EngineSettings(
            num_blocks=adapter.num_blocks,
            page_size=limits.page_size,
            max_batch_tokens=limits.max_batch_tokens,
            chunk_tokens=limits.chunk_tokens,
            torch_threads=limits.torch_threads or max(1, torch.get_num_threads() - 1),
            shares=dict(shares),
        )
        engine = GenerativeEngine(
            model.module,  # type: ignore[arg-type]
            adapter.tokenizer.backend_tokenizer,
            settings,
            eos_token_ids=adapter.eos_token_ids,
        )
        reserve(engine.prepare().nbytes)
        if isinstance(lease, RunnerLease):
            lease.runner = engine
        return engine


def generate_all(engine: GenerativeEngine, items: Sequence[GenerationItem]) -> list[Finished]:
    """Every item generated to the end, in order (blocking; no event loop in this thread)."""
    jobs = [Job(str(i), Priority.NORMAL, it.prompt_ids, it.sampling) for i, it in enumerate(items)]
    return engine.run_blocking(jobs)
