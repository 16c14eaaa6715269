"""The enrichment loop of RAG patterns as a search option: ``context`` attaches to each hit
its parent document and its neighbouring sections, in order, on the branch searched."""

from __future__ import annotations

from tests.api.test_nodes import assert_error, put

SECTIONS = [  # (name, position, content): positions deliberately not in name order
    ("intro", 1, "Sailing starts with the rigging check before leaving the harbour."),
    ("zz-knots", 2, "The bowline knot makes a fixed loop that does not slip under load."),
    ("anchoring", 3, "Drop the anchor upwind and let out five times the depth in chain."),
    ("mooring", 4, "Mooring lines run from the cleats to the bollards on the quay."),
]


def seed(client):
    assert put(client, "/guide", {"title": "Sailing handbook", "content": "A handbook for new crews."},
               node_type="kb:Article").status_code == 201
    for name, position, content in SECTIONS:
        assert put(client, f"/guide/{name}", {"title": name, "content": content, "position": position},
                   node_type="kb:Section").status_code == 201
    # a note filed beside the sections: not a section, so never a neighbouring section
    assert put(client, "/guide/note", {"content": "Editor's note on the bowline.", "position": 2.5},
               node_type="kb:Note").status_code == 201


def search(client, body, **params):
    r = client.post("/api/repos/acme/search", params=params, json=body)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def names(nodes):
    return [n["name"] for n in nodes]


def test_each_hit_carries_its_parent_and_neighbouring_sections_in_order(client, repo):
    seed(client)
    rows = search(client, {"query": "bowline knot fixed loop", "k": 1, "mode": "fulltext", "granularity": "node",
                           "node_type": "kb:Section",
                           "context": {"siblings": 1, "order_by": "properties.position"}})
    assert [r["path"] for r in rows] == ["/guide/zz-knots"]
    context = rows[0]["context"]
    assert context["parent"]["path"] == "/guide"
    assert context["parent"]["properties"]["title"] == "Sailing handbook"
    assert context["parent"]["node_type"] == "kb:Article"
    # by position: intro (1) < zz-knots (2) < anchoring (3); the kb:Note at 2.5 is not a section
    assert names(context["before"]) == ["intro"]
    assert names(context["after"]) == ["anchoring"]
    assert context["after"][0]["properties"]["content"].startswith("Drop the anchor")


def test_siblings_default_to_the_childrens_order_and_stop_at_the_ends(client, repo):
    seed(client)
    rows = search(client, {"query": "bowline knot fixed loop", "k": 1, "mode": "fulltext", "granularity": "node",
                           "node_type": "kb:Section", "context": {"siblings": 3}})
    context = rows[0]["context"]
    # default order: `order` (none set), then name: anchoring, intro, mooring, zz-knots
    assert names(context["before"]) == ["anchoring", "intro", "mooring"]
    assert context["after"] == []
    rows = search(client, {"query": "rigging check harbour", "k": 1, "mode": "fulltext", "granularity": "node",
                           "context": {"siblings": 2, "order_by": "-properties.position", "parent": False}})
    assert rows[0]["path"] == "/guide/intro"
    assert set(rows[0]["context"]) == {"before", "after"}  # no parent asked
    # descending: mooring (4), anchoring (3), zz-knots (2), intro (1); the nearest last
    assert names(rows[0]["context"]["before"]) == ["anchoring", "zz-knots"]
    assert rows[0]["context"]["after"] == []


def test_a_top_level_hit_has_a_null_parent_and_chunks_share_one_context(client, repo):
    seed(client)
    rows = search(client, {"query": "handbook new crews", "k": 1, "mode": "fulltext", "granularity": "chunk",
                           "node_type": "kb:Article", "context": {"siblings": 0}})
    assert rows[0]["path"] == "/guide" and rows[0]["context"] == {"parent": None}
    rows = search(client, {"query": "anchor chain bollards quay cleats", "k": 4, "mode": "fulltext",
                           "granularity": "chunk", "node_type": "kb:Section",
                           "context": {"order_by": "properties.position"}})
    by_path = {r["path"]: r["context"] for r in rows}
    assert names(by_path["/guide/mooring"]["before"]) == ["anchoring"]
    assert by_path["/guide/mooring"]["after"] == []
    assert by_path["/guide/mooring"]["parent"]["path"] == "/guide"


def test_without_context_rows_are_unchanged(client, repo):
    seed(client)
    rows = search(client, {"query": "bowline", "k": 2, "mode": "fulltext"})
    assert rows and all("context" not in r for r in rows)


def test_context_reads_the_branch_searched(client, repo):
    """On an agent branch, a section deleted there is nobody's neighbour and a re-titled parent
    is seen as the branch has it; main is unchanged."""
    seed(client)
    assert client.post("/api/repos/acme/branches", json={"name": "agent/edit"}).status_code == 201
    assert client.delete("/api/repos/acme/workspaces/knowledge/nodes/guide/intro",
                         params={"branch": "agent/edit"}).status_code in (200, 204)
    assert put(client, "/guide", {"title": "Crew handbook", "content": "A handbook for new crews."},
               branch="agent/edit", node_type="kb:Article").status_code == 200
    body = {"query": "bowline knot fixed loop", "k": 1, "mode": "fulltext", "granularity": "node",
            "node_type": "kb:Section", "context": {"order_by": "properties.position"}}
    on_branch = search(client, body, branch="agent/edit")[0]["context"]
    assert on_branch["before"] == [] and names(on_branch["after"]) == ["anchoring"]
    assert on_branch["parent"]["properties"]["title"] == "Crew handbook"
    on_main = search(client, body)[0]["context"]
    assert names(on_main["before"]) == ["intro"]
    assert on_main["parent"]["properties"]["title"] == "Sailing handbook"


def test_bad_context_is_a_422_naming_it(client, repo):
    seed(client)
    for bad, fragment in [({"siblings": 11}, "context.siblings"), ({"siblings": -1}, "context.siblings"),
                          ({"parent": False, "siblings": 0}, "asks for nothing"),
                          ({"order_by": "colour"}, "context.order_by"), ({"depth": 2}, "context.depth"),
                          ({"siblings": "2"}, "context.siblings"), ({"siblings": True}, "context.siblings")]:
        r = client.post("/api/repos/acme/search", json={"query": "bowline", "context": bad})
        assert_error(r, 422, "invalid_input")
        assert fragment in r.json()["error"]["message"], (bad, r.json())
