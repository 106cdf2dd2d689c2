"""Execution: the executor contract and its back-ends (CPU compute threads, CUDA lane
streams), host buffers, and the garbage collector's schedule around compute."""
