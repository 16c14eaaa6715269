"""Liveness."""

from __future__ import annotations

from fastapi import APIRouter

import kg
from api.guard import GuardedRoute
from kg.types import Health

router = APIRouter(route_class=GuardedRoute, tags=["health"])


@router.get("/health", response_model=Health)
@router.get("/api/health", response_model=Health)
def health() -> dict:
    """``{"status": "ok", "version": ...}``."""
    return {"status": "ok", "version": kg.__version__}
