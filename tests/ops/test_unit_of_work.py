"""The unit of work (kg.context): one transaction per write use case, revisions allocated by
the first write, hooks after the commit only, the caller on every call; on both databases."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import func, select

from kg.context import ANONYMOUS, OPERATOR, Actor, UnitOfWork, reading, run, unit_of_work
from kg.errors import InvalidInput, NotFound
from kg.ops import branches, merge, nodes, relations, repos
from kg.store.models import Revision
from kg.store.repos import get_repository

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def acme(services) -> str:
    run(services, OPERATOR, repos.create_repository, "acme")
    run(services, OPERATOR, repos.create_workspace, "acme", "w")
    run(services, OPERATOR, nodes.put_node, "acme", "main", "w", "/a", node_type="t", properties={"content": "alpha"})
    run(services, OPERATOR, nodes.put_node, "acme", "main", "w", "/b", node_type="t", properties={"content": "beta"})
    return "acme"


def head(services, repo: str = "acme") -> tuple[int, int]:
    """(the repository's revision counter, how many revisions its log holds)."""
    with services.db.read() as s:
        r = get_repository(s, repo)
        return r.head_revision, s.scalar(select(func.count()).select_from(Revision).where(Revision.repo_id == r.id))


def test_a_write_that_writes_nothing_allocates_no_revision(services, acme):
    before = head(services)
    out = run(services, OPERATOR, relations.unrelate, "acme", "main", "w:/a", "w:/b", "cites")
    assert out.as_json() == {"revision": None, "deleted": 0}
    assert head(services) == before
    # the next write takes the very next number: nothing was allocated and rolled back
    edge, created = run(services, OPERATOR, relations.relate, "acme", "main", "w:/a", "w:/b", "cites")
    assert created and edge.revision == before[0] + 1
    assert head(services) == (before[0] + 1, before[1] + 1)


def test_an_empty_merge_records_its_point_without_a_revision(services, acme):
    run(services, OPERATOR, branches.create_branch, "acme", name="agent/x")
    before = head(services)
    out = run(services, OPERATOR, merge.merge_branch, "acme", "agent/x", None)
    assert out.revision is None and out.up_to_date is True
    assert head(services) == before


def test_reads_through_a_write_context_see_its_own_writes_before_any_revision_exists(services, acme):
    def use_case(uow: UnitOfWork) -> tuple[int, int | None, int]:
        ctx = uow.begin("acme", "main")
        pending, unwritten = ctx.pending_revision, ctx.revision_if_written
        nodes.put_node(uow, "acme", "main", "w", "/c", node_type="t", properties={"content": "gamma"})
        return pending, unwritten, ctx.pending_revision

    before = head(services)
    pending, unwritten, still = run(services, OPERATOR, use_case)
    assert (pending, unwritten, still) == (before[0] + 1, None, before[0] + 1)
    assert head(services)[0] == before[0] + 1
    with reading(services, OPERATOR, "acme", "main") as (session, view):
        assert view.revision == before[0] + 1


def test_hooks_run_after_the_commit_and_never_after_a_failure(services, acme):
    seen: list[tuple[str, int]] = []

    def writes_then(fail: bool):
        def use_case(uow: UnitOfWork) -> None:
            nodes.put_node(uow, "acme", "main", "w", "/hooked", node_type="t", properties={"content": "hook"})
            uow.after_commit(lambda: seen.append(("committed", head(services)[0])))
            if fail:
                raise InvalidInput("refused after writing")
        return use_case

    before = head(services)
    with pytest.raises(InvalidInput):
        run(services, OPERATOR, writes_then(True))
    assert seen == [] and head(services) == before  # nothing written, no hook
    run(services, OPERATOR, writes_then(False))
    # the hook saw the committed revision from another session
    assert seen == [("committed", before[0] + 1)]


def test_the_caller_is_recorded_unless_the_call_names_an_actor(services, acme):
    agent = Actor("operator", "agent-7")
    run(services, agent, nodes.put_node, "acme", "main", "w", "/by-caller", node_type="t", properties={})
    run(services, agent, nodes.put_node, "acme", "main", "w", "/by-name", node_type="t", properties={},
        actor="named in the call")
    run(services, ANONYMOUS, nodes.put_node, "acme", "main", "w", "/anonymous", node_type="t", properties={})
    with services.db.read() as s:
        actors = s.execute(select(Revision.actor).order_by(Revision.number.desc()).limit(3)).scalars().all()
    assert actors == [None, "named in the call", "agent-7"]


def test_a_failing_use_case_leaves_no_trace(services, acme):
    before = head(services)
    with pytest.raises(NotFound):
        run(services, OPERATOR, nodes.batch, "acme", "main",
            upserts=[{"workspace": "w", "path": "/ok", "properties": {"content": "fine"}},
                     {"workspace": "nope", "path": "/bad", "properties": {}}])
    assert head(services) == before
    with pytest.raises(NotFound):
        with unit_of_work(services, OPERATOR) as uow:
            nodes.put_node(uow, "acme", "main", "w", "/first", node_type="t", properties={})
            nodes.put_node(uow, "acme", "nope", "w", "/second", node_type="t", properties={})
    assert head(services) == before


# -- the rule, held structurally --------------------------------------------------------------


def _calls(path: Path) -> set[str]:
    """Dotted names of every call in a module (``services.db.write``, ``begin_write``...)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            parts = []
            f = node.func
            while isinstance(f, ast.Attribute):
                parts.append(f.attr)
                f = f.value
            if isinstance(f, ast.Name):
                parts.append(f.id)
            out.add(".".join(reversed(parts)))
    return out


@pytest.mark.parametrize("path", sorted((ROOT / "kg" / "ops").glob("*.py")), ids=lambda p: p.name)
def test_use_cases_never_open_a_write_transaction_nor_roll_back(path):
    calls = _calls(path)
    assert not {c for c in calls if c.endswith("db.write") or c == "begin_write" or c.endswith(".rollback")
                or c.endswith(".commit")}, path


@pytest.mark.parametrize("path", sorted((ROOT / "api" / "routes").glob("*.py")), ids=lambda p: p.name)
def test_routes_open_no_session(path):
    calls = _calls(path)
    assert not {c for c in calls if c.endswith("db.write") or c.endswith("db.read")}, path


def _read_counts(use_case: str) -> dict[str, float]:
    from prometheus_client import generate_latest

    from kg.metrics import REGISTRY

    counts = {"ok": 0.0, "error": 0.0}
    for line in generate_latest(REGISTRY).decode().splitlines():
        if line.startswith("kg_use_case_duration_seconds_count") and f'use_case="{use_case}"' in line:
            counts["ok" if 'outcome="ok"' in line else "error"] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.mark.parametrize("traced", [False, True])
def test_a_read_counts_its_outcome_under_its_use_case_traced_or_not(services, acme, monkeypatch, traced):
    """A read that answers counts ok; one refused before its body (an unknown repository) and one
    whose body raises (an unknown node) count error; the label is the reading use case, with and
    without a tracer provider (two code paths of kg.context.reading)."""
    from kg import context
    from kg.ops import queries

    monkeypatch.setattr(context, "active", lambda: traced)
    before = _read_counts("ops.queries.get_node")
    queries.get_node(services, OPERATOR, "acme", "main", "w", "/a")
    with pytest.raises(NotFound):
        queries.get_node(services, OPERATOR, "nope", "main", "w", "/a")
    with pytest.raises(NotFound):
        queries.get_node(services, OPERATOR, "acme", "main", "w", "/missing")
    after = _read_counts("ops.queries.get_node")
    assert (after["ok"] - before["ok"], after["error"] - before["error"]) == (1, 2)
