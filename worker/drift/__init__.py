"""Drift: windows per model version, references, flags, late labels, and the views the
``inferlane drift`` commands print."""
