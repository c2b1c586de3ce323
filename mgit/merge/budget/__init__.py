"""Budgeted merges: which expert chunks are worth reading, decided without reading tensors.

``analyze`` finds each candidate chunk's ‖Δ‖ (recorded statistics, a pair cache, reads within a
cap, estimates), ``importance`` values and chooses candidates (with ``knapsack``), ``restrict``
returns the plan restricted to the choice (a new plan) and its ``report``. This package's
``__init__`` imports nothing: the plan imports the report type from below it.
"""
