"""Celery on Redis (DESIGN §1, §8): the app, one beat schedule, thin jobs calling controlplane."""
