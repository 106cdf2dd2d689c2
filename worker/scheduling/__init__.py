"""Scheduling: the lanes, the batcher, the batch controller and its probes, the lane
shares, deadlines, slices and the yield to high requests.

Deciders here are pure (measurements and a clock reading in, decisions out); the
``Scheduler`` object wires them to the worker.
"""
