"""Operations: the worker's metrics, its HTTP surface (metrics, health, readiness, status
page), logs and GPU readings."""
