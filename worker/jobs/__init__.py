"""Offline scoring jobs: files scored locally or through the workers, exactly once."""
