"""Celery app, beat schedule and thin jobs (DESIGN §1, §8): they arrive with the windowed-metrics step."""
