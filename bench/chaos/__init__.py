"""The chaos harness: faults injected into a running ``inferlane run``, on the embedded
broker with PostgreSQL, and what they cost (lost, duplicated, recovery, memory).

``python -m bench.chaos --quick`` (a few minutes) or ``python -m bench.chaos`` (full);
loopback only, bounded in time and count.
"""
