"""API keys and their grants in SQL (:class:`kg.store.models.ApiKey`, ``ApiKeyGrant``).

The store keeps rows; hashing, parsing and deciding are :mod:`kg.access`'s. A grant is a
dict ``{"repo", "branches", "workspaces", "actions"}`` here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kg.errors import Conflict, NotFound
from kg.store.models import ApiKey, ApiKeyGrant, ConsoleSession


def insert_key(session: Session, *, key_id: str, name: str, secret_hash: str, created_by: str | None,
               created_at: datetime, expires_at: datetime | None, grants: list[dict[str, Any]]) -> ApiKey:
    """Store a new key and its grants: ``secret_hash`` is the secret's HMAC-SHA256 (hex), ``name``
    the ``actor`` of its revisions.

    Raises
    ------
    kg.errors.Conflict
        A key of that name exists.
    """
    if session.execute(select(ApiKey.id).where(ApiKey.name == name)).first() is not None:
        raise Conflict(f"a key named {name!r} exists already", details={"name": name})
    key = ApiKey(id=key_id, name=name, secret_hash=secret_hash, created_by=created_by, created_at=created_at,
                 expires_at=expires_at)
    session.add(key)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"a key named {name!r} exists already", details={"name": name}) from exc
    for g in grants:
        session.add(ApiKeyGrant(key_id=key_id, repo=g["repo"], branches=list(g["branches"]),
                                workspaces=list(g["workspaces"]), actions=list(g["actions"])))
    session.flush()
    return key


def get_key(session: Session, key_id: str) -> ApiKey | None:
    """The key with id ``key_id``, or None."""
    return session.get(ApiKey, key_id)


@dataclass(frozen=True)
class KeyRecord:
    """What authenticating a request needs of a key: its row's fields (UTC times) and its grants, in
    the order given.
    """

    id: str
    name: str
    secret_hash: str
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    grants: tuple[dict[str, Any], ...]


# Built once (it runs on every authenticated request): the key, left-joined to its grants.
_READ_KEY = (select(ApiKey.id, ApiKey.name, ApiKey.secret_hash, ApiKey.expires_at, ApiKey.revoked_at,
                    ApiKey.last_used_at, ApiKeyGrant.id, ApiKeyGrant.repo, ApiKeyGrant.branches,
                    ApiKeyGrant.workspaces, ApiKeyGrant.actions)
             .outerjoin(ApiKeyGrant, ApiKeyGrant.key_id == ApiKey.id)
             .where(ApiKey.id == bindparam("key_id")).order_by(ApiKeyGrant.id))


def read_key(session: Session | Connection, key_id: str) -> KeyRecord | None:
    """A key with its grants, or None: one indexed statement of column values, built once, no ORM
    objects (it runs on every authenticated request).
    """
    rows = session.execute(_READ_KEY, {"key_id": key_id}).all()
    if not rows:
        return None
    first = rows[0]
    grants = tuple({"repo": r[7], "branches": list(r[8]), "workspaces": list(r[9]), "actions": list(r[10])}
                   for r in rows if r[6] is not None)
    return KeyRecord(first[0], first[1], first[2], first[3], first[4], first[5], grants)


def key_grants(session: Session, key_id: str) -> list[dict[str, Any]]:
    """The grants of a key, in the order they were given."""
    rows = session.execute(select(ApiKeyGrant).where(ApiKeyGrant.key_id == key_id)
                           .order_by(ApiKeyGrant.id)).scalars()
    return [{"repo": g.repo, "branches": list(g.branches), "workspaces": list(g.workspaces),
             "actions": list(g.actions)} for g in rows]


def list_keys(session: Session) -> list[ApiKey]:
    """Every key, revoked and expired ones included, oldest first."""
    return list(session.execute(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)).scalars())


def revoke_key(session: Session, key_id: str, *, at: datetime) -> ApiKey:
    """Mark a key revoked (a key revoked already keeps its first time).

    Raises
    ------
    kg.errors.NotFound
        No key has that id.
    """
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound(f"key {key_id!r} not found", details={"key": key_id})
    if key.revoked_at is None:
        key.revoked_at = at
        session.flush()
    return key


def touch_key(session: Session, key_id: str, *, at: datetime, before: datetime) -> bool:
    """Record that a key was used ``at`` unless its ``last_used_at`` is ``before`` or later; whether
    written.
    """
    result = session.execute(update(ApiKey).where(ApiKey.id == key_id)
                             .where((ApiKey.last_used_at.is_(None)) | (ApiKey.last_used_at < before))
                             .values(last_used_at=at))
    return bool(getattr(result, "rowcount", 0))


def add_console_session(session: Session, id_hash: str, key_id: str, *, at: datetime, expires_at: datetime) -> None:
    """Record a sign-in to the console (``id_hash``: SHA-256 of the cookie's session id)."""
    session.add(ConsoleSession(id_hash=id_hash, key_id=key_id, created_at=at, expires_at=expires_at))
    session.flush()


def console_session_key(session: Session | Connection, id_hash: str, now: datetime) -> str | None:
    """The key id of a console session still open at ``now``; None for an unknown, expired or ended one."""
    row = session.execute(select(ConsoleSession.key_id).where(
        ConsoleSession.id_hash == id_hash, ConsoleSession.ended_at.is_(None),
        ConsoleSession.expires_at > now)).first()
    return None if row is None else str(row[0])


def end_console_session(session: Session, id_hash: str, *, at: datetime) -> bool:
    """End a console session (signing out): every copy of its cookie is refused from now on."""
    result = session.execute(update(ConsoleSession).where(ConsoleSession.id_hash == id_hash,
                                                          ConsoleSession.ended_at.is_(None)).values(ended_at=at))
    return bool(getattr(result, "rowcount", 0))
