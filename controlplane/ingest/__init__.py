"""Ingest: validating, scoring, masking and storing shadow-traffic results (docs/http-api.md)."""
