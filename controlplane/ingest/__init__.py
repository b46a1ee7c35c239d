"""Ingest: validating, scoring, masking and storing shadow-traffic results (DESIGN §1–§2)."""
