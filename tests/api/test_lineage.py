"""Lineage (issue 17, part 2): records derived from a node know its version, and a write of the
node recomputes, flags or leaves them, in the same transaction; on branches and across merges;
over SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json

import pytest


@pytest.fixture(autouse=True)
def _rules(services):
    """Lineage is tested over the deterministic extractor, whose entities these texts are
    written for (the offline NER: tests/api/test_ner_extraction.py)."""
    services.settings.entity_ner = "off"


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


def text_hash(text):
    """What a mention records of the text it read: sha256 of the (only) text field, stripped."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


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
    assert all(r["source_hash"] == text_hash(BIO) and r["current"] and not r["orphan"] for r in mentions.values())
    record = [r for r in rows if r["kind"] == "extraction"]
    assert record == [
        {
            "kind": "extraction",
            "workspace": "knowledge",
            "path": f"/kg/extractions/{node['id']}",
            "source_hash": text_hash(BIO),
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
            "source_hash": text_hash(BIO),
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
    mention = [r for r in lineage(client, "/bio")["derived"] if r["kind"] == "mention"]
    assert mention == [
        {
            "kind": "mention",
            "workspace": "knowledge",
            "path": "/entities/ada-lovelace",
            "source_hash": text_hash("Ada Lovelace wrote the first published program."),
            "current": True,
            "orphan": False,
        }
    ]


def test_an_entity_still_linked_elsewhere_is_not_orphaned(client, bio):
    put(client, "/letters", "Charles Babbage wrote to Ada Lovelace about the engine.")
    extract(client, "/letters")
    put(client, "/bio", "Ada Lovelace wrote the first published program.")
    assert ("/entities/charles-babbage", "/letters") in edges(client)
    assert ("/entities/charles-babbage", "/bio") not in edges(client)
    assert "orphan" not in props(client, "/entities/charles-babbage")


def test_an_edit_that_keeps_every_name_only_restamps(client, bio):
    before = edges(client)
    put(client, "/bio", BIO + " She is remembered every October.")
    assert edges(client) == before
    rows = [r for r in lineage(client, "/bio")["derived"] if r["kind"] == "mention"]
    assert {r["path"] for r in rows} == bio
    assert all(r["source_hash"] == text_hash(BIO + " She is remembered every October.") and r["current"] for r in rows)
    assert all("orphan" not in props(client, p) for p in bio)
    # the extraction record is a record of the text it read: it is now behind
    assert [r["current"] for r in lineage(client, "/bio")["derived"] if r["kind"] == "extraction"] == [False]


def test_a_write_that_changes_no_text_writes_no_derived_record(client, bio):
    before = edges(client)
    revisions = {p: client.get(f"{NODES}{p}").json()["revision"] for p in bio}
    r = client.patch(f"{NODES}/bio", json={"properties": {"status": "published"}})
    assert r.status_code == 200
    assert edges(client) == before
    assert {p: client.get(f"{NODES}{p}").json()["revision"] for p in bio} == revisions
    rows = [r for r in lineage(client, "/bio")["derived"] if r["kind"] == "mention"]
    assert len(rows) == len(bio) and all(r["current"] for r in rows)


def test_deleting_the_source_flags_orphans_and_keeps_the_entities(client, bio):
    put(client, "/letters", "Charles Babbage wrote letters.")
    extract(client, "/letters")
    r = client.delete(f"{NODES}/bio")
    assert r.status_code == 200
    assert {e for e in edges(client) if e[1] == "/bio"} == set()
    for path in bio:
        node = props(client, path)  # never deleted
        if path == "/entities/charles-babbage":
            assert "orphan" not in node
        else:
            assert node["orphan"] is True


def test_a_batch_recomputes_each_source_once(client, bio):
    put(client, "/letters", "Charles Babbage wrote letters.")
    extract(client, "/letters")
    r = client.post(
        f"{API}/nodes:batch",
        json={
            "upserts": [
                {
                    "workspace": "knowledge",
                    "path": "/bio",
                    "node_type": "kb:Doc",
                    "properties": {"content": "Charles Babbage designed engines."},
                }
            ],
            "deletes": [{"workspace": "knowledge", "path": "/letters"}],
        },
    )
    assert r.status_code == 200, r.text
    assert edges(client) == {("/entities/charles-babbage", "/bio")}
    assert "orphan" not in props(client, "/entities/charles-babbage")
    assert all(props(client, p)["orphan"] is True for p in bio - {"/entities/charles-babbage"})


def test_an_orphan_mentioned_again_loses_its_flag(client, bio):
    put(client, "/bio", "Ada Lovelace wrote the first published program.")
    assert props(client, "/entities/charles-babbage")["orphan"] is True
    put(client, "/bio", BIO)
    extract(client, "/bio")
    assert "orphan" not in props(client, "/entities/charles-babbage")
    assert ("/entities/charles-babbage", "/bio") in edges(client)


# -- branches and merges ------------------------------------------------------------------------


def test_an_edit_on_a_branch_recomputes_the_branch_only_until_the_merge(client, bio):
    main_before = edges(client)
    assert client.post(f"{API}/branches", json={"name": "agent/edit"}).status_code == 201
    put(client, "/bio", "Ada Lovelace wrote the first published program.", branch="agent/edit")
    assert edges(client, "agent/edit") == {("/entities/ada-lovelace", "/bio")}
    assert props(client, "/entities/charles-babbage", "agent/edit")["orphan"] is True
    assert edges(client) == main_before  # main untouched
    assert "orphan" not in props(client, "/entities/charles-babbage")
    r = client.post(f"{API}/branches/agent/edit/merge", json={"into": "main"})
    assert r.status_code == 200, r.text
    assert edges(client) == {("/entities/ada-lovelace", "/bio")}
    assert all(props(client, p)["orphan"] is True for p in bio - {"/entities/ada-lovelace"})
    # the merge brought the branch's recomputed edges and flags: nothing left to recompute
    assert r.json()["derived"] == {"unlinked": 0, "restamped": 0, "orphaned": 0, "stale": 0, "queued": 0}


def lineage_decisions(r):
    """The ``(from path, to path)`` of the lineage decisions a refused merge lists."""
    assert r.status_code == 409, r.text
    return {(c["from"].partition(":")[2], c["to"].partition(":")[2])
            for c in r.json()["error"]["details"]["conflicts"] if c["kind"] == "lineage"}


def drop_all(r):
    """Resolutions that drop every lineage decision of a refused merge."""
    return [{"from": c["from"], "to": c["to"], "type": c["type"], "take": "drop"}
            for c in r.json()["error"]["details"]["conflicts"]]


def test_a_merge_recomputes_what_the_target_derived_after_the_fork(client, repo):
    put(client, "/bio", BIO)
    assert client.post(f"{API}/branches", json={"name": "agent/late"}).status_code == 201
    extract(client, "/bio")  # on main, after the fork
    put(client, "/bio", "Ada Lovelace wrote the first published program.", branch="agent/late")
    assert edges(client, "agent/late") == set()  # the branch never saw the entities
    before = edges(client)
    assert ("/entities/charles-babbage", "/bio") in before
    # main asserted those mentions: the merge does not remove them on its own, it asks
    refused = client.post(f"{API}/branches/agent/late/merge", json={"into": "main"})
    assert lineage_decisions(refused) == before - {("/entities/ada-lovelace", "/bio")}
    assert edges(client) == before  # nothing written
    dry = client.post(f"{API}/branches/agent/late/merge",
                      json={"into": "main", "dry_run": True, "resolutions": drop_all(refused)})
    assert dry.status_code == 200, dry.text
    r = client.post(f"{API}/branches/agent/late/merge",
                    json={"into": "main", "resolutions": drop_all(refused), "if_plan": dry.json()["plan"]})
    assert r.status_code == 200, r.text
    assert edges(client) == {("/entities/ada-lovelace", "/bio")}
    assert props(client, "/entities/charles-babbage")["orphan"] is True
    assert "orphan" not in props(client, "/entities/ada-lovelace")
    # recomputed by the merge itself, as the dry run said: every entity but Ada unlinked (as
    # decided) and orphaned, Ada's edge stamped with the new text's hash
    gone = len(before) - 1
    assert r.json()["derived"] == {"unlinked": gone, "restamped": 1, "orphaned": gone, "stale": 0, "queued": 0}
    assert (r.json()["derived"], r.json()["derived_writes"]) == (dry.json()["derived"], dry.json()["derived_writes"])


def test_mentions_a_merge_brings_for_a_text_the_target_changed_are_recomputed(client, repo):
    """Found by a new user: extraction on the branch, the text edited on main, then the merge.
    The merge keeps main's text and brings the branch's mentions of the old one; those are
    checked against the text main holds: the mentions it no longer names are the reviewer's
    to keep or drop (the branch asserted them), the others are restamped, in the merge's
    revision."""
    put(client, "/bio", BIO)
    assert client.post(f"{API}/branches", json={"name": "agent/x"}).status_code == 201
    found = {e["path"] for e in extract(client, "/bio", branch="agent/x")["entities"]}
    assert {"/entities/ada-lovelace", "/entities/charles-babbage"} <= found
    put(client, "/bio", "Ada Lovelace wrote the first published program.")  # on main, after the fork
    refused = client.post(f"{API}/branches/agent/x/merge", json={"into": "main"})
    assert lineage_decisions(refused) == {(p, "/bio") for p in found - {"/entities/ada-lovelace"}}
    r = client.post(f"{API}/branches/agent/x/merge", json={"into": "main", "resolutions": drop_all(refused)})
    assert r.status_code == 200, r.text
    assert edges(client) == {("/entities/ada-lovelace", "/bio")}
    assert all(props(client, p)["orphan"] is True for p in found - {"/entities/ada-lovelace"})
    gone = len(found) - 1
    assert r.json()["derived"] == {"unlinked": gone, "restamped": 1, "orphaned": gone, "stale": 0, "queued": 0}
    mentions = [row for row in lineage(client, "/bio")["derived"] if row["kind"] == "mention"]
    assert [row["path"] for row in mentions] == ["/entities/ada-lovelace"] and mentions[0]["current"] is True


def test_a_delete_on_a_branch_reaches_main_by_the_merge(client, bio):
    assert client.post(f"{API}/branches", json={"name": "agent/del"}).status_code == 201
    assert client.delete(f"{NODES}/bio", params={"branch": "agent/del"}).status_code == 200
    assert edges(client, "agent/del") == set()
    assert edges(client) != set()
    assert client.post(f"{API}/branches/agent/del/merge", json={"into": "main"}).status_code == 200
    assert edges(client) == set()
    assert all(props(client, p)["orphan"] is True for p in bio)


# -- with an LLM: a durable job, not an inline call -------------------------------------------


def test_with_an_llm_an_edit_queues_an_extraction_job(client, bio, services):
    from kg.providers.llm import ScriptedLLM

    llm = services.llm = ScriptedLLM(
        [json.dumps({"entities": [{"name": "Ada Lovelace", "type": "person"}], "relations": []})]
    )
    put(client, "/bio", "Ada Lovelace wrote the first published program.")
    # the job ran after the commit (index_inline runs jobs inline): one model call, its outcome
    assert len(llm.calls) == 1
    assert edges(client) == {("/entities/ada-lovelace", "/bio")}
    from sqlalchemy import select

    from kg.store.models import FunctionJob

    with services.db.read() as session:
        jobs = session.execute(select(FunctionJob.function, FunctionJob.input, FunctionJob.state)).all()
    assert [tuple(j) for j in jobs] == [("extract-entities", {"workspace": "knowledge", "path": "/bio"}, "succeeded")]


# -- stored answers -------------------------------------------------------------------------------

RIGGING = "Standing rigging must be replaced every ten years in temperate waters."
TROPICS = "Ultraviolet exposure near the equator shortens wire lifetimes to seven years."
QUESTION = "How often must standing rigging be replaced?"


@pytest.fixture
def answer(client, repo, services):
    """An answer citing /rigging [1] and /tropics [2] (via the graph), stored at /answers/rigging."""
    from kg.providers.llm import ScriptedLLM

    put(client, "/rigging", RIGGING)
    put(client, "/tropics", TROPICS)
    r = client.post(
        f"{API}/relations", json={"from": "knowledge:/rigging", "to": "knowledge:/tropics", "type": "see_also"}
    )
    assert r.status_code == 201
    none = services.llm
    services.llm = ScriptedLLM(['{"sufficient": true}', "Ten years [1], seven in the tropics [2]."])
    body = invoke(
        client,
        "ask",
        {
            "question": QUESTION,
            "use_graph": True,
            "store_answer": {"workspace": "knowledge", "path": "/answers/rigging"},
        },
    )
    services.llm = none
    assert [c["path"] for c in body["citations"]] == ["/rigging", "/tropics"]
    return body["stored"]


def answer_props(client, branch="main"):
    return client.get(f"{NODES}/answers/rigging", params={"branch": branch}).json()


def test_an_answer_records_what_it_cites(client, answer):
    stored = answer_props(client)["properties"]
    assert "stale" not in stored
    revisions = {p: client.get(f"{NODES}{p}").json()["revision"] for p in ("/rigging", "/tropics")}
    assert [(c["path"], c["source_revision"]) for c in stored["citations"]] == [
        ("/rigging", revisions["/rigging"]),
        ("/tropics", revisions["/tropics"]),
    ]
    rows = [r for r in lineage(client, "/rigging")["derived"] if r["kind"] == "answer"]
    assert rows == [
        {
            "kind": "answer",
            "workspace": "knowledge",
            "path": "/answers/rigging",
            "source_revision": revisions["/rigging"],
            "current": True,
            "stale": False,
            "stale_citations": [],
        }
    ]
    up = lineage(client, "/answers/rigging")["derived_from"]
    assert sorted((r["kind"], r["path"], r["current"]) for r in up) == [
        ("cites", "/rigging", True),
        ("cites", "/tropics", True),
    ]


def test_a_changed_cited_passage_makes_the_answer_stale_naming_that_citation(client, answer):
    put(client, "/rigging", "Standing rigging must be replaced every twelve years in temperate waters.")
    rev = client.get(f"{NODES}/rigging").json()["revision"]
    node = answer_props(client)
    assert node["revision"] == rev  # the same transaction
    assert node["properties"]["stale"] is True
    assert node["properties"]["stale_citations"] == [
        {
            "marker": 1,
            "workspace": "knowledge",
            "path": "/rigging",
            "chunk_index": 0,
            "reason": "chunk_changed",
            "revision": rev,
        }
    ]
    rows = {r["path"]: r for r in lineage(client, "/answers/rigging")["derived_from"]}
    assert rows["/rigging"]["current"] is False
    assert [r["current"] for r in lineage(client, "/rigging")["derived"] if r["kind"] == "answer"] == [False]
    assert [r["current"] for r in lineage(client, "/tropics")["derived"] if r["kind"] == "answer"] == [True]


def test_a_change_outside_the_cited_passage_leaves_the_answer_untouched(client, answer):
    before = answer_props(client)
    r = client.patch(f"{NODES}/tropics", json={"properties": {"reviewed": True}})
    assert r.status_code == 200
    assert answer_props(client) == before


def test_a_deleted_cited_source_makes_the_answer_stale(client, answer):
    assert client.delete(f"{NODES}/tropics").status_code == 200
    rev = client.get(f"{API}/branches/main").json()["head_revision"]
    node = answer_props(client)
    assert node["properties"]["stale"] is True
    assert node["properties"]["stale_citations"] == [
        {
            "marker": 2,
            "workspace": "knowledge",
            "path": "/tropics",
            "chunk_index": 0,
            "reason": "source_deleted",
            "revision": rev,
        }
    ]
    # a second change of the other source adds its citation, keeping the first
    put(client, "/rigging", "Rigging: replace it every twelve years.")
    assert [s["marker"] for s in answer_props(client)["properties"]["stale_citations"]] == [2, 1]


def test_an_answer_goes_stale_on_main_only_with_the_merge(client, answer):
    assert client.post(f"{API}/branches", json={"name": "agent/fix"}).status_code == 201
    put(client, "/rigging", "Standing rigging must be replaced every twelve years.", branch="agent/fix")
    assert answer_props(client, "agent/fix")["properties"]["stale"] is True
    assert "stale" not in answer_props(client)["properties"]
    r = client.post(f"{API}/branches/agent/fix/merge", json={"into": "main"})
    assert r.status_code == 200, r.text
    assert r.json()["derived"]["stale"] == 0  # the branch's stale flag came with the merge
    stale = answer_props(client)["properties"]["stale_citations"]
    assert [(s["marker"], s["path"], s["reason"]) for s in stale] == [(1, "/rigging", "chunk_changed")]


# -- the route's errors ---------------------------------------------------------------------------


def test_lineage_of_an_unknown_node_or_a_bad_path(client, repo):
    r = client.get(f"{LINEAGE}/nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get(f"{API}/workspaces/nope/lineage/x")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get(f"{LINEAGE}/docs/%2E%2E/x")
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"


def test_lineage_of_a_node_with_nothing_derived(client, repo):
    node = put(client, "/plain", "")
    out = lineage(client, "/plain")
    assert out["derived"] == [] and out["derived_from"] == []
    assert out["revision"] == node["revision"]


# -- a property: mentions only ever shrink to the names the text still holds ------------------

_FIRST = ["Marta", "Jonas", "Ilse", "Pavel"]
_serial = iter(range(10_000))


def _surname(n: int) -> str:
    return "Kor" + "".join("abcdefghij"[int(d)] for d in str(n))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_mentions_follow_every_sequence_of_edits(client, repo):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    subsets = st.sets(st.integers(0, len(_FIRST) - 1))

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(subsets, min_size=1, max_size=4))
    def check(steps):
        n = next(_serial)
        names = [f"{first} {_surname(n)}" for first in _FIRST]
        path = f"/doc{n}"

        def text(chosen):
            return " ".join(f"{names[i]} met the board." for i in sorted(chosen)) or "Nobody came."

        put(client, path, text(range(len(names))))
        linked = {e["path"] for e in extract(client, path)["entities"]}
        slugs = {i: f"/entities/{names[i].lower().replace(' ', '-')}" for i in range(len(names))}
        assert linked == set(slugs.values())
        for chosen in steps:
            put(client, path, text(chosen))
            linked &= {slugs[i] for i in chosen}
            r = client.get(
                f"{API}/neighbors", params={"node": f"knowledge:{path}", "direction": "IN", "type": "mentioned_in"}
            )
            assert {m["path"] for m in r.json()["neighbors"]} == linked
            for slug in slugs.values():
                assert (props(client, slug).get("orphan") is True) == (slug not in linked)
            rows = [r for r in lineage(client, path)["derived"] if r["kind"] == "mention"]
            assert {r["path"] for r in rows} == linked
            assert all(r["current"] and r["source_hash"] == text_hash(text(chosen)) for r in rows)

    check()
