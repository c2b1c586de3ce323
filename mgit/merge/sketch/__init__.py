"""Sketches: compact, labelled approximations of an expert's delta to its parent, stored beside
the commit (never in its model), which a budgeted merge may read instead of exact chunks."""
