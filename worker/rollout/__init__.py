"""Model rollouts: a candidate version in shadow or canary mode, gated, and its CLI.

Kept free of imports so that the registry specs can import ``worker.rollout.plan``
without pulling in the worker.
"""
