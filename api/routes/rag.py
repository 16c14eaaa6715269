"""The RAG node endpoint, compatible with the workflow tool's RAG node."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from api.deps import BranchQ, CallerDep, ServicesDep
from api.guard import GuardedRoute
from api.models import Strict
from api.schemas import RagAnswer
from kg.ragnode.service import run_rag_node

router = APIRouter(route_class=GuardedRoute, prefix="/api", tags=["rag"])


class RagBody(Strict):
    config: dict[str, Any]
    input: Any = Field(description="The node's markdown input: query, then ### File name blocks.")


@router.post("/rag", response_model=RagAnswer, response_model_exclude_unset=True)
def rag(body: RagBody, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main") -> dict:
    """Ingest the input's file blocks into the collection, then answer with the context string."""
    return run_rag_node(services, caller, body.config, body.input, branch=branch)
