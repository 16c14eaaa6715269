"""Lineage (issue 17, part 2): records derived from a node know its version, and a write of the
node recomputes, flags or leaves them, in the same transaction; on branches and across merges;
over SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

API = "/api/repos/acme"
NODES = f"{API}/workspaces/knowledge/nodes"
LINEAGE = f"{API}/workspaces/knowledge/lineage"
BIO = "Ada Lovelace worked with Charles Babbage in London on the Analytical Engine."


def put(client, path, text, *, branch="main", node_type="kb:Doc", **props):
    r = client.put(
        f"{NODES}{path}",
        params={"branch": branch},
        json={"node_type": node_type, "properties": {"content": text, **props}},
    )
    assert r.status_code in (200, 201), r.text
    return r.json()


def invoke(client, name, payload, branch="main"):
    r = client.post(f"/api/functions/acme/{name}/invoke", json={"input": payload, "branch": branch})
    assert r.status_code == 200, r.text
    return r.json()


def extract(client, path, branch="main"):
    return invoke(client, "extract-entities", {"path": path, "workspace": "knowledge"}, branch)


def props(client, path, branch="main"):
    r = client.get(f"{NODES}{path}", params={"branch": branch})
    assert r.status_code == 200, r.text
    return r.json()["properties"]


def edges(client, branch="main", rel_type="mentioned_in"):
    """Every (from path, to path) edge of ``rel_type`` on the branch."""
    out = set()
    r = client.get(f"{NODES}", params={"prefix": "/", "branch": branch})
    for node in r.json()["nodes"]:
        n = client.get(
            f"{API}/neighbors",
            params={"node": f"knowledge:{node['path']}", "branch": branch, "direction": "OUT", "type": rel_type},
        )
        out |= {(node["path"], m["path"]) for m in n.json()["neighbors"]}
    return out


def lineage(client, path, branch="main"):
    r = client.get(f"{LINEAGE}{path}", params={"branch": branch})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def bio(client, repo):
    put(client, "/bio", BIO)
    out = extract(client, "/bio")
    assert {e["path"] for e in out["entities"]} >= {"/entities/ada-lovelace", "/entities/charles-babbage"}
    return {e["path"] for e in out["entities"]}


def test_extraction_records_its_source_version(client, bio):
    node = client.get(f"{NODES}/bio").json()
    rows = lineage(client, "/bio")["derived"]
    mentions = {r["path"]: r for r in rows if r["kind"] == "mention"}
    assert set(mentions) == bio
    assert all(r["source_revision"] == node["revision"] and r["current"] and not r["orphan"] for r in mentions.values())
    record = [r for r in rows if r["kind"] == "extraction"]
    assert record == [
        {
            "kind": "extraction",
            "workspace": "knowledge",
            "path": f"/kg/extractions/{node['id']}",
            "source_revision": node["revision"],
            "current": True,
        }
    ]
    assert [r["kind"] for r in rows if r["kind"] == "chunks"] == ["chunks"]
    up = lineage(client, "/entities/ada-lovelace")["derived_from"]
    assert up == [
        {
            "kind": "mentioned_in",
            "workspace": "knowledge",
            "path": "/bio",
            "source_revision": node["revision"],
            "current": True,
        }
    ]


def test_edit_drops_mentions_no_longer_in_the_text_and_flags_orphans(client, bio):
    before = edges(client)
    assert ("/entities/charles-babbage", "/bio") in before
    put(client, "/bio", "Ada Lovelace wrote the first published program.")
    after = edges(client)
    assert after == {e for e in before if e[0] not in bio - {"/entities/ada-lovelace"}}
    assert after == {("/entities/ada-lovelace", "/bio")}
    for path in bio - {"/entities/ada-lovelace"}:
        assert props(client, path)["orphan"] is True
    assert "orphan" not in props(client, "/entities/ada-lovelace")
    rev = client.get(f"{NODES}/bio").json()["revision"]
    mention = [r for r in lineage(client, "/bio")["derived"] if r["kind"] == "mention"]
    assert mention == [
        {
            "kind": "mention",
            "workspace": "knowledge",
            "path": "/entities/ada-lovelace",
            "source_revision": rev,
            "current": True,
            "orphan": False,
        }
    ]
