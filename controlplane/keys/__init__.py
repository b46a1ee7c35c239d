"""API keys as people manage them: create, list, revoke; each change audited and announced."""
