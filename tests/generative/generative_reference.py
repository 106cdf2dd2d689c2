"""What the generative tests compare the engine with: jobs run to their ends on an
engine, and one request alone through ``generate()``."""

from __future__ import annotations

import asyncio

import torch

from worker.base.generation import GenerationItem
from worker.execution.generative.engine import GenerativeEngine
from worker.execution.generative.sequences import Finished, Job
from worker.models.generative_model import GenerativeModel


async def generate_all(engine: GenerativeEngine, jobs: list[Job]) -> dict[str, Finished]:
    """Every job submitted at once (they share the engine's steps), each to its end."""
    loop = asyncio.get_running_loop()
    ends: dict[str, asyncio.Future[Finished]] = {}
    for job in jobs:
        ends[job.request_id] = loop.create_future()
        engine.submit(job, lambda _id, _chunk, _first_s: None, ends[job.request_id].set_result)
    return {rid: await end for rid, end in ends.items()}


def greedy_reference(model: GenerativeModel, item: GenerationItem) -> list[int]:
    """One request alone through ``generate()``, greedy, on the model's device."""
    ids = torch.tensor([item.prompt_ids], device=model.device)
    eos = model.generative_adapter.eos_token_ids
    with torch.inference_mode():
        out = model.module.generate(  # type: ignore[attr-defined]
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=item.sampling.max_new_tokens,
            pad_token_id=eos[0],
        )
    return list(out[0, len(item.prompt_ids) :].tolist())
