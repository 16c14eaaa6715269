"""The RAG node endpoint, compatible with the RAG node contract of workflow engines."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import BranchQ, CallerDep, ServicesDep
from api.guard import GuardedRoute
from kg.ragnode.service import run_rag_node
from kg.types import RagAnswer, RagBody

router = APIRouter(route_class=GuardedRoute, prefix="/api", tags=["rag"])



@router.post("/rag", response_model=RagAnswer, response_model_exclude_unset=True)
def rag(body: RagBody, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main") -> dict:
    """Ingest the input's file blocks into the collection, then answer with the context string."""
    return run_rag_node(services, caller, body.config, body.input, branch=branch)
