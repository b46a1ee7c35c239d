"""Windowed metrics per task × window × length bucket (docs/evidence.md), and their alerts."""
