"""Benchmarks: scenarios measured side by side in one run, reported as ratios.

Run ``python -m bench --quick`` (under 3 minutes) or ``python -m bench`` (full).
Nothing in ``worker/``, ``consumers/`` or ``storage/`` imports this package.
"""
