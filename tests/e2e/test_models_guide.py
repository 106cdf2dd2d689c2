"""docs/MODELS.md carried out as written, one test per format: train (or build) a tiny
model, save it, register it, check it, serve it through Kafka, and compare the worker's
answers with local inference.

The guide's fenced blocks that carry ``flows=`` are the script: ``file=NAME`` blocks are
saved under that name, ``serve`` blocks run in the background until the flow ends (a
user's second terminal) and the next step waits for their ``/readyz`` as the guide
says, and the other blocks run in bash, in order, in an empty folder, with the virtual
environment's ``bin`` first on ``PATH`` and no ``PYTHONPATH``. The guide's broker (its
first terminal) is the ``broker`` fixture: ``INFERLANE_BOOTSTRAP`` points at it, as the
guide tells users to set it. The worker's HTTP port is a free one, not the guide's
9400, which another process of the machine may hold.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import torch
from pydantic import BaseModel
from safetensors.torch import load_file
from sqlalchemy import select
from tokenizers import Tokenizer

from storage import make_engine
from storage.schema import inference_results
from worker.intake.broker import EmbeddedBroker, free_port
from worker.models.specs import (
    CandidateSpec,
    ClassifierConfig,
    RegressorConfig,
    TextEmbeddingConfig,
)
from worker.settings.controller_params import ControllerParams
from worker.settings.drift_thresholds import DriftThresholds
from worker.settings.rollout_plan import Gates, RolloutPlan

from .support import wait_for_rows

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "MODELS.md"
_FENCE = re.compile(r"^```(\S+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_STEP_TIMEOUT_S = 300

pytestmark = pytest.mark.timeout(900)


@dataclass(frozen=True, slots=True)
class Step:
    options: dict[str, str]
    text: str


def steps(flow: str) -> list[Step]:
    """The guide's blocks for ``flow``, in the guide's order."""
    found = []
    for _, info, text in _FENCE.findall(GUIDE.read_text()):
        options = {k: v for k, _, v in (o.partition("=") for o in info.split())}
        if flow in options.get("flows", "").split(","):
            found.append(Step(options, text))
    return found


def carry_out(flow: str, folder: Path, bootstrap: str) -> str:
    """Run ``flow``'s steps in ``folder``; return what the foreground steps printed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
        "INFERLANE_BOOTSTRAP": bootstrap,
        "INFERLANE_OPS__HTTP_PORT": str(free_port()),
    }
    printed = []
    with ExitStack() as servers:
        for step in steps(flow):
            if "file" in step.options:
                (folder / step.options["file"]).write_text(step.text)
            elif "serve" in step.options:
                servers.enter_context(serving(step.text, folder, env))
            else:
                done = subprocess.run(
                    ["bash", "-e", "-c", step.text],
                    cwd=folder,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=_STEP_TIMEOUT_S,
                )
                assert done.returncode == 0, f"{step.text}\n{done.stdout}\n{done.stderr}"
                printed.append(done.stdout)
    return "\n".join(printed)


@contextmanager
def serving(command: str, folder: Path, env: dict[str, str]) -> Iterator[None]:
    """``command`` in the background (its own process group), once its ``/readyz``
    answers 200."""
    log = folder / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + _STEP_TIMEOUT_S
        while not ready(int(env["INFERLANE_OPS__HTTP_PORT"])):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:  # not listening yet, or 503 (HTTPError is an OSError)
        return False


def stored_outputs(database: Path, n: int) -> dict[str, object]:
    """The ``ok`` outputs the worker stored in SQL, by request id."""
    engine = make_engine(f"sqlite:///{database}")
    try:
        assert wait_for_rows(engine, n) == n
        c = inference_results.c
        with engine.connect() as conn:
            rows = conn.execute(select(c.request_id, c.status, c.outputs)).all()
    finally:
        engine.dispose()
    assert {status for _, status, _ in rows} == {"ok"}
    return {rid: outputs for rid, _, outputs in rows}


@pytest.mark.parametrize("flow", ["export", "torchscript", "factory"])
def test_the_iris_classifier_steps(flow: str, broker: EmbeddedBroker, tmp_path: Path) -> None:
    printed = carry_out(flow, tmp_path, broker.bootstrap)

    assert "ok   iris (version 1)" in printed
    assert "30 results equal local inference" in printed
    # Independently of the guide's own check: what the worker stored in SQL equals the
    # guide's model run here on the weights train.py saved.
    spec = importlib.util.spec_from_file_location(f"iris_{flow}", tmp_path / "tiny_model.py")
    assert spec is not None and spec.loader is not None
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    model = tiny.build().eval()
    model.load_state_dict(load_file(tmp_path / "iris.safetensors"))
    stored = stored_outputs(tmp_path / "iris.db", 30)
    requests = [
        orjson.loads(line)
        for line in (tmp_path / "requests.jsonl").read_bytes().split(b"\n")
        if line
    ]
    with torch.no_grad():
        local = torch.softmax(model(torch.tensor([r["inputs"] for r in requests])), dim=1)
    for request, probs in zip(requests, local, strict=True):
        served = stored[request["request_id"]]
        assert isinstance(served, dict) and served["label"] == int(probs.argmax())
        torch.testing.assert_close(torch.tensor(served["probs"]), probs, atol=1e-5, rtol=0)


# The texts ask_words.py sends, by request id.
WORDS = {
    "words-0": "the cat sat on the mat",
    "words-1": "a dog ran",
    "words-2": "the dog sat under a rug in the garden",
}


def test_the_hugging_face_encoder_steps(broker: EmbeddedBroker, tmp_path: Path) -> None:
    from transformers import AutoModel

    printed = carry_out("hf", tmp_path, broker.bootstrap)

    assert "ok   words (version 1)" in printed
    assert "3 embeddings of 32 numbers equal local inference" in printed
    stored = stored_outputs(tmp_path / "words.db", 3)
    assert stored.keys() == WORDS.keys()
    tokenizer = Tokenizer.from_file(str(tmp_path / "encoder" / "tokenizer.json"))
    encoder = AutoModel.from_pretrained(tmp_path / "encoder").eval()
    for rid, text in WORDS.items():
        served = stored[rid]
        with torch.no_grad():
            hidden = encoder(input_ids=torch.tensor([tokenizer.encode(text).ids]))
        local = torch.nn.functional.normalize(hidden.last_hidden_state[0].mean(dim=0), dim=0)
        torch.testing.assert_close(torch.tensor(served), local, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "table",
    [
        CandidateSpec,
        ClassifierConfig,
        RegressorConfig,
        TextEmbeddingConfig,
        ControllerParams,
        DriftThresholds,
        RolloutPlan,
        Gates,
    ],
)
def test_the_guide_names_every_registry_field(table: type[BaseModel]) -> None:
    text = GUIDE.read_text()
    missing = [f for f in table.model_fields if f"`{f}`" not in text]
    assert not missing, f"docs/MODELS.md does not describe {table.__name__}: {missing}"
