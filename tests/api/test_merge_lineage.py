"""A merge writes exactly what its dry run showed, lineage included: the derived writes are in
the plan, an edge either side asserted is never removed by lineage without the reviewer's
decision, and entity names match with punctuation folded (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _rules(services):
    """Lineage is tested over the deterministic extractor, whose entities these texts are
    written for (the offline NER: tests/api/test_ner_extraction.py)."""
    services.settings.entity_ner = "off"


API = "/api/repos/acme"
NODES = f"{API}/workspaces/knowledge/nodes"
SPEC = "JavaScript is standardised as ECMA-262 by Ecma International."


def put(client, path, text, *, branch="main", node_type="kb:Doc"):
    r = client.put(f"{NODES}{path}", params={"branch": branch},
                   json={"node_type": node_type, "properties": {"content": text}})
    assert r.status_code in (200, 201), r.text


def extract(client, path, branch="main"):
    r = client.post("/api/functions/acme/extract-entities/invoke",
                    json={"input": {"path": path, "workspace": "knowledge"}, "branch": branch})
    assert r.status_code == 200, r.text
    return r.json()


def props(client, path, branch="main"):
    r = client.get(f"{NODES}{path}", params={"branch": branch})
    assert r.status_code == 200, r.text
    return r.json()["properties"]


def mentioned(client, entity, branch="main"):
    """The documents ``entity`` has a ``mentioned_in`` edge to."""
    r = client.get(f"{API}/neighbors", params={"node": f"knowledge:{entity}", "branch": branch,
                                                "direction": "OUT", "type": "mentioned_in"})
    assert r.status_code == 200, r.text
    return {n["path"] for n in r.json()["neighbors"]}


def merge(client, branch, **body):
    return client.post(f"{API}/branches/{branch}/merge", json={"into": "main", **body})


def test_a_branch_that_only_adds_a_cited_note_merges_what_its_dry_run_said(client, repo):
    """The reproduction: a branch adds a note and its ``cites`` edge to a document whose
    ``mentioned_in`` edge (entity "ECMA 262", the text says "ECMA-262") main already holds.
    The dry run says one relation upserted and nothing derived; the merge does that, and
    nothing else: the edge stays, the entity is not flagged."""
    put(client, "/spec", SPEC)
    found = {e["path"]: e["name"] for e in extract(client, "/spec")["entities"]}
    assert found.get("/entities/ecma-262") == "ECMA 262"
    assert mentioned(client, "/entities/ecma-262") == {"/spec"}
    assert client.post(f"{API}/branches", json={"name": "agent/note"}).status_code == 201
    put(client, "/note-js", "Read the standard.", branch="agent/note", node_type="kb:Note")
    r = client.post(f"{API}/relations", params={"branch": "agent/note"},
                    json={"from": "knowledge:/note-js", "to": "knowledge:/spec", "type": "cites"})
    assert r.status_code == 201, r.text
    dry = merge(client, "agent/note", dry_run=True)
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["applied"]["relations"] == {"upserted": 1, "removed": 0, "kept": 0}
    assert plan["derived"] == {"unlinked": 0, "restamped": 0, "orphaned": 0, "stale": 0, "queued": 0}
    assert plan["derived_writes"] == []
    done = merge(client, "agent/note", if_plan=plan["plan"])
    assert done.status_code == 200, done.text
    out = done.json()
    assert (out["applied"], out["derived"], out["derived_writes"]) == (
        plan["applied"], plan["derived"], plan["derived_writes"])
    assert mentioned(client, "/entities/ecma-262") == {"/spec"}
    assert "orphan" not in props(client, "/entities/ecma-262")


def _late_extraction(client):
    """main extracts /bio after agent/late forked; the branch rewrites /bio naming Ada only."""
    put(client, "/bio", "Ada Lovelace worked with Charles Babbage on the Analytical Engine.")
    assert client.post(f"{API}/branches", json={"name": "agent/late"}).status_code == 201
    extract(client, "/bio")
    put(client, "/bio", "Ada Lovelace wrote the first published program.", branch="agent/late")


def _decisions(r):
    assert r.status_code == 409, r.text
    return [c for c in r.json()["error"]["details"]["conflicts"] if c["kind"] == "lineage"]


def test_a_mention_either_side_asserted_is_left_to_the_reviewer(client, repo):
    """main holds mentions its text no longer names once the branch's text is merged: the
    dry run and the merge refuse with one lineage decision each (keep / drop), and write
    nothing."""
    _late_extraction(client)
    before = {p: mentioned(client, p) for p in ("/entities/charles-babbage", "/entities/analytical-engine")}
    assert before == {"/entities/charles-babbage": {"/bio"}, "/entities/analytical-engine": {"/bio"}}
    for body in ({"dry_run": True}, {}):
        decisions = _decisions(merge(client, "agent/late", **body))
        assert sorted((d["from"], d["type"], d["to"], d["resolutions"]) for d in decisions) == [
            ("knowledge:/entities/analytical-engine", "mentioned_in", "knowledge:/bio", ["keep", "drop"]),
            ("knowledge:/entities/charles-babbage", "mentioned_in", "knowledge:/bio", ["keep", "drop"])]
        assert all(d["ours"]["properties"]["source_hash"] for d in decisions)  # main's edge, as it is
    assert {p: mentioned(client, p) for p in before} == before
    assert "orphan" not in props(client, "/entities/charles-babbage")


def test_kept_and_dropped_mentions_are_written_as_the_dry_run_said(client, repo):
    _late_extraction(client)
    picks = [{"from": "knowledge:/entities/charles-babbage", "to": "knowledge:/bio", "type": "mentioned_in",
              "take": "keep"},
             {"from": "knowledge:/entities/analytical-engine", "to": "knowledge:/bio", "type": "mentioned_in",
              "take": "drop"}]
    dry = merge(client, "agent/late", dry_run=True, resolutions=picks)
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["derived_writes"] == [
        {"kind": "unlinked", "from": "knowledge:/entities/analytical-engine", "type": "mentioned_in",
         "to": "knowledge:/bio"},
        {"kind": "restamped", "from": "knowledge:/entities/ada-lovelace", "type": "mentioned_in",
         "to": "knowledge:/bio", "source_hash": plan["derived_writes"][1]["source_hash"]},
        {"kind": "orphaned", "workspace": "knowledge", "path": "/entities/analytical-engine"}]
    assert plan["derived"] == {"unlinked": 1, "restamped": 1, "orphaned": 1, "stale": 0, "queued": 0}
    kept = client.get(f"{API}/workspaces/knowledge/lineage/bio").json()
    stamp = {r["path"]: r["source_hash"] for r in kept["derived"] if r["kind"] == "mention"}
    # other picks than the dry run's: refused, nothing written
    other = [{**p, "take": "drop"} for p in picks]
    r = merge(client, "agent/late", resolutions=other, if_plan=plan["plan"])
    assert r.status_code == 409 and r.json()["error"]["details"]["reason"] == "stale_plan", r.text
    done = merge(client, "agent/late", resolutions=picks, if_plan=plan["plan"])
    assert done.status_code == 200, done.text
    out = done.json()
    assert (out["applied"], out["derived"], out["derived_writes"]) == (
        plan["applied"], plan["derived"], plan["derived_writes"])
    assert mentioned(client, "/entities/charles-babbage") == {"/bio"}  # kept, as it was
    after = client.get(f"{API}/workspaces/knowledge/lineage/bio").json()
    rows = {r["path"]: r for r in after["derived"] if r["kind"] == "mention"}
    assert rows["/entities/charles-babbage"]["source_hash"] == stamp["/entities/charles-babbage"]
    assert rows["/entities/ada-lovelace"]["current"] is True
    assert mentioned(client, "/entities/analytical-engine") == set()
    assert props(client, "/entities/analytical-engine")["orphan"] is True
    assert "orphan" not in props(client, "/entities/charles-babbage")


def test_a_lineage_resolution_that_names_no_decision_is_refused(client, repo):
    _late_extraction(client)
    r = merge(client, "agent/late", resolutions=[
        {"from": "knowledge:/entities/ada-lovelace", "to": "knowledge:/bio", "type": "mentioned_in", "take": "drop"},
        {"from": "knowledge:/entities/charles-babbage", "to": "knowledge:/bio", "type": "mentioned_in",
         "take": "drop"},
        {"from": "knowledge:/entities/analytical-engine", "to": "knowledge:/bio", "type": "mentioned_in",
         "take": "drop"}])
    assert r.status_code == 422, r.text
    assert r.json()["error"]["details"]["unused"] == [
        {"from": "knowledge:/entities/ada-lovelace", "type": "mentioned_in", "to": "knowledge:/bio"}]
    r = merge(client, "agent/late", resolutions=[{"from": "knowledge:/bio", "take": "keep"}])
    assert r.status_code == 422, r.text
    assert mentioned(client, "/entities/charles-babbage") == {"/bio"}


def test_an_edit_that_keeps_ecma_262_written_with_a_hyphen_keeps_its_mention(client, repo):
    """The extractor names the entity "ECMA 262" from a text that writes "ECMA-262": an edit
    on a branch that keeps that spelling keeps the mention (restamped), on the branch and
    through the merge; nothing is left to decide."""
    put(client, "/spec", SPEC)
    extract(client, "/spec")
    assert client.post(f"{API}/branches", json={"name": "agent/edit"}).status_code == 201
    put(client, "/spec", SPEC + " It is revised every year.", branch="agent/edit")
    assert mentioned(client, "/entities/ecma-262", "agent/edit") == {"/spec"}
    assert "orphan" not in props(client, "/entities/ecma-262", "agent/edit")
    r = client.post(f"{API}/branches/agent/edit/merge", json={"into": "main"})
    assert r.status_code == 200, r.text
    assert r.json()["derived_writes"] == []  # the branch restamped its edges itself
    assert mentioned(client, "/entities/ecma-262") == {"/spec"}


def test_a_merge_keeps_a_mention_of_ecma_262_the_target_extracted_after_the_fork(client, repo):
    """main extracts after the branch forked; the branch's edit keeps "ECMA-262": the merge
    restamps main's mention of "ECMA 262" (a name its text still says), it is no decision."""
    put(client, "/spec", SPEC)
    assert client.post(f"{API}/branches", json={"name": "agent/late"}).status_code == 201
    found = {e["path"] for e in extract(client, "/spec")["entities"]}
    put(client, "/spec", SPEC + " See also ECMA-402.", branch="agent/late")
    dry = merge(client, "agent/late", dry_run=True)
    assert dry.status_code == 200, dry.text
    writes = dry.json()["derived_writes"]
    assert {(w["kind"], w["from"].partition(":")[2]) for w in writes} == {("restamped", p) for p in found}
    done = merge(client, "agent/late", if_plan=dry.json()["plan"])
    assert done.status_code == 200, done.text
    assert done.json()["derived_writes"] == writes
    assert mentioned(client, "/entities/ecma-262") == {"/spec"}
    assert "orphan" not in props(client, "/entities/ecma-262")


def test_with_an_llm_the_queued_extraction_is_in_the_dry_run_and_the_merge(client, repo, services):
    """With an LLM configured, lineage queues ``extract-entities`` of a merged text instead of
    deciding: the dry run lists it, the merge queues exactly that (and the job runs after)."""
    import json

    from sqlalchemy import select

    from kg.providers.llm import ScriptedLLM
    from kg.store.models import FunctionJob

    _late_extraction(client)
    llm = services.llm = ScriptedLLM(
        [json.dumps({"entities": [{"name": "Ada Lovelace", "type": "person"}], "relations": []})])
    dry = merge(client, "agent/late", dry_run=True)
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["derived_writes"] == [{"kind": "queued", "workspace": "knowledge", "path": "/bio"}]
    assert plan["derived"] == {"unlinked": 0, "restamped": 0, "orphaned": 0, "stale": 0, "queued": 1}
    assert llm.calls == []
    done = merge(client, "agent/late", if_plan=plan["plan"])
    assert done.status_code == 200, done.text
    assert (done.json()["derived"], done.json()["derived_writes"]) == (plan["derived"], plan["derived_writes"])
    with services.db.read() as session:
        jobs = session.execute(select(FunctionJob.function, FunctionJob.input)).all()
    assert [tuple(j) for j in jobs] == [("extract-entities", {"workspace": "knowledge", "path": "/bio"})]
