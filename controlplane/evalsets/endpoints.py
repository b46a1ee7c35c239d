"""Eval set endpoints (thin): backfill, list, items and export, runs."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/evalsets", tags=["evalsets"])
