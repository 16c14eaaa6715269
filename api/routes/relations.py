"""Relations: RELATE, UNRELATE and NEIGHBORS."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.deps import BranchQ, RevisionQ, ServicesDep
from api.models import RelationCreate
from kg.graph.neighbors import check_direction
from kg.rag.graph import neighbors_of
from kg.store import relations as store
from kg.store.repos import begin_write, branch_view

router = APIRouter(prefix="/api/repos/{repo}", tags=["relations"])


@router.post("/relations")
def relate(repo: str, body: RelationCreate, services: ServicesDep, response: Response,
           branch: BranchQ = "main") -> dict:
    """Assert a typed, weighted edge: 201 new, 200 re-asserted (weight and properties replaced)."""
    with services.db.write() as session:
        ctx = begin_write(session, repo, branch, message=body.message, actor=body.actor)
        version, created = store.relate(session, ctx, body.from_, body.to, body.type,
                                        weight=body.weight, properties=body.properties)
        response.status_code = 201 if created else 200
        return {"from": body.from_, "to": body.to, "type": version.rel_type, "weight": version.weight,
                "properties": version.properties, "revision": ctx.revision}


@router.delete("/relations")
def unrelate(repo: str, services: ServicesDep, from_: Annotated[str, Query(alias="from")],
             to: str, branch: BranchQ = "main", type: str | None = None, message: str | None = None,
             actor: str | None = None) -> dict:
    """Remove the edges from ``from`` to ``to`` (of ``type``, or all types)."""
    with services.db.write() as session:
        ctx = begin_write(session, repo, branch, message=message, actor=actor)
        deleted = store.unrelate(session, ctx, from_, to, type)
        return {"revision": ctx.revision, "deleted": deleted}


@router.get("/neighbors")
def neighbors(repo: str, node: str, services: ServicesDep, branch: BranchQ = "main",
              at_revision: RevisionQ = None, direction: str = "BOTH",
              type: Annotated[str | None, Query(description="Relation types, comma-separated.")] = None) -> dict:
    """The nodes one edge away, heaviest edge first."""
    d = check_direction(direction)
    types = [t for t in type.split(",") if t] if type else None
    with services.db.read() as session:
        view = branch_view(session, repo, branch, at_revision=at_revision)
        return {"neighbors": neighbors_of(session, services, view, node, direction=d, types=types)}
