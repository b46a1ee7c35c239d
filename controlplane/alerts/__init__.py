"""Alerts on closed windows (docs/evidence.md): distribution shift, edge-share jump, input
drift, silence."""
