"""Route accuracy, reviewer agreement and comparator calibration of a task (read)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/tasks", tags=["review"])
