from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from worker.demo.models import (
    demo_sentences,
    diabetes_test_set,
    digits_test_set,
    ensure_demo_models,
)
from worker.models import ModelRegistry


def test_registry_lists_the_demo_models(demo_registry: ModelRegistry) -> None:
    assert demo_registry.names() == ["diabetes", "digits", "minilm"]
    for name in demo_registry.names():
        demo_registry.warmup(name, batch_size=2)


def test_digits_accuracy_on_raw_pixels(demo_registry: ModelRegistry) -> None:
    model = demo_registry.get("digits")
    x, y = digits_test_set()
    assert x.max() == 16.0  # raw pixels, not standardized
    outputs = cast(
        list[dict[str, Any]], model.run([model.adapter.prepare(row.tolist()) for row in x])
    )
    labels = np.array([out["label"] for out in outputs])
    assert (labels == y).mean() >= 0.95


def test_digits_accepts_8x8_images(demo_registry: ModelRegistry) -> None:
    model = demo_registry.get("digits")
    x, _ = digits_test_set()
    flat, image = (model.adapter.prepare(v) for v in (x[0].tolist(), x[0].reshape(8, 8).tolist()))
    assert model.run([flat]) == model.run([image])


def test_diabetes_r2(demo_registry: ModelRegistry) -> None:
    model = demo_registry.get("diabetes")
    x, y = diabetes_test_set()
    predictions = np.array(model.run([model.adapter.prepare(row.tolist()) for row in x]))
    r2 = 1 - ((predictions - y) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 > 0.3
    assert model.adapter.drift(float(predictions[0]), float(y[0])) == (
        pytest.approx(predictions[0]),
        pytest.approx(y[0]),
        pytest.approx(predictions[0] - y[0]),
    )


def test_minilm_similar_sentences_are_closer(demo_registry: ModelRegistry) -> None:
    model = demo_registry.get("minilm")
    texts = [
        "A man is playing a guitar.",
        "Someone plays an acoustic guitar.",
        "The stock market fell sharply today.",
    ]
    vectors = np.array(model.run([model.adapter.prepare(t) for t in texts]))
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > unrelated + 0.3


def test_demo_sentences_are_deterministic() -> None:
    sentences = demo_sentences(50, seed=7)
    assert sentences == demo_sentences(50, seed=7) != demo_sentences(50, seed=8)
    assert all(6 <= len(s.split()) <= 40 for s in sentences)


def test_second_call_reuses_the_cache(demo_registry_path: Path) -> None:
    folder = demo_registry_path.parent
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert ensure_demo_models(folder) == demo_registry_path
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_cache_folder_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_registry_path: Path
) -> None:
    for artifact in demo_registry_path.parent.glob("*-*.*"):
        (tmp_path / artifact.name).write_bytes(artifact.read_bytes())  # skip the build
    monkeypatch.setenv("INFERLANE_MODEL_CACHE", str(tmp_path))
    assert ensure_demo_models() == tmp_path / "registry.toml"
    assert ModelRegistry.from_toml(tmp_path / "registry.toml").names() == [
        "diabetes",
        "digits",
        "minilm",
    ]


def test_concurrent_builds_leave_one_good_cache(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from worker.demo.models import ensure_demo_models; "
        "ensure_demo_models(Path(sys.argv[1]))"
    )
    builders = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(2)]
    assert [builder.wait(timeout=120) for builder in builders] == [0, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".lock",
        "diabetes-1.safetensors",
        "digits-1.pt2",
        "registry.toml",
    ]
    registry = ModelRegistry.from_toml(tmp_path / "registry.toml")
    assert registry.get("digits").run([registry.adapter("digits").prepare([0] * 64)])
