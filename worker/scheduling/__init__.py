"""The scheduler: batch controller, utilization probes, lane shares, deadlines, slices.

Deciders here are pure (measurements and a clock reading in, decisions out); the
``Scheduler`` object wires them to the worker. Kept import-free so that the model
registry's spec can use ``ControllerParams`` without a cycle.
"""
