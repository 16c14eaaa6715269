"""Relations: RELATE, UNRELATE, NEIGHBORS and traverse."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import Field

from api.deps import ActorQ, BranchQ, CallerDep, MessageQ, RevisionQ, ServicesDep
from api.guard import GuardedRoute
from api.models import RelationCreate, Strict
from api.schemas import NeighborList, Relation, RelationsDeleted, Traversal
from kg.context import run
from kg.graph.neighbors import DEFAULT_LIMIT, MAX_LIMIT
from kg.graph.traverse import MAX_FAN_OUT, MAX_HOPS, MAX_NODES
from kg.ops import relations as relation_ops
from kg.rag.graph import neighbors as graph_neighbors
from kg.rag.graph import walk

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["relations"])


class TraverseBody(Strict):
    """``POST /traverse``: seeds, hop bound, direction, relation types and the two budgets."""

    seeds: list[str] = Field(min_length=1, max_length=MAX_NODES)
    hops: int = Field(default=2, ge=0, le=MAX_HOPS)
    direction: str = "BOTH"
    types: list[str] | None = None
    max_nodes: int = Field(default=200, ge=1, le=MAX_NODES)
    fan_out: int = Field(default=50, ge=1, le=MAX_FAN_OUT)


@router.post("/relations", response_model=Relation,
             responses={200: {"description": "Re-asserted: weight and properties replaced"},
                        201: {"description": "Created: a new edge", "model": Relation}})
def relate(repo: str, body: RelationCreate, services: ServicesDep, caller: CallerDep, response: Response,
           branch: BranchQ = "main") -> dict:
    """Assert a typed, weighted edge: 201 new, 200 re-asserted (weight and properties replaced)."""
    relation, created = run(services, caller, relation_ops.relate, repo, branch, body.from_, body.to,
                            body.type, weight=body.weight, properties=body.properties,
                            message=body.message, actor=body.actor)
    response.status_code = 201 if created else 200
    return relation


@router.delete("/relations", response_model=RelationsDeleted)
def unrelate(repo: str, services: ServicesDep, caller: CallerDep, from_: Annotated[str, Query(alias="from")],
             to: str, branch: BranchQ = "main", type: str | None = None, message: MessageQ = None,
             actor: ActorQ = None) -> dict:
    """Remove the edges from ``from`` to ``to`` (of ``type``, or all types); when there was
    none, no revision is made (``revision`` is null)."""
    return run(services, caller, relation_ops.unrelate, repo, branch, from_, to, type, message=message,
               actor=actor)


@router.get("/neighbors", response_model=NeighborList)
def neighbors(repo: str, node: str, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
              at_revision: RevisionQ = None, direction: str = "BOTH",
              type: Annotated[str | None, Query(description="Relation types, comma-separated.")] = None,
              limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Most rows returned.")] = DEFAULT_LIMIT,
              ) -> dict:
    """The edges around a node in a stable order (weight desc with null last, the other node's
    ``workspace:path``, type, direction), at most ``limit``; ``truncated`` when more exist."""
    types = [t for t in type.split(",") if t] if type else None
    return graph_neighbors(services, caller, repo, branch, node, direction=direction,
                           types=types or None, limit=limit, at_revision=at_revision)


@router.post("/traverse", response_model=Traversal)
def traverse(repo: str, body: TraverseBody, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
             at_revision: RevisionQ = None) -> dict:
    """Breadth-first walk from the seeds, bounded by ``hops``, ``max_nodes`` (seeds count) and
    ``fan_out`` per node; each node once at its shortest hop; ``truncated`` exactly when a budget
    left nodes unvisited."""
    return walk(services, caller, repo, branch, body.seeds, hops=body.hops,
                direction=body.direction,
                types=body.types, max_nodes=body.max_nodes, fan_out=body.fan_out, at_revision=at_revision)
