#!/usr/bin/env bash
# For whoever is lent a CUDA machine: the device, every CUDA-only test (-m cuda), a
# short generative throughput check on CUDA and a short bench, in under 8 minutes.
# Logs go to ${OUT:-gpu-check-out}/. Exits 1 at once without CUDA; otherwise runs every
# step and exits 1 if any failed (the summary names them). PYTHON overrides the
# interpreter (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
started=$SECONDS
failed=()

say() { printf '\n== %s (%ss)\n' "$*" "$((SECONDS - started))"; }

# step NAME SECONDS CMD...: run CMD under a timeout, log to $OUT/NAME.log, go on on failure.
step() {
    local name=$1 limit=$2 rc=0
    shift 2
    say "$name (at most ${limit}s)"
    timeout --kill-after=15 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
    if ((rc != 0)); then
        [[ $rc == 124 || $rc == 137 ]] && echo "gpu-check: $name ran past ${limit}s" >&2
        echo "gpu-check: FAILED: $name (exit $rc), see $OUT/$name.log" >&2
        failed+=("$name")
    fi
}

say "device"
{
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi || echo "nvidia-smi: exit $?"
    else
        echo "nvidia-smi: not found"
    fi
} 2>&1 | tee "$OUT/nvidia-smi.log"
(
    "$PY" - <<'EOF' 2>&1 | tee "$OUT/torch-cuda.log"
import torch

print(f"torch {torch.__version__}, built for CUDA {torch.version.cuda}")
print(f"cuda available: {torch.cuda.is_available()}, devices: {torch.cuda.device_count()}")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB")
print(f"cudnn: {torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}")
print(f"tf32 matmul: {torch.backends.cuda.matmul.allow_tf32}")
try:
    import pynvml

    pynvml.nvmlInit()
    print(f"NVML: driver {pynvml.nvmlSystemGetDriverVersion()}")
except Exception as exc:  # the scheduler's utilization probe falls back to busy time
    print(f"NVML: unavailable ({exc})")
EOF
) || true  # a torch that does not import fails the check below, with its line
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu-check: FAIL: torch.cuda.is_available() is not True: no CUDA device, or torch" \
        "is a CPU build (scripts/setup.sh pins one through constraints-cpu.txt; see" \
        "$OUT/torch-cuda.log). Nothing was run." >&2
    exit 1
fi

# Every CUDA-only test; none may be skipped here (a skip would mean CUDA went unseen).
step tests-cuda 160 "$PY" -m pytest -p no:xdist -o addopts= -m cuda -q -rs \
    --junitxml="$OUT/tests-cuda.xml"
if grep -q "SKIPPED" "$OUT/tests-cuda.log"; then
    echo "gpu-check: FAILED: tests-cuda skipped tests on a CUDA machine" >&2
    failed+=("tests-cuda-skips")
fi

# Generative throughput on CUDA: tinylm through the engine (continuous batching) against
# generate() one request at a time, greedy, on the same device.
step generative 90 "$PY" - "$OUT/generative.json" <<'EOF'
import asyncio
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

from consumers.contract import Priority
from worker.demo.generative_model import generative_entry, write_generative_demo
from worker.execution.generative.sequences import Finished, Job
from worker.execution.generative.runtime import engine_of
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel
from worker.settings import SchedulingConfig

REQUESTS, NEW_TOKENS, ALONE = 128, 64, 16
WORDS = (
    "Permission is hereby granted free of charge to any person obtaining a copy of this "
    "software THE SOFTWARE IS PROVIDED AS IS WITHOUT WARRANTY OF ANY KIND Redistribution "
    "and use in source and binary forms with or without modification are permitted"
).split()

with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    started = time.perf_counter()
    write_generative_demo(folder / "tinylm-1")
    print(f"tinylm built in {time.perf_counter() - started:.1f}s")
    # 64 MiB of KV (65,536 tokens): every request fits at once, none is preempted.
    entry = generative_entry("tinylm-1").replace("= 4194304", "= 67108864")
    (folder / "registry.toml").write_text(entry)
    registry = ModelRegistry.from_toml(folder / "registry.toml", device=torch.device("cuda"))
    model = registry.get("tinylm")
    assert isinstance(model, GenerativeModel) and model.device.type == "cuda", model.device
    adapter = model.generative_adapter
    rng = random.Random(1)
    items = []
    for _ in range(REQUESTS):
        start = rng.randrange(len(WORDS) - 8)
        text = " ".join(WORDS[start : start + rng.randint(4, 24)])
        items.append(adapter.prepare({"prompt": text, "max_new_tokens": NEW_TOKENS}))
    kv: list[int] = []
    engine = engine_of(model, kv.append, SchedulingConfig().lane_shares())

    async def generate(prefix: str) -> list[Finished]:
        """Every item submitted at once (they share the engine's steps), each to its end."""
        loop = asyncio.get_running_loop()
        ends: list[asyncio.Future[Finished]] = []
        for i, item in enumerate(items if prefix == "r" else items[:4]):
            ends.append(loop.create_future())
            job = Job(f"{prefix}{i}", Priority.NORMAL, item.prompt_ids, item.sampling)
            engine.submit(job, lambda _id, _chunk: None, ends[-1].set_result)
        return list(await asyncio.gather(*ends))

    async def timed() -> tuple[list[Finished], float]:
        await generate("warm")  # kernels, the engine's loop
        torch.cuda.synchronize()
        started = time.perf_counter()
        return await generate("r"), time.perf_counter() - started

    done, engine_s = asyncio.run(timed())
    engine.stop()
    engine_tokens = sum(f.generated_tokens for f in done)
    started = time.perf_counter()
    alone = model.forward(items[:ALONE])
    torch.cuda.synchronize()
    alone_s = time.perf_counter() - started
    alone_tokens = sum(o["generated_tokens"] for o in alone)  # type: ignore[call-overload,index,misc]
    engine_rate, alone_rate = engine_tokens / engine_s, alone_tokens / alone_s
    registry.close()
    result = {
        "device": torch.cuda.get_device_name(0),
        "requests": REQUESTS,
        "max_new_tokens": NEW_TOKENS,
        "engine_tokens_per_s": round(engine_rate, 1),
        "generate_one_at_a_time_tokens_per_s": round(alone_rate, 1),
        "ratio": round(engine_rate / alone_rate, 2),
        "kv_cache_bytes": kv[0] if kv else None,
        "preempted": engine.book.preempted,
        "steps": engine.book.steps,
        "finish_reasons": sorted({f.finish_reason for f in done}),
        "max_memory_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1),
    }
    print(json.dumps(result, indent=2))
    Path(sys.argv[1]).write_text(json.dumps(result, indent=2) + "\n")
    bad = [f.request_id for f in done if f.finish_reason not in ("eos", "length")]
    if bad:
        sys.exit(f"requests that did not end with eos or length: {bad[:5]}")
EOF

# A short bench on the GPU: the ceiling, inferlane's throughput and the priority
# scenario (high-lane latency under a low backlog: CUDA lane streams), both demo models.
step bench 200 "$PY" -m bench --quick --only ceiling,inferlane,priority \
    --models digits,minilm --out "$OUT/bench"

say "done"
if ((${#failed[@]})); then
    echo "gpu-check: FAILED steps: ${failed[*]} (logs in $OUT/)" >&2
    exit 1
fi
echo "gpu-check: every step passed (logs in $OUT/)"
