"""The audit log: who changed what, and when."""
