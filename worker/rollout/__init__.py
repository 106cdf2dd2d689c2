"""Rollouts: a candidate version in shadow or canary mode, gated, promoted or rolled back.

Kept free of imports so that the registry specs can import ``worker.settings.rollout_plan``.
"""
