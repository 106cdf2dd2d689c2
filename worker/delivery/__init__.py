"""Delivery: outcomes of finished batches to Kafka and SQL, then their offsets
committed (outcomes, completion queue, sink, refusals, commits)."""
