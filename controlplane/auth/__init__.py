"""API keys, scopes and the per-process key cache."""
