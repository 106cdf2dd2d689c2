"""Registry texts for the parsing and CLI tests (their model files need not exist)."""

from __future__ import annotations


def with_candidates(digits_rollout: str) -> str:
    """digits and diabetes at version 1, each with a candidate version 2;
    ``digits_rollout`` is the body of digits 2's ``[candidates.rollout]`` table."""
    return f"""
[[models]]
name = "digits"
version = "1"
format = "export"
path = "digits.pt2"
adapter = {{ kind = "classifier", features = 64, num_classes = 10 }}

[[models]]
name = "diabetes"
version = "1"
format = "export"
path = "diabetes.pt2"
adapter = {{ kind = "regressor", features = 10 }}

[[candidates]]
name = "digits"
version = "2"
format = "export"
path = "digits-2.pt2"
adapter = {{ kind = "classifier", features = 64, num_classes = 10 }}

[candidates.rollout]
{digits_rollout}

[[candidates]]
name = "diabetes"
version = "2"
format = "export"
path = "diabetes-2.pt2"
adapter = {{ kind = "regressor", features = 10 }}
"""
