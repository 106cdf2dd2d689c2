"""``inferlane score`` over a file of prompts, as a user types it: the texts are those of
generate() one at a time, labelled rows get their F1 drift rows, bad rows go to the
errors file, and --distributed refuses a generative model."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from generative_prompts import prompt
from generative_reference import greedy_reference
from sqlalchemy import text
from typer.testing import CliRunner

from storage import make_engine
from worker.cli import app
from worker.jobs.outputs import errors_path
from worker.jobs.rows import window_result
from worker.models import ModelRegistry
from worker.models.generative_model import GenerativeModel
from worker.models.text_score import score

EXPECTED = "free of charge, to any person obtaining a copy"


def _rows(n: int) -> list[dict[str, Any]]:
    """Greedy prompts (a bare string, or an object with max_new_tokens), chat messages,
    a sampled row; every third labelled; then three bad rows."""
    rng = random.Random(7)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        inputs: Any = prompt(rng, 2, 20)
        if i % 2:
            inputs = {"prompt": inputs, "max_new_tokens": rng.randint(4, 24), "return_tokens": True}
        rows.append(
            {"id": f"p{i}", "inputs": inputs, **({"label": EXPECTED} if i % 3 == 0 else {})}
        )
    rows.append({"id": "chat", "inputs": {"messages": [{"role": "user", "content": "hi"}]}})
    sampled = {"prompt": "Permission is", "temperature": 0.8, "seed": 5, "max_new_tokens": 12}
    rows.append({"id": "sampled", "inputs": sampled})
    rows.append({"id": "empty", "inputs": {"prompt": ""}})
    rows.append({"id": "long", "inputs": {"prompt": "x", "max_new_tokens": 129}})
    rows.append({"id": "list", "inputs": [1, 2]})
    return rows


def _score(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["score", *args])
    return result.exit_code, result.output


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_a_file_of_prompts_scores_like_generate(
    tinylm_registry: ModelRegistry, tinylm_registry_path: Path, tmp_path: Path
) -> None:
    rows = _rows(14)
    source = tmp_path / "prompts.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + b"not json\n")
    output, url = tmp_path / "out.jsonl", f"sqlite:///{tmp_path / 'g.db'}"
    code, said = _score(
        "--model", "tinylm", "--input", str(source), "--output", str(output),
        "--database", url, "--models", str(tinylm_registry_path), "--id-column", "id",
        "--label-column", "label", "--job", "gen", "--window-rows", "6",
    )  # fmt: skip
    assert code == 0, said

    model = tinylm_registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    adapter = model.generative_adapter
    good = rows[:-3]
    out = _lines(output)
    assert [o["id"] for o in out] == [r["id"] for r in good]
    assert [o["row"] for o in out] == list(range(len(good)))
    engine = make_engine(url)
    with engine.connect() as conn:
        stored: dict[str, Any] = dict(
            conn.execute(text("SELECT request_id, outputs FROM inference_results")).all()
        )
        statuses: dict[str, Any] = dict(
            conn.execute(text("SELECT request_id, status FROM inference_results")).all()
        )
        drift = conn.execute(text("SELECT request_id, output, expected FROM inference_log")).all()
        marks = conn.execute(
            text("SELECT request_id, f1, exact_match FROM generations WHERE f1 IS NOT NULL")
        ).all()
        generations = conn.execute(text("SELECT COUNT(*) FROM generations")).scalar_one()
    engine.dispose()
    for o, r in zip(out, good, strict=True):
        item = adapter.prepare(r["inputs"])
        outputs = orjson.loads(stored[f"gen:{o['row']}"])
        assert {k: outputs[k] for k in o if k in outputs} == {
            k: o[k] for k in ("text", "finish_reason", "prompt_tokens", "generated_tokens")
        }
        assert o["prompt_tokens"] == len(item.prompt_ids)
        assert o.get("expected") == r.get("label")
        if r["id"] == "sampled":
            continue
        reference = greedy_reference(model, item)  # generate() alone, greedy
        assert o["text"] == adapter.tokenizer.decode(reference, skip_special_tokens=True)
        assert o["generated_tokens"] == len(reference), r["id"]
        if item.return_tokens:
            assert outputs["token_ids"] == reference, r["id"]
        assert o["finish_reason"] == (
            "eos" if len(reference) < item.sampling.max_new_tokens else "length"
        )
    labelled = {f"gen:{o['row']}": o for o in out if o.get("expected")}
    assert {d.request_id for d in drift} == set(labelled) and len(labelled) == 5
    for d in drift:
        assert d.output == score(labelled[d.request_id]["text"], EXPECTED).f1 and d.expected == 1.0
    assert {m.request_id: m.f1 for m in marks} == {d.request_id: d.output for d in drift}
    assert generations == len(good)

    errors = _lines(errors_path(output))
    assert [e.get("id") for e in errors] == ["empty", "long", "list", None]
    assert "must not be empty" in errors[0]["error"] and "at most 128" in errors[1]["error"]
    assert errors[3]["row"] == len(rows) and "not JSON" in errors[3]["error"]
    assert [statuses[f"gen:{e['row']}"] for e in errors] == ["rejected"] * 4


def test_prompt_and_settings_from_columns(
    tinylm_registry: ModelRegistry, tinylm_registry_path: Path, tmp_path: Path
) -> None:
    """A CSV of ``prompt,max_new_tokens`` (an empty cell: the model's default)."""
    prompts = ["Permission is hereby granted", "THE SOFTWARE IS", "Redistribution and use"]
    source = tmp_path / "prompts.csv"
    limits = ["5", "", "9"]
    pacsv.write_csv(pa.table({"prompt": prompts, "max_new_tokens": limits}), source)
    output = tmp_path / "out.parquet"
    code, said = _score(
        "--model", "tinylm", "--input", str(source), "--output", str(output),
        "--database", f"sqlite:///{tmp_path / 'c.db'}", "--models", str(tinylm_registry_path),
        "--input-column", "prompt,max_new_tokens",
    )  # fmt: skip
    assert code == 0, said
    model = tinylm_registry.get("tinylm")
    assert isinstance(model, GenerativeModel)
    adapter = model.generative_adapter
    texts = pa.parquet.read_table(output).column("text").to_pylist()
    for text_out, p, limit in zip(texts, prompts, limits, strict=True):
        inputs: dict[str, Any] = {"prompt": p}
        if limit:
            inputs["max_new_tokens"] = int(limit)
        reference = greedy_reference(model, adapter.prepare(inputs))
        assert text_out == adapter.tokenizer.decode(reference, skip_special_tokens=True)


def test_distributed_refuses_a_generative_model(tinylm_registry_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "prompts.jsonl"
    source.write_bytes(b'{"inputs": "Permission is"}\n')
    code, said = _score(
        "--model", "tinylm", "--input", str(source), "--distributed",
        "--bootstrap", "127.0.0.1:1", "--models", str(tinylm_registry_path),
        "--database", f"sqlite:///{tmp_path / 'd.db'}",
    )  # fmt: skip
    assert code == 2
    assert "is generative: --distributed does not take generative models" in said


def test_the_forward_pass_path_refuses_a_generative_model(tinylm_registry: ModelRegistry) -> None:
    """Ray Data's Scorer and distributed chunks score through ``window_result``: a
    generative model there fails at once, instead of failing every row."""
    model = tinylm_registry.get("tinylm")
    with pytest.raises(ValueError, match="'tinylm' is generative: only a local job"):
        window_result("j", None, None, model, None, None)  # type: ignore[arg-type]
