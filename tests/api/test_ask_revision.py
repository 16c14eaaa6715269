"""``ask`` with ``revision``: every leg reads the branch as of that revision. The coverage check
(absent words), the vocabulary rewrite and the graph leg read the branch's present, so a node
written after the revision could lend words or passages to an answer "as of" it."""

from __future__ import annotations

import pytest

from kg.context import OPERATOR, run
from kg.ops import nodes as node_ops
from kg.ops import relations as relation_ops
from kg.ops import repos as repo_ops
from kg.rag.functions import absent_terms, graph_passages, vocabulary_rewrite


@pytest.fixture
def history(services):
    """``/ship`` written at revision ``before``; then ``/island`` and ``/ship mentions /island``."""
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    ship, _ = run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/ship", node_type="kb:Note",
               properties={"content": "The zeppelin crossed the ocean and landed near the harbour."})
    island, _ = run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/island", node_type="kb:Note",
                 properties={"content": "The quokka lives on Rottnest island, a small marsupial."})
    run(services, OPERATOR, relation_ops.relate, "acme", "main", "kb:/ship", "kb:/island", "mentions")
    return services, ship.revision, ship.id, island.id


def test_absent_words_are_those_of_the_revision(history):
    services, before, _, _ = history
    question = "Where does the quokka live?"
    now, _ = absent_terms(services, OPERATOR, "acme", "main", question, None)
    then, _ = absent_terms(services, OPERATOR, "acme", "main", question, None, at_revision=before)
    assert "quokka" not in now
    assert "quokka" in then


def test_the_rewrite_lends_words_of_the_revision_only(history):
    services, before, _, _ = history
    question = "What does the quokka eat on the island?"
    then = vocabulary_rewrite(services, OPERATOR, "acme", "main", question, None, at_revision=before)
    assert then is None or not {"rottnest", "marsupial", "small", "lives"} & set(then.lower().split())
    now = vocabulary_rewrite(services, OPERATOR, "acme", "main", question, None, passages=2)
    assert now is not None and {"rottnest", "marsupial", "small", "lives"} & set(now.lower().split())


def test_the_graph_leg_reaches_only_what_the_revision_holds(history):
    services, before, ship_id, island_id = history
    seed = [{"workspace": "kb", "path": "/ship", "node_id": ship_id, "text": "zeppelin"}]
    question = "Where does the quokka live?"
    now = graph_passages(services, OPERATOR, "acme", "main", question, seed, None)
    assert [p["node_id"] for p in now] == [island_id]
    assert graph_passages(services, OPERATOR, "acme", "main", question, seed, None, at_revision=before) == []
