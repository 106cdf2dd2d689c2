"""Drift: windows per model version, references, flags, late labels, and their CLI.

Kept free of imports so that ``worker.config`` and the registry specs can import
``worker.drift.thresholds`` without pulling in the worker.
"""
