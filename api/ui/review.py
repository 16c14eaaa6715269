"""Screen 2, branch review: the diff grouped by workspace and path, conflicts with a pick or an
edit each, and the merge."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/ui/r/{repo}")
