"""Drift: windows per model version, references, flags, late labels, and their CLI.

Kept free of imports so that ``worker.settings`` and the registry specs can import
``worker.settings.drift_thresholds`` without pulling in the worker.
"""
