"""The branch review screen on SQLite and PostgreSQL: the diff by workspace and path with old
and new values, the dry run, the conflict panel, resolving and merging, and refusals (issue 14)."""

from __future__ import annotations

import re

import pytest

from tests.ui.conftest import ConsoleClient, bearer, new_key

BASE = "/api/repos/acme"
NODES = f"{BASE}/workspaces/kb/nodes"
XSS = "<script>alert(1)</script>"
REVIEW = "/ui/r/acme/review?branch=agent/s1"
MERGE = "/ui/r/acme/review/merge"


def _api(console: ConsoleClient) -> dict:
    return {"headers": bearer(console.admin)}


def _put(console: ConsoleClient, path: str, props: dict, branch: str = "main") -> None:
    r = console.http.put(f"{NODES}{path}", params={"branch": branch},
                         json={"node_type": "kb:Doc", "properties": props}, **_api(console))
    assert r.status_code in (200, 201), r.text


def _relate(console: ConsoleClient, a: str, b: str, rel_type: str, weight: float | None = None,
            branch: str = "main") -> None:
    body = {"from": f"kb:{a}", "to": f"kb:{b}", "type": rel_type, **({"weight": weight} if weight else {})}
    r = console.http.post(f"{BASE}/relations", params={"branch": branch}, json=body, **_api(console))
    assert r.status_code in (200, 201), r.text


def _props(console: ConsoleClient, path: str, branch: str = "main") -> dict | None:
    r = console.http.get(f"{NODES}{path}", params={"branch": branch}, **_api(console))
    return r.json()["properties"] if r.status_code == 200 else None


def _head(console: ConsoleClient) -> int:
    return console.http.get(BASE, **_api(console)).json()["head_revision"]


def _seed(console: ConsoleClient, *, conflict: bool = False) -> None:
    """main: /a, /b, /c with a -cites(1)-> b and b -old-> a; agent/s1 changes /a's status,
    re-weights cites to 2, removes old, adds /n (named with a script) and a -new-> n, deletes
    /c. With ``conflict``, main then changes /a's status too."""
    assert console.http.post("/api/repos", json={"name": "acme"}, **_api(console)).status_code == 201
    assert console.http.post(f"{BASE}/workspaces", json={"name": "kb"}, **_api(console)).status_code == 201
    assert console.http.post(f"{BASE}/workspaces", json={"name": "notes"}, **_api(console)).status_code == 201
    _put(console, "/a", {"title": "T", "status": "draft"})
    _put(console, "/b", {"title": "B"})
    _put(console, "/c", {"title": "C"})
    _relate(console, "/a", "/b", "cites", 1.0)
    _relate(console, "/b", "/a", "old")
    r = console.http.post(f"{BASE}/branches", json={"name": "agent/s1", "from": "main"}, **_api(console))
    assert r.status_code == 201, r.text
    _put(console, "/a", {"title": "T", "status": "published"}, branch="agent/s1")
    _put(console, "/n", {"title": XSS}, branch="agent/s1")
    r = console.http.put("/api/repos/acme/workspaces/notes/nodes/memo", params={"branch": "agent/s1"},
                         json={"node_type": "kb:Note", "properties": {"text": "hello"}}, **_api(console))
    assert r.status_code == 201, r.text
    _relate(console, "/a", "/b", "cites", 2.0, branch="agent/s1")
    _relate(console, "/a", "/n", "new", branch="agent/s1")
    r = console.http.delete(f"{BASE}/relations", params={"branch": "agent/s1", "from": "kb:/b", "to": "kb:/a",
                                                          "type": "old"}, **_api(console))
    assert r.status_code == 200, r.text
    r = console.http.delete(f"{NODES}/c", params={"branch": "agent/s1"}, **_api(console))
    assert r.status_code == 200, r.text
    if conflict:
        _put(console, "/a", {"title": "T", "status": "archived"})


def _change(html: str, path: str) -> str:
    """The HTML of one path's change block."""
    start = html.index(f'data-path="{path}" data-kind=')
    end = html.find('<div class="change ', start)
    return html[start:end if end > 0 else len(html)]


def _merge(console: ConsoleClient, fields: dict, **kw):
    return console.post(MERGE, {"branch": "agent/s1", "into": "main", **fields}, **kw)


def _picks(take_a: str, value: str = "") -> dict:
    return {"res": "0", "res-0-kind": "node", "res-0-workspace": "kb", "res-0-path": "/a",
            "res-0-take": take_a, "res-0-value": value}


def test_review_groups_the_diff_by_workspace_and_path_with_old_and_new_values(console):
    _seed(console)
    r = console.get(REVIEW)
    assert r.status_code == 200, r.text
    html = r.text
    # workspaces in order, each with its paths in order
    assert html.index('data-workspace="kb"') < html.index('data-workspace="notes"')
    kb = html.split('data-workspace="kb"')[1].split('data-workspace="notes"')[0]
    assert [m for m in re.findall(r'data-path="([^"]+)" data-kind="([^"]+)"', kb)] == [
        ("/a", "modified"), ("/b", "relations"), ("/c", "deleted"), ("/n", "added")]
    notes = html.split('data-workspace="notes"')[1]
    assert re.findall(r'data-path="([^"]+)" data-kind="([^"]+)"', notes) == [("/memo", "added")]
    a = _change(html, "/a")
    status = a.split('data-key="status"')[1].split("</tr>")[0]
    # a word diff, side by side: the old word in the Old column, the new one in the New column
    old_cell, new_cell = status.split('class="text-diff new-value"')
    assert '<del class="old">draft</del>' in old_cell and '<ins class="new">published</ins>' in new_cell
    assert 'data-key="title"' not in a  # unchanged property: not listed
    c = _change(html, "/c")
    assert '<pre class="old">&#34;C&#34;</pre>' in c  # a deleted node's old values
    # node links to the node page on the branch (a deleted node's on the target)
    assert 'href="/ui/r/acme/node?branch=agent%2Fs1&amp;workspace=kb&amp;path=%2Fa"' in a
    assert 'href="/ui/r/acme/node?branch=main&amp;workspace=kb&amp;path=%2Fc"' in c
    # header: parent, ahead / behind, the protected target
    info = html.split('id="branch-info"')[1].split("</div>")[0]
    assert '<dd class="parent">main</dd>' in info
    assert '<dd class="num ahead">7</dd>' in info and '<dd class="num behind">0</dd>' in info
    assert 'class="badge protected">protected</span>' in info  # main is protected


def test_review_shows_relations_added_removed_and_reweighted(console):
    _seed(console)
    html = console.get(REVIEW).text
    a = _change(html, "/a")
    cites = a.split('data-type="cites"')[1].split("</tr>")[0]
    assert 'data-kind="reweighted"' in cites
    assert '<span class="old">1.0</span> → <span class="new">2.0</span>' in cites
    new = a.split('data-type="new"')[1].split("</tr>")[0]
    assert 'data-to="kb:/n" data-kind="added"' in new
    b = _change(html, "/b")
    old = b.split('data-type="old"')[1].split("</tr>")[0]
    assert 'data-to="kb:/a" data-kind="removed"' in old
    summary = html.split('id="diff-summary"')[1].split("</p>")[0]
    assert "2 added</span>" in summary and "1 modified</span>" in summary and "1 deleted</span>" in summary
    assert "1 removed</span>" in summary and "1 changed</span>" in summary


def test_every_value_from_the_store_is_escaped(console):
    _seed(console, conflict=True)
    html = console.get(REVIEW).text
    assert XSS not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    r = _merge(console, {"dry_run": "1"})
    assert r.status_code == 409
    assert "<script>alert" not in r.text


def test_dry_run_shows_what_would_be_applied_and_writes_nothing(console):
    _seed(console)
    head = _head(console)
    html = console.get(REVIEW).text
    assert 'id="dry-run"' in html and 'id="merge"' in html
    r = _merge(console, {"dry_run": "1"}, headers={"HX-Request": "true"})
    assert r.status_code == 200, r.text
    assert "<html" not in r.text  # an htmx fragment
    assert "would apply" in r.text
    assert "2 added, 1 modified, 1 deleted nodes" in r.text
    assert "2 upserted, 1 removed relations" in r.text
    assert 'id="merge-button"' in r.text
    assert _head(console) == head
    assert _props(console, "/a") == {"title": "T", "status": "draft"}
    full = _merge(console, {"dry_run": "1"})  # without htmx: a whole page
    assert full.status_code == 200 and "<html" in full.text and "would apply" in full.text


def test_merge_without_conflicts_applies_and_shows_the_result(console):
    _seed(console)
    r = _merge(console, {"message": "reviewed by a person"})
    assert r.status_code == 200, r.text
    revision = int(re.search(r'class="revision">r(\d+)<', r.text).group(1))
    assert revision == _head(console)
    assert 'id="to-branches" href="/ui/r/acme/branches"' in r.text
    assert _props(console, "/a") == {"title": "T", "status": "published"}
    assert _props(console, "/n") == {"title": XSS}
    assert _props(console, "/c") is None
    log = console.http.get(f"{BASE}/log", params={"branch": "main"}, **_api(console)).json()["revisions"]
    assert log[0]["revision"] == revision and log[0]["message"] == "reviewed by a person"


def _lineage_seed(console: ConsoleClient) -> None:
    """Entities extracted on main after the fork; the branch edits the text and drops one."""
    assert console.http.post("/api/repos", json={"name": "acme"}, **_api(console)).status_code == 201
    assert console.http.post(f"{BASE}/workspaces", json={"name": "kb"}, **_api(console)).status_code == 201
    _put(console, "/bio", {"text": "Ada Lovelace worked with Charles Babbage."})
    r = console.http.post(f"{BASE}/branches", json={"name": "agent/s1", "from": "main"}, **_api(console))
    assert r.status_code == 201, r.text
    r = console.http.post("/api/functions/acme/extract-entities/invoke",
                          json={"input": {"workspace": "kb", "path": "/bio"}}, **_api(console))
    assert r.status_code == 200, r.text
    _put(console, "/bio", {"text": "Ada Lovelace wrote the first program."}, branch="agent/s1")


DROP_BABBAGE = {"res": "0", "res-0-kind": "lineage", "res-0-from": "kb:/entities/charles-babbage",
                "res-0-to": "kb:/bio", "res-0-type": "mentioned_in", "res-0-take": "drop"}


def test_the_merge_result_says_what_lineage_recomputed(console):
    """Entities extracted on main after the fork, an edit on the branch that drops one: the
    mention main asserted is the reviewer's to drop; the result panel then names the unlinked
    mention, the restamped one and the orphaned entity."""
    _lineage_seed(console)
    refused = _merge(console, {})
    assert refused.status_code == 409, refused.text
    (fieldset,) = re.findall(r'<fieldset class="conflict[^"]*" data-kind="lineage".*?</fieldset>', refused.text, re.S)
    assert "kb:/entities/charles-babbage" in fieldset and "kb:/bio" in fieldset
    assert [v for v in re.findall(r'name="res-0-take" value="(\w+)"', fieldset)] == ["keep", "drop"]
    assert "orphan" not in _props(console, "/entities/charles-babbage")  # nothing written
    r = _merge(console, DROP_BABBAGE)
    assert r.status_code == 200, r.text
    (line,) = re.findall(r'<p class="derived small"[^>]*>(.*?)</p>', r.text)
    assert line == "Lineage: 1 mention(s) unlinked, 1 mention(s) restamped, 1 entity(ies) flagged orphan."
    assert _props(console, "/entities/charles-babbage")["orphan"] is True


def test_the_review_page_lists_the_lineage_decisions_and_the_dry_run_the_derived_writes(console):
    """The review page shows, beside the diff, the mentions the merge leaves to the reviewer;
    the dry run with a pick lists every derived write, and the merge from it writes them."""
    _lineage_seed(console)
    page = console.get(REVIEW)
    assert page.status_code == 200, page.text
    (section,) = re.findall(r'<section id="lineage".*?</section>', page.text, re.S)
    assert re.findall(r'<li data-from="([^"]+)" data-to="([^"]+)">', section) == [
        ("kb:/entities/charles-babbage", "kb:/bio")]
    dry = _merge(console, {"dry_run": "1", **DROP_BABBAGE})
    assert dry.status_code == 200, dry.text
    listed = re.findall(r'<li data-kind="(\w+)">.*?<span class="mono">([^<]+)</span>', dry.text, re.S)
    assert listed == [("unlinked", "kb:/entities/charles-babbage"), ("restamped", "kb:/entities/ada-lovelace"),
                      ("orphaned", "kb:/entities/charles-babbage")]
    (plan,) = re.findall(r'name="plan" value="([^"]+)"', dry.text.split('class="do-merge"')[1])
    r = _merge(console, {"plan": plan, **DROP_BABBAGE})
    assert r.status_code == 200, r.text
    assert _props(console, "/entities/charles-babbage")["orphan"] is True


def test_the_review_page_says_when_a_merge_writes_no_derived_record(console):
    _seed(console)
    page = console.get(REVIEW)
    assert page.status_code == 200, page.text
    assert 'id="no-derived"' in page.text and 'class="lineage-decisions' not in page.text


def test_a_merge_that_derives_nothing_shows_no_lineage_line(console):
    _seed(console)
    r = _merge(console, {})
    assert r.status_code == 200, r.text
    assert 'class="derived' not in r.text


def test_conflict_panel_shows_base_ours_and_theirs_with_a_pick_each(console):
    _seed(console, conflict=True)
    r = _merge(console, {"dry_run": "1"}, headers={"HX-Request": "true"})
    assert r.status_code == 409
    panel = r.text
    assert "1 conflict(s) to resolve before merging" in panel
    (fieldset,) = re.findall(r'<fieldset class="conflict open" data-kind="node".*?</fieldset>', panel, re.S)
    assert 'data-path="/a" data-workspace="kb"' in fieldset
    grid = fieldset.split('class="grid3"')[1]
    base, ours, theirs = (grid.split(f'<div class="{side}">')[1].split("</pre>")[0]
                          for side in ("base", "ours", "theirs"))
    assert "&#34;draft&#34;" in base and "&#34;archived&#34;" in ours and "&#34;published&#34;" in theirs
    keys = fieldset.split('data-key="status"')[1].split("</tr>")[0]
    assert re.findall(r"<code>(.*?)</code>", keys) == ["draft", "archived", "published"]
    for take in ("ours", "theirs", "edit"):
        assert f'name="res-0-take" value="{take}"' in fieldset
    # the edit box starts with theirs' properties as JSON
    box = fieldset.split('name="res-0-value"')[1].split("</textarea>")[0]
    assert "&#34;status&#34;: &#34;published&#34;" in box
    assert 'id="merge-button"' in panel and 'id="dry-run-picks"' in panel


@pytest.mark.parametrize(("take", "value", "expected"), [
    ("ours", "", {"title": "T", "status": "archived"}),
    ("theirs", "", {"title": "T", "status": "published"}),
    ("edit", '{"title": "T2", "status": "reviewed"}', {"title": "T2", "status": "reviewed"}),
])
def test_resolving_the_conflict_then_merging_updates_main_exactly(console, take, value, expected):
    _seed(console, conflict=True)
    dry = _merge(console, {"dry_run": "1", **_picks(take, value)}, headers={"HX-Request": "true"})
    assert dry.status_code == 200, dry.text
    assert "would apply" in dry.text
    # the preview carries the pick to its Merge form
    assert f'name="res-0-take" value="{take}"' in dry.text
    r = _merge(console, {"dry_run": "0", "message": "resolved", **_picks(take, value)},
               headers={"HX-Request": "true"})
    assert r.status_code == 200, r.text
    assert "Merged" in r.text and "as revision" in r.text
    assert _props(console, "/a") == expected
    assert _props(console, "/n") == {"title": XSS}  # the rest of the branch came along
    assert _props(console, "/c") is None


def test_an_invalid_json_edit_is_a_clear_422_and_nothing_is_written(console):
    _seed(console, conflict=True)
    head = _head(console)
    for bad, says in (('{"title": ', "is not valid JSON"), ('["a list"]', "must be a JSON object")):
        r = _merge(console, {"dry_run": "0", **_picks("edit", bad)}, headers={"HX-Request": "true"})
        assert r.status_code == 422, r.text
        assert f"the edit of kb:/a {says}" in r.text
        # the panel stays, with what the person typed
        assert 'name="res-0-take" value="edit" required' not in r.text
        assert 'value="edit" checked' in r.text
        assert bad.replace('"', "&#34;") in r.text
    assert _head(console) == head
    assert _props(console, "/a") == {"title": "T", "status": "archived"}


def test_merge_without_picks_is_a_409_conflict_panel_and_writes_nothing(console):
    _seed(console, conflict=True)
    head = _head(console)
    r = _merge(console, {"dry_run": "0"})
    assert r.status_code == 409 and "<html" in r.text and 'class="conflict open"' in r.text
    assert _head(console) == head


def test_a_merge_post_without_the_csrf_token_is_refused_and_changes_nothing(console):
    _seed(console)
    head = _head(console)
    for sent in ({}, {"csrf_token": "forged"}):
        r = console.post(MERGE, {"branch": "agent/s1", "into": "main", **sent}, csrf=False)
        assert r.status_code == 403
        assert "CSRF" in r.text
    assert _head(console) == head
    assert _props(console, "/a") == {"title": "T", "status": "draft"}


def test_a_read_only_key_sees_no_merge_button_and_is_refused_if_it_posts(console):
    _seed(console)
    head = _head(console)
    reader = new_key(console.services, "reader", {"repo": "acme", "actions": ["read"]})
    console.sign_in(reader)
    r = console.get(REVIEW)
    assert r.status_code == 200 and 'data-path="/a"' in r.text
    assert 'id="dry-run"' not in r.text and 'id="merge-button"' not in r.text
    assert 'id="no-merge"' in r.text
    r = _merge(console, {"message": "sneaky"})
    assert r.status_code == 403 and "forbidden" in r.text
    assert _head(console) == head
    assert _props(console, "/a") == {"title": "T", "status": "draft"}


def test_a_key_with_merge_on_every_branch_may_not_merge_into_protected_main(console):
    _seed(console)
    # a grant on branches "*" does not name main, which KG_PROTECTED_BRANCHES protects
    agent = new_key(console.services, "agent", {"repo": "acme", "branches": ["*"],
                                                 "actions": ["read", "write", "merge"]})
    console.sign_in(agent)
    assert 'id="dry-run"' not in console.get(REVIEW).text
    assert _merge(console, {}).status_code == 403


def test_unknown_branch_or_repository_is_an_html_404(console):
    _seed(console)
    for url in ("/ui/r/acme/review?branch=agent/nope", "/ui/r/nope/review?branch=main"):
        r = console.get(url)
        assert r.status_code == 404, url
        assert r.headers["content-type"].startswith("text/html") and "<html" in r.text
    r = _merge(console, {"dry_run": "1", "branch": "agent/nope"})
    assert r.status_code == 404 and "<html" in r.text


def test_bad_input_is_never_a_5xx(console):
    _seed(console)
    assert console.get("/ui/r/acme/review").status_code == 422  # no branch
    r = console.get("/ui/r/acme/review?branch=main")
    assert r.status_code == 200 and "has no parent" in r.text
    assert console.get("/ui/r/acme/review?branch=agent/s1&into=agent/s1").status_code == 422
    assert _merge(console, {"res": "0", "res-0-kind": "bogus"}).status_code == 422
    assert _merge(console, {"res": "0", "res-0-kind": "node", "res-0-workspace": "kb", "res-0-path": "/zzz",
                            "res-0-take": "maybe"}).status_code == 422
    r = console.post(MERGE, {"into": "main"})
    assert r.status_code == 422 and "branch" in r.text


def test_a_relation_conflict_offers_ours_or_theirs_only_and_merges_the_pick(console):
    _seed(console)
    _relate(console, "/a", "/b", "cites", 3.0)  # main re-weights the edge the branch re-weighted to 2
    r = _merge(console, {"dry_run": "1"}, headers={"HX-Request": "true"})
    assert r.status_code == 409, r.text
    (fieldset,) = re.findall(r'<fieldset class="conflict open" data-kind="relation".*?</fieldset>', r.text, re.S)
    assert 'data-type="cites"' in fieldset and "kb:/a" in fieldset and "kb:/b" in fieldset
    grid = fieldset.split('class="grid3"')[1]
    weights = [grid.split(f'<div class="{side}">')[1].split("</strong>")[0].rsplit(">", 1)[1]
               for side in ("base", "ours", "theirs")]
    assert weights == ["1.0", "3.0", "2.0"]
    assert 'value="ours"' in fieldset and 'value="theirs"' in fieldset
    assert 'value="edit"' not in fieldset and "<textarea" not in fieldset
    picks = {"res": "0", "res-0-kind": "relation", "res-0-from": "kb:/a", "res-0-to": "kb:/b",
             "res-0-type": "cites", "res-0-take": "theirs"}
    r = _merge(console, {"dry_run": "0", **picks}, headers={"HX-Request": "true"})
    assert r.status_code == 200, r.text
    out = console.http.get(f"{BASE}/neighbors", params={"node": "kb:/a", "direction": "OUT"}, **_api(console))
    assert sorted((n["relation_type"], n["path"], n["weight"]) for n in out.json()["neighbors"]) == [
        ("cites", "/b", 2.0), ("new", "/n", None)]


def test_a_partial_pick_keeps_every_conflict_on_the_panel_with_the_picks_made(console):
    _seed(console, conflict=True)
    _put(console, "/b", {"title": "B on main"})
    _put(console, "/b", {"title": "B on the branch"}, branch="agent/s1")
    r = _merge(console, {"dry_run": "1", **_picks("theirs")}, headers={"HX-Request": "true"})
    assert r.status_code == 409
    assert "1 conflict(s) left unresolved" in r.text
    assert re.findall(r'<fieldset class="conflict (\w+)" data-kind="node" data-index="\d"\s+data-path="([^"]+)"',
                      r.text) == [("picked", "/a"), ("open", "/b")]
    assert 'name="res-0-take" value="theirs" checked' in r.text


def test_lineage_decisions_left_after_the_merges_own_conflicts_are_listed_with_them(console):
    """Both sides rewrote /bio (a node conflict); once it is resolved 'theirs', main's mention
    of Charles Babbage is a lineage decision: the panel lists both, the pick made and the
    decision open; dropping it merges."""
    _lineage_seed(console)
    _put(console, "/bio", {"text": "Ada Lovelace and Charles Babbage, again."})  # main, after the fork
    node = {"res": "0", "res-0-kind": "node", "res-0-workspace": "kb", "res-0-path": "/bio",
            "res-0-take": "theirs", "res-0-value": ""}
    r = _merge(console, {"dry_run": "1", **node})
    assert r.status_code == 409, r.text
    rows = re.findall(r'<fieldset class="conflict (open|picked)" data-kind="(\w+)"', r.text)
    assert rows == [("picked", "node"), ("open", "lineage")]
    both = {**node, "res": ["0", "1"], "res-1-kind": "lineage", "res-1-from": "kb:/entities/charles-babbage",
            "res-1-to": "kb:/bio", "res-1-type": "mentioned_in", "res-1-take": "drop"}
    done = _merge(console, both)
    assert done.status_code == 200, done.text
    assert _props(console, "/entities/charles-babbage")["orphan"] is True
