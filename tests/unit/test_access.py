"""The policy (kg/access.py) on its own: grants, globs, visibility (404) versus refusal (403),
protected branches, who may name the actor, and the CLI's grant syntax. Pure: no database."""

from __future__ import annotations

import pytest

from kg.access import (
    ANONYMOUS,
    OPERATOR,
    SYSTEM,
    Actor,
    authorize,
    authorize_actor_name,
    authorize_new_repository,
    can_see,
    hash_secret,
    make_grant,
    new_token,
    parse_grant,
    warn_if_everywhere,
)
from kg.errors import Forbidden, InvalidInput, NotFound

AGENT = Actor("key", "agent-1", "0123456789abcdef", (
    make_grant("acme", ("main",), actions=("read",)),
    make_grant("acme", ("agent/*",), actions=("read", "write", "branch:create")),
))


@pytest.mark.parametrize("actor", [ANONYMOUS, OPERATOR, SYSTEM,
                                   Actor("key", "root", "x", (make_grant("*", actions=("admin",)),))])
def test_operator_system_anonymous_and_admin_keys_may_do_anything(actor):
    for action in ("read", "write", "merge", "branch:delete", "admin"):
        authorize(actor, action, "anything", "main", "ws")


def test_the_agent_key_of_the_issue():
    authorize(AGENT, "read", "acme", "main")
    authorize(AGENT, "branch:create", "acme", "agent/x")
    authorize(AGENT, "write", "acme", "agent/x", "knowledge")
    authorize(AGENT, "read", "acme", "agent/deep/er")       # '*' matches '/'
    with pytest.raises(Forbidden):
        authorize(AGENT, "write", "acme", "main")
    with pytest.raises(Forbidden):
        authorize(AGENT, "merge", "acme", "main")
    with pytest.raises(Forbidden):
        authorize(AGENT, "branch:create", "acme", "feature/x")  # never a 404: the branch is new
    with pytest.raises(Forbidden):
        authorize(AGENT, "admin", "acme")
    with pytest.raises(NotFound):
        authorize(AGENT, "read", "other")
    with pytest.raises(NotFound):
        authorize(AGENT, "read", "acme", "feature/y")
    assert can_see(AGENT, "acme") and not can_see(AGENT, "other") and not can_see(AGENT, "acme", "feature/y")


def test_protected_branches_need_a_literal_grant_for_write_merge_and_delete():
    star = Actor("key", "star", "s", (make_grant("acme", ("*",), actions=("read", "write", "merge", "branch:delete")),))
    for action in ("write", "merge", "branch:delete"):
        authorize(star, action, "acme", "feature")
        with pytest.raises(Forbidden, match="protected"):
            authorize(star, action, "acme", "main")
    authorize(star, "read", "acme", "main")
    named = Actor("key", "n", "n", (make_grant("acme", ("main",), actions=("write",)),))
    authorize(named, "write", "acme", "main")
    custom = Actor("key", "c", "c", star.grants, protected=("main", "release/*"))
    with pytest.raises(Forbidden):
        authorize(custom, "write", "acme", "release/1.0")


def test_workspace_globs():
    key = Actor("key", "k", "k", (make_grant("acme", workspaces=("kb-*",), actions=("read",)),))
    authorize(key, "read", "acme", "main", "kb-one")
    with pytest.raises(NotFound):
        authorize(key, "read", "acme", "main", "private")


def test_a_reserved_repository_is_reached_only_by_a_grant_naming_it_literally():
    wide = Actor("key", "wide", "w", (make_grant("*", actions=("read", "write", "merge")),
                                      make_grant("r*", actions=("read",))))
    assert can_see(wide, "acme") and not can_see(wide, "rag") and can_see(wide, "ragged")
    with pytest.raises(NotFound):
        authorize(wide, "read", "rag", "main")
    named = Actor("key", "named", "n", (make_grant("rag", workspaces=("Teama*",), actions=("read",)),))
    assert can_see(named, "rag", "main", "Teamadocs") and not can_see(named, "rag", "main", "Teambdocs")
    authorize(named, "read", "rag", "main", "Teamadocs")
    with pytest.raises(Forbidden):
        authorize(named, "write", "rag", "agent/x", "Teamadocs")
    # the reserved names come from the settings (KG_RAG_REPO); a renamed one frees "rag"
    moved = Actor("key", "wide", "w", wide.grants, reserved=("nodes",))
    assert can_see(moved, "rag") and not can_see(moved, "nodes")
    # an administrator key, the operator and kg's own work reach it
    for actor in (OPERATOR, SYSTEM, Actor("key", "root", "x", (make_grant("*", actions=("admin",)),))):
        assert can_see(actor, "rag")


@pytest.mark.parametrize("actor", [ANONYMOUS, OPERATOR,
                                   Actor("key", "root", "x", (make_grant("*", actions=("admin",)),))])
def test_nobody_creates_a_reserved_repository_through_the_repository_use_case(actor):
    with pytest.raises(InvalidInput, match="reserved"):
        authorize_new_repository(actor, "rag", ("rag",))
    authorize_new_repository(actor, "ragged", ("rag",))
    with pytest.raises(Forbidden):
        authorize_new_repository(AGENT, "new", ("rag",))


def test_only_admins_name_another_actor():
    assert authorize_actor_name(AGENT, "acme", None) == "agent-1"
    assert authorize_actor_name(AGENT, "acme", "agent-1") == "agent-1"
    with pytest.raises(Forbidden):
        authorize_actor_name(AGENT, "acme", "someone")
    repo_admin = Actor("key", "ra", "r", (make_grant("acme", actions=("admin",)),))
    assert authorize_actor_name(repo_admin, "acme", "someone") == "someone"
    assert authorize_actor_name(OPERATOR, "acme", "someone") == "someone"


def test_parse_grant_and_warnings():
    g = parse_grant("repo=*,branches=agent/*+main,actions=read+write")
    assert (g.repo, g.branches, g.workspaces, g.actions) == ("*", ("agent/*", "main"), ("*",),
                                                            frozenset({"read", "write"}))
    for bad in ("branches=*", "repo=a,actions=fly", "repo=a,colour=red", "repo=a+b", "repo="):
        with pytest.raises(InvalidInput):
            parse_grant(bad)
    assert len(warn_if_everywhere([parse_grant("repo=*"), parse_grant("repo=acme")], "k")) == 1


def test_tokens_and_hashes():
    key_id, secret, token = new_token()
    assert token == f"kg_{key_id}_{secret}" and len(key_id) == 16 and len(secret) >= 43
    assert hash_secret(b"p", key_id, secret) != hash_secret(b"q", key_id, secret)
    assert len(hash_secret(b"p", key_id, secret)) == 64 and secret not in hash_secret(b"p", key_id, secret)
    assert new_token()[2] != token


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_key_cache_trusts_a_key_for_its_ttl_a_matching_secret_only_and_forgets_on_revocation():
    from datetime import timedelta

    from kg.access import KeyCache
    from kg.store.models import utcnow

    clock, now = FakeClock(), utcnow()
    cache = KeyCache(2.0, clock=clock)
    agent = Actor("key", "agent", "a" * 16, (make_grant("r"),))
    cache.put("a" * 16, "h1", agent, None, now)
    assert cache.get("a" * 16, "h1") is agent
    assert cache.get("a" * 16, "h2") is None            # another secret for the same id: read the key
    assert cache.get("b" * 16, "h1") is None
    clock.now += 1.999
    assert cache.get("a" * 16, "h1") is agent
    clock.now += 0.001                                  # exactly the ttl: no longer trusted
    assert cache.get("a" * 16, "h1") is None
    cache.put("a" * 16, "h1", agent, None, now)
    cache.forget("a" * 16)                              # revoked in this process
    assert cache.get("a" * 16, "h1") is None
    # a key that expires in 0.5 s is trusted 0.5 s, not the ttl; an expired one not at all
    cache.put("a" * 16, "h1", agent, now + timedelta(seconds=0.5), now)
    clock.now += 0.499
    assert cache.get("a" * 16, "h1") is agent
    clock.now += 0.001
    assert cache.get("a" * 16, "h1") is None
    cache.put("a" * 16, "h1", agent, now - timedelta(seconds=1), now)
    assert cache.get("a" * 16, "h1") is None
    off = KeyCache(0.0, clock=clock)
    off.put("a" * 16, "h1", agent, None, now)
    assert off.get("a" * 16, "h1") is None
    small = KeyCache(2.0, max_keys=2, clock=clock)
    for key_id in ("1" * 16, "2" * 16, "3" * 16):
        small.put(key_id, "h", agent, None, now)
    assert [small.get(k, "h") is agent for k in ("1" * 16, "2" * 16, "3" * 16)] == [False, True, True]
