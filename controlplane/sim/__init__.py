"""The traffic simulator: plays routing services against a running API over HTTP."""
