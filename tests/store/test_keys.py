"""API keys in the store (kg/store/keys.py): the one query that authenticates a request, on
both databases."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import event

from kg.store import keys as key_store
from kg.store.models import utcnow

GRANTS = [{"repo": "acme", "branches": ["main"], "workspaces": ["*"], "actions": ["read"]},
          {"repo": "acme", "branches": ["agent/*"], "workspaces": ["kb", "notes"], "actions": ["read", "write"]}]


def _insert(db, key_id, name, grants, **extra):
    now = utcnow()
    with db.write() as s:
        key_store.insert_key(s, key_id=key_id, name=name, secret_hash="ab" * 32, created_by="test", created_at=now,
                             expires_at=extra.get("expires_at"), grants=grants)
    return now


def test_read_key_answers_the_row_and_its_grants_in_order_in_one_statement(services):
    db = services.db
    expires = utcnow() + timedelta(days=1)
    _insert(db, "0123456789abcdef", "agent", GRANTS, expires_at=expires)
    _insert(db, "fedcba9876543210", "bare", [])
    statements: list[str] = []
    listen = lambda conn, cursor, statement, *rest: statements.append(statement)  # noqa: E731
    event.listen(db.engine, "before_cursor_execute", listen)
    try:
        with db.read() as s:
            key = key_store.read_key(s, "0123456789abcdef")
    finally:
        event.remove(db.engine, "before_cursor_execute", listen)
    assert len([st for st in statements if "api_key" in st]) == 1  # the key and its grants together
    assert key is not None
    assert (key.id, key.name, key.secret_hash, key.revoked_at, key.last_used_at) == \
        ("0123456789abcdef", "agent", "ab" * 32, None, None)
    assert key.expires_at == expires
    assert list(key.grants) == GRANTS
    with db.read() as s:
        bare = key_store.read_key(s, "fedcba9876543210")
        assert bare is not None and bare.name == "bare" and bare.grants == ()
        assert key_store.read_key(s, "0000000000000000") is None
    with db.write() as s:
        key_store.revoke_key(s, "0123456789abcdef", at=utcnow())
    with db.read() as s:
        revoked = key_store.read_key(s, "0123456789abcdef")
    assert revoked is not None and revoked.revoked_at is not None and list(revoked.grants) == GRANTS
