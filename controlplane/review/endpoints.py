"""Review endpoints (thin): the blind queue, labels, skips and releases."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/review", tags=["review"])
