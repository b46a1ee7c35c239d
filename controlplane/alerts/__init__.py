"""Alerts on closed windows (docs/evidence.md): distribution shift, edge-share jump, input
drift, silence, and routers that do not follow their flag (sample-ratio mismatch)."""
