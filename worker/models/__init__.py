"""Models: registry file, loaders per weights format, adapters, and the demo models."""

from worker.models.adapters import (
    Adapter,
    ClassifierAdapter,
    RegressorAdapter,
    TextEmbeddingAdapter,
)
from worker.models.demo import (
    demo_sentences,
    diabetes_test_set,
    digits_test_set,
    ensure_demo_models,
)
from worker.models.loaders import MeanPooledEncoder, load_model
from worker.models.model import LoadedModel
from worker.models.registry import Changes, ModelRegistry
from worker.models.specs import (
    AdapterConfig,
    ClassifierConfig,
    ModelSpec,
    RegistryFile,
    RegressorConfig,
    TextEmbeddingConfig,
)

__all__ = [
    "Adapter",
    "AdapterConfig",
    "Changes",
    "ClassifierAdapter",
    "ClassifierConfig",
    "LoadedModel",
    "MeanPooledEncoder",
    "ModelRegistry",
    "ModelSpec",
    "RegistryFile",
    "RegressorAdapter",
    "RegressorConfig",
    "TextEmbeddingAdapter",
    "TextEmbeddingConfig",
    "demo_sentences",
    "diabetes_test_set",
    "digits_test_set",
    "ensure_demo_models",
    "load_model",
]
