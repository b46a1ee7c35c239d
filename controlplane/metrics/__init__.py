"""Windowed metrics per task × window × length bucket (DESIGN §2–§3), and their alerts."""
