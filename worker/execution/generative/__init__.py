"""Generative models: a causal LM on transformers' continuous batching, with lanes and
priority at every decoding step, preemption under a KV budget, seeded sampling that
resumes exactly, and text streamed as chunks (docs/GENERATIVE.md)."""
