"""The model registry file: pydantic models for each model's spec, parsed from TOML.

The registry is trusted configuration: a ``factory`` entry names Python code that the
worker imports and runs. So a registry file that any user of the machine could rewrite
is refused.
"""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from worker.models.adapters import (
    Adapter,
    ClassifierAdapter,
    RegressorAdapter,
    TextEmbeddingAdapter,
)
from worker.settings.controller_params import ControllerParams
from worker.settings.drift_thresholds import DriftThresholds
from worker.settings.rollout_plan import RolloutPlan


def _base(info: ValidationInfo) -> Path | None:
    """The registry file's folder, when the spec is read from one."""
    base = info.context.get("base") if isinstance(info.context, dict) else None
    return None if base is None else Path(base)


def _resolve(path: Path, info: ValidationInfo) -> Path:
    """Relative paths in a registry file are relative to that file's folder."""
    base = _base(info)
    return path if path.is_absolute() or base is None else base / path


RegistryPath = Annotated[Path, AfterValidator(_resolve)]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClassifierConfig(_Config):
    kind: Literal["classifier"]
    features: Annotated[int, Field(ge=1)]
    num_classes: Annotated[int, Field(ge=2)]
    shapes: list[tuple[int, ...]] = []

    def build(self) -> Adapter:
        return ClassifierAdapter(self.features, self.num_classes, self.shapes)


class RegressorConfig(_Config):
    kind: Literal["regressor"]
    features: Annotated[int, Field(ge=1)]
    shapes: list[tuple[int, ...]] = []

    def build(self) -> Adapter:
        return RegressorAdapter(self.features, self.shapes)


class TextEmbeddingConfig(_Config):
    kind: Literal["text_embedding"]
    tokenizer: RegistryPath
    max_tokens: Annotated[int, Field(ge=1)] = 256
    max_chars: Annotated[int, Field(ge=1)] = 10_000

    def build(self) -> Adapter:
        return TextEmbeddingAdapter(self.tokenizer, self.max_tokens, self.max_chars)


class GenerativeConfig(_Config):
    """A causal LM from a Hugging Face directory (``format = "hf"``), served on the
    generative engine (docs/GENERATIVE.md)."""

    kind: Literal["generative"]
    max_context: Annotated[int, Field(ge=2)] | None = None  # None: the model's positions
    max_new_tokens: Annotated[int, Field(ge=1)] = 256  # the most a request may ask
    default_max_new_tokens: Annotated[int, Field(ge=1)] = 64
    max_prompt_chars: Annotated[int, Field(ge=1)] = 100_000
    kv_cache_bytes: Annotated[int, Field(ge=1)] = 64 * 2**20
    page_size: Annotated[int, Field(ge=4)] = 32
    max_batch_tokens: Annotated[int, Field(ge=16)] = 256
    chunk_tokens: Annotated[int, Field(ge=1)] = 8
    # The engine thread's torch threads; None: one fewer than the process's (at least
    # one), leaving a core to the event loop, the Kafka clients and SQL while it decodes.
    torch_threads: Annotated[int, Field(ge=1)] | None = None
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    _model_dir: Path | None = PrivateAttr(default=None)  # the spec's path, set by ModelSpec

    @model_validator(mode="after")
    def _default_within_limit(self) -> GenerativeConfig:
        if self.default_max_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"default_max_new_tokens ({self.default_max_new_tokens}) is above"
                f" max_new_tokens ({self.max_new_tokens})"
            )
        return self

    def build(self) -> Adapter:
        # Imports transformers (seconds): only a registry with a generative model pays.
        from worker.models.generative import GenerativeAdapter, GenerativeLimits

        if self._model_dir is None:
            raise ValueError("a generative adapter reads its model's folder: build its ModelSpec")
        limits = GenerativeLimits(**self.model_dump(exclude={"kind"}))
        return GenerativeAdapter(self._model_dir, limits)


AdapterConfig = Annotated[
    ClassifierConfig | RegressorConfig | TextEmbeddingConfig | GenerativeConfig,
    Field(discriminator="kind"),
]


class ModelSpec(_Config):
    """One ``[[models]]`` entry: where the weights are, how to load them, how to batch."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    version: Annotated[str, Field(min_length=1)]
    format: Literal["export", "torchscript", "factory", "hf"]
    path: RegistryPath
    factory: Annotated[str, Field(pattern=r"^[\w.]+:\w+$")] | None = None
    adapter: AdapterConfig
    max_batch: Annotated[int, Field(ge=1)] = 256
    # Serve an optimized module, only once its outputs match eager within the tolerance.
    optimize: Literal["compile", "trace"] | None = None
    optimize_tolerance: Annotated[float, Field(gt=0)] = 1e-4
    scheduling: ControllerParams = ControllerParams()  # batch controller (docs/SCHEDULING.md)
    # Overrides the worker's compute timeout (settings.compute.timeout_s) for this model.
    compute_timeout_s: Annotated[float, Field(gt=0)] | None = None
    # Overrides settings.compute.replicas for this model: 1 keeps its bulk batches on one
    # compute thread per lane (a Python-bound model gains nothing from two).
    replicas: Annotated[int, Field(ge=1)] | None = None
    drift: DriftThresholds | None = None  # None: the worker's [drift] thresholds
    _folder: Path | None = PrivateAttr(default=None)

    @property
    def folder(self) -> Path | None:
        """The registry file's folder (where a factory module is looked for first);
        None for a spec built in code."""
        return self._folder

    @model_validator(mode="after")
    def _remember_folder(self, info: ValidationInfo) -> ModelSpec:
        self._folder = _base(info)
        return self

    @model_validator(mode="after")
    def _generative_reads_its_folder(self) -> ModelSpec:
        if isinstance(self.adapter, GenerativeConfig):
            if self.format != "hf" or self.optimize is not None:
                raise ValueError(
                    'a generative model is a Hugging Face directory (format = "hf"),'
                    " served without optimize"
                )
            self.adapter._model_dir = self.path
        return self

    @field_validator("name")
    @classmethod
    def _no_at_sign(cls, name: str) -> str:
        if "@" in name:
            raise ValueError(
                f"model name {name!r} contains '@', which separates a candidate's "
                "name from its version (name@version)"
            )
        return name

    @model_validator(mode="after")
    def _factory_iff_factory_format(self) -> ModelSpec:
        if (self.format == "factory") != (self.factory is not None):
            raise ValueError(
                "'factory' (\"package.module:build\") is required for "
                "format 'factory' and only for it"
            )
        return self


def candidate_key(name: str, version: str) -> str:
    """How a candidate version is named beside the primary: ``name@version``."""
    return f"{name}@{version}"


class CandidateSpec(ModelSpec):
    """One ``[[candidates]]`` entry: another version of a ``[[models]]`` entry."""

    # How it goes live; None: only by ``inferlane rollout start``.
    rollout: RolloutPlan | None = None


class RegistryFile(_Config):
    models: list[ModelSpec]
    candidates: list[CandidateSpec] = []

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[ModelSpec]) -> list[ModelSpec]:
        names = [m.name for m in models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate model names: {', '.join(duplicates)}")
        return models

    @model_validator(mode="after")
    def _candidates_of_known_models(self) -> RegistryFile:
        versions = {m.name: m.version for m in self.models}
        keys = [candidate_key(c.name, c.version) for c in self.candidates]
        for candidate, key in zip(self.candidates, keys, strict=True):
            if candidate.name not in versions:
                raise ValueError(f"candidate {key}: no [[models]] entry named {candidate.name!r}")
            if candidate.version == versions[candidate.name]:
                raise ValueError(
                    f"candidate {key}: version {candidate.version!r} is the version "
                    "[[models]] serves; a candidate needs another one"
                )
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"duplicate candidates: {', '.join(duplicates)}")
        return self

    @classmethod
    def from_toml(cls, path: Path) -> RegistryFile:
        refuse_world_writable(path)
        with path.open("rb") as file:
            data = tomllib.load(file)
        return cls.model_validate(data, context={"base": path.resolve().parent})


def refuse_world_writable(path: Path, what: str = "the model registry") -> None:
    """A registry or factory module anyone can rewrite (the file, or a folder without
    the sticky bit that lets anyone replace it) would let anyone run code in the worker."""
    for where in (path, path.resolve().parent):
        mode = where.stat().st_mode
        replaceable = where.is_file() or not mode & stat.S_ISVTX
        if mode & stat.S_IWOTH and replaceable:
            raise PermissionError(
                f"refusing {what} {path}: {where} is writable by every user, "
                "and the registry names code the worker runs (chmod o-w it)"
            )
