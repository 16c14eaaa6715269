"""Relations: RELATE, UNRELATE, NEIGHBORS and traverse."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from api.deps import (
    ActorQ,
    AddressQ,
    AsOfQ,
    BranchQ,
    CallerDep,
    IncludeInvalidQ,
    MessageQ,
    RelationTypeQ,
    RepoP,
    RevisionQ,
    ServicesDep,
    WorkspaceP,
)
from api.errors import refusal
from api.guard import GuardedRoute
from kg.context import run
from kg.errors import InvalidInput
from kg.graph.neighbors import DEFAULT_LIMIT, DIRECTIONS, MAX_LIMIT
from kg.ops import relations as relation_ops
from kg.rag.graph import neighbors as graph_neighbors
from kg.rag.graph import walk
from kg.store.paths import ADDRESS_PATTERN
from kg.types import (
    NeighborList,
    Relation,
    RelationCreate,
    RelationInvalidate,
    RelationsDeleted,
    RelationTypes,
    RelationTypesPut,
    Traversal,
    TraverseBody,
)

router = APIRouter(route_class=GuardedRoute, prefix="/api/repos/{repo}", tags=["relations"])



@router.post("/relations", response_model=Relation,
             responses={200: {"description": "Re-asserted: weight and properties replaced"},
                        201: {"description": "Created: a new edge", "model": Relation},
                        422: refusal("`invalid_input`: `valid_to` earlier than `valid_from` (`details.field`: "
                                     "`valid_to`), or another rule of kg's")})
def relate(repo: RepoP, body: RelationCreate, services: ServicesDep, caller: CallerDep, response: Response,
           branch: BranchQ = "main") -> Relation:
    """Assert a typed, weighted edge: 201 new, 200 re-asserted (weight and properties replaced).

    ``valid_to``, when given with ``valid_from``, is not earlier than it (a rule across two fields:
    422 ``invalid_input``, ``details.field`` ``valid_to``)."""
    relation, created = run(services, caller, relation_ops.relate, repo, branch, body.from_, body.to,
                            body.type, weight=body.weight, properties=body.properties,
                            valid_from=body.valid_from, valid_to=body.valid_to,
                            message=body.message, actor=body.actor)
    response.status_code = 201 if created else 200
    return relation


@router.delete("/relations", response_model=RelationsDeleted)
def unrelate(repo: RepoP, services: ServicesDep, caller: CallerDep,
             from_: Annotated[str, Query(alias="from", json_schema_extra={"pattern": ADDRESS_PATTERN,
                                                                          "maxLength": 1300})],
             to: AddressQ, branch: BranchQ = "main", type: RelationTypeQ = None, message: MessageQ = None,
             actor: ActorQ = None) -> RelationsDeleted:
    """Remove the edges from ``from`` to ``to`` (of ``type``, or all types); when there was
    none, no revision is made (``revision`` is null)."""
    return run(services, caller, relation_ops.unrelate, repo, branch, from_, to, type, message=message,
               actor=actor)


@router.get("/neighbors", response_model=NeighborList)
def neighbors(repo: RepoP, node: AddressQ, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
              at_revision: RevisionQ = None,
              direction: Annotated[str, Query(json_schema_extra={"enum": list(DIRECTIONS)})] = "BOTH",
              type: Annotated[str | None, Query(description="Relation types, comma-separated.")] = None,
              limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Most rows returned.")] = DEFAULT_LIMIT,
              as_of: AsOfQ = None, include_invalid: IncludeInvalidQ = False) -> dict:
    """The edges around a node in a stable order (weight desc with null last, the other node's
    ``workspace:path``, type, direction), at most ``limit``; ``truncated`` when more exist.
    Only relations current now (or valid at ``as_of``) unless ``include_invalid``."""
    types = [t for t in type.split(",") if t] if type else None
    answer = graph_neighbors(services, caller, repo, branch, node, direction=direction,
                             types=types or None, limit=limit, at_revision=at_revision, as_of=as_of,
                             include_invalid=include_invalid)
    return {"neighbors": list(answer["neighbors"]), "truncated": answer["truncated"]}  # rows made here, once


@router.post("/traverse", response_model=Traversal)
def traverse(repo: RepoP, body: TraverseBody, services: ServicesDep, caller: CallerDep, branch: BranchQ = "main",
             at_revision: RevisionQ = None) -> dict:
    """Breadth-first walk from the seeds, bounded by ``hops``, ``max_nodes`` (seeds count) and
    ``fan_out`` per node; each node once at its shortest hop; ``truncated`` exactly when a budget
    left nodes unvisited."""
    return walk(services, caller, repo, branch, body.seeds, hops=body.hops,
                direction=body.direction,
                types=body.types, max_nodes=body.max_nodes, fan_out=body.fan_out, at_revision=at_revision,
                as_of=body.as_of, include_invalid=body.include_invalid)


@router.post("/workspaces/{ws}/relations/invalidate", response_model=Relation,
             responses={422: refusal("`invalid_input`: `from` is not a node of `{ws}` (`details.field`: `from`), "
                                     "or `valid_to` is earlier than the relation's `valid_from` "
                                     "(`details.field`: `valid_to`), or another rule of kg's")})
def invalidate(repo: RepoP, ws: WorkspaceP, body: RelationInvalidate, services: ServicesDep, caller: CallerDep,
               branch: BranchQ = "main") -> Relation:
    """Close a relation's validity at ``valid_to`` (default now), naming what superseded it
    (``invalidated_by``). The relation stays readable with ``include_invalid`` or an ``as_of``
    before ``valid_to``.

    Rules across the path, the body and the stored relation: ``from`` is a node of ``{ws}``
    (``ws:/path``), and ``valid_to`` is not earlier than the relation's ``valid_from``; either
    broken is a 422 ``invalid_input`` whose ``details.field`` names the field."""
    if body.from_.partition(":")[0] != ws:
        raise InvalidInput(f"'from' must be a node of workspace {ws!r}", details={"field": "from", "from": body.from_,
                                                                                 "workspace": ws})
    return run(services, caller, relation_ops.invalidate, repo, branch, body.from_, body.to, body.type,
               valid_to=body.valid_to, invalidated_by=body.invalidated_by, message=body.message,
               actor=body.actor)


@router.get("/workspaces/{ws}/relation-types", response_model=RelationTypes)
def get_relation_types(repo: RepoP, ws: WorkspaceP, services: ServicesDep, caller: CallerDep) -> RelationTypes:
    """The relation types declared single-valued per source in the workspace."""
    return relation_ops.get_relation_types(services, caller, repo, ws)


@router.put("/workspaces/{ws}/relation-types", response_model=RelationTypes)
def put_relation_types(repo: RepoP, ws: WorkspaceP, body: RelationTypesPut, services: ServicesDep,
                       caller: CallerDep) -> RelationTypes:
    """Declare the workspace's single-valued relation types (replaced whole; admin): asserting
    one from a source with a current one to another target invalidates the old one."""
    return run(services, caller, relation_ops.set_relation_types, repo, ws, body.single_valued)
