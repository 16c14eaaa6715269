"""Liveness."""

from __future__ import annotations

from fastapi import APIRouter

import kg

router = APIRouter(tags=["health"])


@router.get("/health")
@router.get("/api/health")
def health() -> dict:
    """``{"status": "ok", "version": ...}``."""
    return {"status": "ok", "version": kg.__version__}
