"""Celery on Redis (docs/architecture.md): the app, one beat schedule, thin jobs calling
controlplane."""
