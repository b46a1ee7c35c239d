"""Eval sets: labelled review items backfilled into self-contained eval items, their
deterministic export, stored runs of edge models and the regression gate (docs/evalsets.md)."""
