"""Alerts on closed windows (DESIGN §3): distribution shift, edge-share jump, input drift, silence."""
