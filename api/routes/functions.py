"""Function invocation (API.md, "Functions")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from api.deps import ServicesDep
from api.models import Strict
from kg.errors import InvalidInput
from kg.rag.functions import invoke

router = APIRouter(prefix="/api/functions", tags=["functions"])


class InvokeBody(Strict):
    input: dict[str, Any]
    branch: str = Field(default="main", min_length=1, max_length=255)
    wait_for_completion: bool = True


@router.post("/{repo}/{name}/invoke")
def invoke_function(repo: str, name: str, body: InvokeBody, services: ServicesDep) -> dict:
    """Invoke ``search-documents`` or ``ask`` on a branch and wait for the output."""
    if not body.wait_for_completion:
        raise InvalidInput("asynchronous invocation (wait_for_completion: false) is not available yet")
    return invoke(services, repo, name, body.input, branch=body.branch)
