"""API keys, for administrators: create (the token is answered once), list, revoke."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter

from api.deps import CallerDep, ServicesDep
from api.guard import GuardedRoute
from kg.access import make_grant
from kg.context import run
from kg.ops import keys as key_ops
from kg.store.models import utcnow
from kg.types import ApiKeyCreated, ApiKeyInfo, ApiKeyList, KeyCreate

router = APIRouter(route_class=GuardedRoute, prefix="/api/keys", tags=["keys"])


@router.post("", status_code=201, response_model=ApiKeyCreated)
def create_key(body: KeyCreate, services: ServicesDep, caller: CallerDep) -> ApiKeyCreated:
    """Create a key; its token ``kg_<id>_<secret>`` is in this answer only."""
    grants = [make_grant(g.repo, g.branches, g.workspaces, g.actions) for g in body.grants]
    expires = utcnow() + timedelta(seconds=body.expires_in_s) if body.expires_in_s is not None else None
    return run(services, caller, key_ops.create_key, name=body.name, grants=grants, expires_at=expires,
               admin=body.admin)


@router.get("", response_model=ApiKeyList)
def list_keys(services: ServicesDep, caller: CallerDep) -> ApiKeyList:
    """Every key, without secrets."""
    return key_ops.list_keys(services, caller)


@router.delete("/{key_id}", response_model=ApiKeyInfo)
def revoke_key(key_id: str, services: ServicesDep, caller: CallerDep) -> ApiKeyInfo:
    """Revoke a key: refused from the next request on."""
    return run(services, caller, key_ops.revoke_key, key_id)
