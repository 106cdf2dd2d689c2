"""Generative engines' Prometheus metrics, on the worker's registry, per model.

Steps are observed on the engine's thread as they end (``StepClock``), through label
children bound once per model; the first chunk's delay is observed by the chunk
publisher when the broker acknowledges it.
"""

from __future__ import annotations

from collections.abc import Iterable

from worker.base.metric_set import MetricSet, counter, histogram

# One set of edges for steps and first-chunk delays, which are compared with each
# other (a first chunk is due within one step): 0.5 ms to 5 s.
STEP_BUCKETS_S = (
    0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.5, 1, 2, 5,
)  # fmt: skip
_SEQUENCE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class GenerationMetrics(MetricSet):
    steps = counter("inferlane_generation_steps", "Decoding steps run, per model", "model")
    step_seconds = histogram(
        "inferlane_generation_step_seconds",
        "One decoding step on the engine's thread: scheduling, forward pass, tokens handed out",
        "model",
        buckets=STEP_BUCKETS_S,
    )
    step_sequences = histogram(
        "inferlane_generation_step_sequences",
        "Sequences computed in one decoding step",
        "model",
        buckets=_SEQUENCE_BUCKETS,
    )
    preemptions = counter(
        "inferlane_generation_preempted",
        "Sequences preempted (KV blocks freed, recomputed later) for a higher lane's prompt",
        "model",
    )
    first_chunk_delay = histogram(
        "inferlane_generation_first_chunk_delay_seconds",
        "A request's first token computed (its step's end) to its first chunk acknowledged "
        "by the broker",
        "model",
        buckets=STEP_BUCKETS_S,
    )

    def first_chunks(self, firsts: Iterable[tuple[str, float]], acked_s: float) -> None:
        """First chunks acknowledged at ``acked_s``: (model, first token's time) each,
        on the monotonic clock."""
        for model, first_token_s in firsts:
            self.first_chunk_delay.labels(model).observe(acked_s - first_token_s)


class EngineMeter:
    """One model's step metrics (a ``StepMeter``), label children bound once."""

    def __init__(self, metrics: GenerationMetrics, model: str) -> None:
        self._steps = metrics.steps.labels(model)
        self._seconds = metrics.step_seconds.labels(model)
        self._sequences = metrics.step_sequences.labels(model)
        self._preempted = metrics.preemptions.labels(model)

    def step(self, seconds: float, sequences: int) -> None:
        self._steps.inc()
        self._seconds.observe(seconds)
        self._sequences.observe(sequences)

    def preempted(self) -> None:
        self._preempted.inc()
