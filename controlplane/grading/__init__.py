"""Grading a task from its own traffic (docs/grading.md): which tasks may leave the cloud.

`grade` (pure) turns window aggregates over a span into four dimensions, a veto, a score
and a tier; the service reads those aggregates, keeps one grade per task and day, and
answers the API, the CLI, the dashboard and the promotion gate.
"""
