"""A mention lineage restamped after an edit keeps its extraction's spans, so it is not the mention
an extraction of the new text writes: merging the two is a relation conflict (both sides added
the edge, with different ``spans``), next to the extraction record's node conflict; resolved
'theirs', the target holds the branch's mention, whose spans quote the merged text. Replayed
through the use cases, on SQLite and PostgreSQL (the branch model test found the sequence)."""

from __future__ import annotations

import pytest

from kg.context import OPERATOR, reading, run
from kg.errors import MergeConflict
from kg.ops.branches import create_branch
from kg.ops.merge import merge_branch, preview_merge
from kg.ops.nodes import put_node
from kg.ops.repos import create_repository, create_workspace
from kg.rag.functions import invoke
from kg.store import relations as rel_store
from kg.store.nodes import get_node

FIRST = "Dana Weber approved funding."          # the target's text when it extracts
SECOND = "The board of DGIA met Dana Weber."    # the branch's text, and the target's after its edit
ENTITY = "/entities/dana-weber"


@pytest.fixture
def store(services):
    run(services, OPERATOR, create_repository, "m")
    run(services, OPERATOR, create_workspace, "m", "w")
    return services


def _put(services, branch, text):
    run(services, OPERATOR, put_node, "m", branch, "w", "/d2", node_type="kb:Doc", properties={"content": text})


def _extract(services, branch):
    out = invoke(services, OPERATOR, "m", "extract-entities", {"workspace": "w", "path": "/d2"}, branch=branch)
    assert ENTITY in {e.path for e in out.entities}, out
    return out


def _mention(services, branch):
    with reading(services, OPERATOR, "m", branch) as (session, view):
        entity, doc = get_node(session, view, "w", ENTITY), get_node(session, view, "w", "/d2")
        edge = rel_store.find_relation(session, view, entity.node_id, doc.node_id, "mentioned_in")
        assert edge is not None
        return edge.properties


def _quotes(text, props):
    return [text[s["start"]:s["end"]] == s["quote"] for s in props["spans"]]


def test_a_restamped_mention_and_one_extracted_from_the_same_text_conflict(store):
    services = store
    run(services, OPERATOR, create_branch, "m", name="b1")
    _put(services, "main", FIRST)
    _extract(services, "main")
    _put(services, "b1", SECOND)
    _extract(services, "b1")
    _put(services, "main", SECOND)  # still names Dana Weber: lineage restamps the mention

    ours, theirs = _mention(services, "main"), _mention(services, "b1")
    assert ours["source_hash"] == theirs["source_hash"]   # both read the same text now ...
    assert ours["spans"] != theirs["spans"]               # ... but the restamp kept the extraction's spans
    assert _quotes(FIRST, ours) == [True] and _quotes(SECOND, theirs) == [True]

    with pytest.raises(MergeConflict) as dry:
        preview_merge(services, OPERATOR, "m", "b1", "main")
    with pytest.raises(MergeConflict) as real:
        run(services, OPERATOR, merge_branch, "m", "b1", "main")
    assert real.value.details == dry.value.details
    conflicts = real.value.details["conflicts"]
    records = [c for c in conflicts if c["kind"] == "node"]
    relations = [c for c in conflicts if c["kind"] == "relation"]
    assert len(conflicts) == 2
    assert [c["path"].startswith("/kg/extractions/") for c in records] == [True]
    assert records[0]["reason"] == "added on both sides with different content"
    [rel] = relations
    assert (rel["from"], rel["type"], rel["to"]) == (f"w:{ENTITY}", "mentioned_in", "w:/d2")
    assert rel["reason"] == "changed differently on both sides"
    assert rel["base"] is None
    assert rel["ours"]["properties"] == ours and rel["theirs"]["properties"] == theirs

    resolutions = [{"workspace": "w", "path": records[0]["path"], "take": "theirs"},
                   {"from": f"w:{ENTITY}", "type": "mentioned_in", "to": "w:/d2", "take": "theirs"}]
    done = run(services, OPERATOR, merge_branch, "m", "b1", "main", resolutions=resolutions)
    assert done.revision is not None
    assert done.derived.restamped == 0 and done.derived_writes == []
    assert _mention(services, "main") == theirs
