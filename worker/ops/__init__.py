"""Operations: the worker's HTTP surface (metrics, health, readiness, status page) and logs."""
