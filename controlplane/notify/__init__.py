"""Webhooks through an outbox (docs/http-api.md, "Webhooks"): events written in the
transaction that made them, delivered at least once, signed, by a Celery job or (embedded
mode) a thread.

Nothing here imports `shadowplane_workers`: the Celery hand-off is a kicker the runner registers."""
