"""API keys: create (the token is answered once), list (never a secret), revoke. Only an
administrator may (the operator, or a key with ``admin`` on repository ``*``); identity and
decisions are :mod:`kg.access`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kg.access import (
    ACTIONS,
    Actor,
    Grant,
    grants_of,
    hash_secret,
    key_state,
    make_grant,
    new_token,
    pepper_of,
    warn_if_everywhere,
)
from kg.context import Resources, UnitOfWork, admit
from kg.errors import Forbidden, InvalidInput
from kg.store import keys as key_store
from kg.store.models import ApiKey, utcnow
from kg.types.keys import ApiKeyCreated, ApiKeyInfo, ApiKeyList, KeyGrant

__all__ = ["ADMIN_GRANT", "create_key", "key_info", "list_keys", "revoke_key"]

#: The grant of ``kg keys create --admin``: everything, everywhere.
ADMIN_GRANT = make_grant("*", ("*",), ("*",), ACTIONS)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _fields(key: ApiKey, grants: Sequence[Grant], now: datetime | None) -> dict[str, Any]:
    """The fields of :class:`kg.types.keys.ApiKeyInfo` of a key, never its secret nor hash,
    ``state`` judged at ``now``."""
    return {"id": key.id, "name": key.name, "state": key_state(key, now or utcnow()),
            "created_by": key.created_by, "created_at": key.created_at.isoformat(),
            "expires_at": _iso(key.expires_at), "revoked_at": _iso(key.revoked_at),
            "last_used_at": _iso(key.last_used_at), "grants": [KeyGrant.model_validate(g.as_dict()) for g in grants]}


def key_info(key: ApiKey, grants: Sequence[Grant], now: datetime | None = None) -> ApiKeyInfo:
    """A key as every surface lists it, never its secret nor hash; ``state`` judged at ``now``."""
    return ApiKeyInfo(**_fields(key, grants, now))


def _require_admin(actor: Actor) -> None:
    """Refuse a caller that is not an administrator."""
    if not actor.is_admin:
        raise Forbidden("only an admin key (admin on repo=*) may manage keys", details={"action": "admin"})


def create_key(uow: UnitOfWork, *, name: str, grants: Sequence[Grant], expires_at: datetime | None = None,
               admin: bool = False) -> ApiKeyCreated:
    """Create a key: the token ``kg_<id>_<secret>`` is in the answer and nowhere else, ever, with
    ``warnings`` for grants ``*`` everywhere. ``name`` (unique, 1 to 255 characters) is the
    ``actor`` of its revisions; ``expires_at`` timezone-aware; ``admin`` adds :data:`ADMIN_GRANT`.

    Raises
    ------
    kg.errors.Forbidden
        The caller is not an administrator.
    kg.errors.InvalidInput
        No pepper configured, a bad name, no grant, an ``expires_at`` without a zone or past.
    kg.errors.Conflict
        A key of that name exists.
    """
    admit(uow.services, uow.actor)
    _require_admin(uow.actor)
    pepper = pepper_of(uow.services.settings)
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise InvalidInput("a key needs a name of 1 to 255 characters", details={"field": "name"})
    all_grants = tuple(grants) + ((ADMIN_GRANT,) if admin else ())
    if not all_grants:
        raise InvalidInput("a key needs at least one grant (or --admin)", details={"field": "grants"})
    now = utcnow()
    if expires_at is not None and (expires_at.tzinfo is None or expires_at <= now):
        raise InvalidInput("expires_at must be a time in the future, with its zone", details={"field": "expires_at"})
    key_id, secret, token = new_token()
    key = key_store.insert_key(uow.session, key_id=key_id, name=name, secret_hash=hash_secret(pepper, key_id, secret),
                               created_by=uow.actor.name or uow.actor.kind, created_at=now, expires_at=expires_at,
                               grants=[g.as_dict() for g in all_grants])
    warnings = warn_if_everywhere(tuple(grants), name)  # the admin grant is everywhere by design
    return ApiKeyCreated(**_fields(key, all_grants, now), key=token, warnings=warnings)


def list_keys(services: Resources, caller: Actor) -> ApiKeyList:
    """Every key (revoked and expired included), by creation.

    Raises
    ------
    kg.errors.Forbidden
        The caller is not an administrator.
    """
    admit(services, caller)
    _require_admin(caller)
    now = utcnow()
    with services.db.read() as session:
        return ApiKeyList(keys=[key_info(k, grants_of(key_store.key_grants(session, k.id)), now)
                                for k in key_store.list_keys(session)])


def revoke_key(uow: UnitOfWork, key_id: str) -> ApiKeyInfo:
    """Revoke a key: refused from the next request on, in every process.

    Raises
    ------
    kg.errors.Forbidden
        The caller is not an administrator.
    kg.errors.NotFound
        No key has that id.
    """
    admit(uow.services, uow.actor)
    _require_admin(uow.actor)
    key = key_store.revoke_key(uow.session, key_id, at=utcnow())
    uow.after_commit(lambda: uow.services.key_cache.forget(key_id))  # this process: the next request
    return key_info(key, grants_of(key_store.key_grants(uow.session, key_id)))
