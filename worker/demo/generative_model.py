"""The generative demo model: a tiny Llama and a BPE tokenizer trained, in seconds and
without downloads, on the license texts that installed packages ship.

``ensure_generative_demo`` builds it once into the demo cache folder (beside the other
demo models, deterministic) and writes ``registry-generative.toml`` there: the demo
models plus this one, which ``inferlane demo`` serves.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from worker.demo.models import SEED, atomic_file, cache_lock, default_cache_dir, ensure_demo_models

NAME = "tinylm"
# Bump when the recipe changes: the folder carries it in its name, so old caches rebuild.
RECIPE_VERSION = "1"
END = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)
_DISTRIBUTIONS = ("torch", "numpy", "transformers", "tokenizers", "scikit-learn")
_VOCAB = 1024
_HIDDEN = 64
_LAYERS = 2
_STEPS = 300
_BATCH = 16
_SEQ = 64
# 2 layers x 2 KV heads x 32 dims x K and V x 4 bytes
_KV_BYTES_PER_TOKEN = _LAYERS * 2 * (_HIDDEN // 2) * 2 * 4
_TRAIN_THREADS = 1  # on a busy 2-core machine one thread trained as fast, without stalls


def corpus() -> list[str]:
    """License texts of a few dependencies and of Python itself, each once, in path order."""
    paths = [Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"]
    for name in _DISTRIBUTIONS:
        dist = metadata.distribution(name)
        paths += [Path(str(dist.locate_file(f))) for f in dist.files or () if "licenses/" in str(f)]
    seen: set[str] = set()
    texts = []
    for path in sorted(p for p in paths if p.is_file()):
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest not in seen:
            seen.add(digest)
            texts.append(data.decode("utf-8", errors="replace"))
    return texts


def _tokenizer(texts: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB,
        special_tokens=[END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def _train(tokenizer: Any, texts: list[str]) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    end = tokenizer.token_to_id(END)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=_HIDDEN,
        intermediate_size=4 * _HIDDEN,
        num_hidden_layers=_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    data = torch.tensor([i for text in texts for i in (*tokenizer.encode(text).ids, end)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(SEED)
    for _ in range(_STEPS):
        starts = torch.randint(0, len(data) - _SEQ - 1, (_BATCH,), generator=generator)
        batch = torch.stack([data[s : s + _SEQ] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.generation_config.eos_token_id = end
    model.generation_config.pad_token_id = end
    return model


def write_generative_demo(folder: Path) -> None:
    """Train and save the model and its tokenizer into ``folder`` (a Hugging Face
    directory: safetensors, tokenizer.json with a chat template)."""
    from transformers import PreTrainedTokenizerFast

    threads = torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        torch.set_num_threads(_TRAIN_THREADS)
        try:
            texts = corpus()
            tokenizer = _tokenizer(texts)
            model = _train(tokenizer, texts)
        finally:
            torch.set_num_threads(threads)
    model.save_pretrained(folder)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=END, pad_token=END, bos_token=END
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)


def generative_entry(folder_name: str) -> str:
    """The registry entry of the demo model in ``folder_name`` (beside the registry)."""
    return f"""
[[models]]
name = "{NAME}"
version = "{RECIPE_VERSION}"
format = "hf"
path = {json.dumps(folder_name)}
[models.adapter]
kind = "generative"
max_new_tokens = 128
default_max_new_tokens = 48
kv_cache_bytes = 4194304  # 4 MiB: {4194304 // _KV_BYTES_PER_TOKEN} tokens of this model's KV
"""


def ensure_generative_demo(cache_dir: Path | None = None) -> Path:
    """Build what is missing into ``cache_dir``; return the path of a registry TOML
    holding the demo models and the generative one."""
    folder = cache_dir or default_cache_dir()
    demo = ensure_demo_models(folder)
    model_dir = folder / f"{NAME}-{RECIPE_VERSION}"
    registry = folder / "registry-generative.toml"
    text = demo.read_text() + generative_entry(model_dir.name)
    with cache_lock(folder):
        if not (model_dir / "model.safetensors").exists():
            building = folder / f".{model_dir.name}.{os.getpid()}.tmp"
            shutil.rmtree(building, ignore_errors=True)
            try:
                write_generative_demo(building)
                shutil.rmtree(model_dir, ignore_errors=True)
                building.rename(model_dir)
            finally:
                shutil.rmtree(building, ignore_errors=True)
        if not registry.exists() or registry.read_text() != text:
            with atomic_file(registry) as tmp:
                tmp.write_text(text)
    return registry
