"""The alias maps extraction links spellings through (kg.rag.aliases): brought forward by the
branch's changes, they answer exactly what a whole read of the entity nodes answers, on every
branch, after deletes, resets and merges, for old snapshots too; and a corpus extracted document
by document reads the entity nodes whole once, not once per document. Both databases."""

from __future__ import annotations

import random

import pytest

from kg.context import OPERATOR, reading, run
from kg.errors import Conflict, MergeConflict, NotFound
from kg.ops.branches import create_branch, reset_branch
from kg.ops.merge import merge_branch
from kg.ops.nodes import delete_node, put_node
from kg.ops.repos import create_repository, create_workspace
from kg.rag.aliases import ALIASES, AliasIndex, _read
from kg.rag.functions import invoke
from kg.store.repos import workspace_id

NAMES = ["Ahab", "Captain Ahab", "Starbuck", "Mr Starbuck", "Pequod", "The Pequod", "Ishmael", "Queequeg"]


def _slug(name: str) -> str:
    return name.lower().replace(" ", "-")


@pytest.fixture
def store(services):
    run(services, OPERATOR, create_repository, "crew")
    run(services, OPERATOR, create_workspace, "crew", "kb")
    return services


def _put(services, branch, name, aliases):
    run(services, OPERATOR, put_node, "crew", branch, "kb", f"/entities/{_slug(name)}", node_type="kg:Entity",
        properties={"name": name, "aliases": aliases}, parents=True)


def _check(services, index, branch, at_revision=None):
    """Every slug answered by the kept index equals the whole read's answer."""
    with reading(services, OPERATOR, "crew", branch, at_revision) as (session, view):
        truth = _read(session, view, workspace_id(view, "kb")).as_dict()
        for slug in {_slug(n) for n in NAMES} | {"nobody"}:
            assert index.lookup(session, view, "kb", slug) == truth.get(slug), (branch, at_revision, slug)
        return truth


@pytest.mark.parametrize("seed", range(4))
def test_the_kept_map_answers_what_a_whole_read_answers(store, seed):
    rng = random.Random(seed)
    index = AliasIndex()
    branches = ["main"]
    revisions: list[tuple[str, int]] = []
    for step in range(40):
        op = rng.random()
        branch = rng.choice(branches)
        name = rng.choice(NAMES)
        if op < 0.55:
            _put(store, branch, name, rng.sample([n for n in NAMES if n != name], rng.randint(0, 2)))
        elif op < 0.7:
            try:
                run(store, OPERATOR, delete_node, "crew", branch, "kb", f"/entities/{_slug(name)}")
            except NotFound:  # no such node on this branch: nothing to delete
                pass
        elif op < 0.8 and len(branches) < 4:
            made = f"agent/s{step}"
            run(store, OPERATOR, create_branch, "crew", name=made, from_branch=branch)
            branches.append(made)
        elif op < 0.9 and branch != "main":
            try:
                run(store, OPERATOR, reset_branch, "crew", branch)
            except Conflict:  # a branch with child branches is not reset
                pass
        elif branch != "main":
            try:
                run(store, OPERATOR, merge_branch, "crew", branch, None)  # into its parent
            except MergeConflict:  # nothing merged
                pass
        with reading(store, OPERATOR, "crew", branch) as (_, view):
            revisions.append((branch, view.revision))
        _check(store, index, branch)
    for branch in branches:
        _check(store, index, branch)
    for branch, revision in rng.sample(revisions, 5):  # old snapshots, behind the kept states
        _check(store, index, branch, at_revision=revision)


def test_an_alias_removed_or_its_entity_deleted_no_longer_links(store):
    index = AliasIndex()
    _put(store, "main", "Ahab", ["Captain Ahab"])
    assert _check(store, index, "main") == {"captain-ahab": "/entities/ahab"}
    _put(store, "main", "Ahab", [])
    assert _check(store, index, "main") == {}
    _put(store, "main", "Ahab", ["Captain Ahab"])
    run(store, OPERATOR, delete_node, "crew", "main", "kb", "/entities/ahab")
    assert _check(store, index, "main") == {}
    assert index.reads == 1  # one whole read; every later answer came from the branch's changes


def test_a_corpus_extracted_document_by_document_reads_the_entities_whole_once(store):
    ALIASES.clear()
    before = ALIASES.reads
    for i in range(12):
        run(store, OPERATOR, put_node, "crew", "main", "kb", f"/doc/{i}", node_type="kg:Document",
            properties={"text": f"Person{i} Alpha met Person{i + 1} Beta in Town{i}."}, parents=True)
        out = invoke(store, OPERATOR, "crew", "extract-entities", {"workspace": "kb", "path": f"/doc/{i}"})
        assert out.entities, out
    assert ALIASES.reads - before == 1
