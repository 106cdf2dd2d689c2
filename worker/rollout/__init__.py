"""Rollouts: a candidate version in shadow or canary mode, gated, promoted or rolled back."""
