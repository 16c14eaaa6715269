"""The review screen's text diffs on SQLite and PostgreSQL: a changed string property is a
word-level inline diff (long unchanged stretches collapsed, every token escaped), and the
conflict panel cuts long values (the whole value in a <details>)."""

from __future__ import annotations

import re

from tests.ui.conftest import ConsoleClient, bearer

BASE = "/api/repos/acme"
NODES = f"{BASE}/workspaces/kb/nodes"
REVIEW = "/ui/r/acme/review?branch=agent/s1"
MERGE = "/ui/r/acme/review/merge"


def _put(console: ConsoleClient, path: str, props: dict, branch: str = "main") -> None:
    r = console.http.put(f"{NODES}{path}", params={"branch": branch},
                         json={"node_type": "kb:Doc", "properties": props}, headers=bearer(console.admin))
    assert r.status_code in (200, 201), r.text


def _start(console: ConsoleClient, props: dict) -> None:
    """acme/kb with /doc holding ``props`` on main, and the branch agent/s1 from main."""
    api = {"headers": bearer(console.admin)}
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post(f"{BASE}/workspaces", json={"name": "kb"}, **api).status_code == 201
    _put(console, "/doc", props)
    r = console.http.post(f"{BASE}/branches", json={"name": "agent/s1", "from": "main"}, **api)
    assert r.status_code == 201, r.text


def _body(word: str) -> str:
    """About 23 KB of text over many lines, with ``word`` in its middle."""
    paragraph = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.\n"
    return paragraph * 145 + f"The decision is {word} for now.\n" + paragraph * 145


def _row(html: str, key: str) -> str:
    return html.split(f'data-key="{key}"')[1].split("</tr>")[0]


def test_a_one_word_change_in_a_long_text_is_a_short_word_diff(console):
    old, new = _body("deferred"), _body("accepted")
    assert len(old) > 23_000
    _start(console, {"title": "D", "body": old})
    _put(console, "/doc", {"title": "D", "body": new}, branch="agent/s1")
    r = console.get(REVIEW)
    assert r.status_code == 200, r.text
    row = _row(r.text, "body")
    assert 'class="textdiff"' in row
    old_cell, new_cell = row.split('class="text-diff new-value"')
    assert '<del class="old">deferred</del>' in old_cell and "<ins" not in old_cell
    assert '<ins class="new">accepted</ins>' in new_cell and "<del" not in new_cell
    assert "The decision is " in row and " for now." in row  # context around the change
    assert re.search(r"… [\d,]+ words …", row)  # the long unchanged stretches collapsed
    assert "\\n" not in row  # not JSON strings: newlines are line breaks
    assert len(row) < 3_000
    assert len(r.text) < 20_000


def test_a_short_string_change_shows_both_words(console):
    _start(console, {"status": "draft"})
    _put(console, "/doc", {"status": "published"}, branch="agent/s1")
    row = _row(console.get(REVIEW).text, "status")
    old_cell, new_cell = row.split('class="text-diff new-value"')
    assert '<del class="old">draft</del>' in old_cell and '<ins class="new">published</ins>' in new_cell
    assert "skip" not in row


def test_a_script_inside_a_diffed_string_is_escaped(console):
    _start(console, {"body": "safe text here"})
    _put(console, "/doc", {"body": "safe <script>alert(1)</script> text & here"}, branch="agent/s1")
    html = console.get(REVIEW).text
    assert "<script>alert" not in html
    row = _row(html, "body")
    assert "&lt;script&gt;" in row and "&amp;" in row
    assert '<ins class="new">' in row


def test_a_non_string_change_keeps_the_old_and_new_json(console):
    _start(console, {"n": 1})
    _put(console, "/doc", {"n": 2}, branch="agent/s1")
    row = _row(console.get(REVIEW).text, "n")
    assert '<pre class="old">1</pre>' in row and '<pre class="new">2</pre>' in row


def test_the_conflict_panel_cuts_long_values_with_the_whole_value_in_details(console):
    _start(console, {"body": _body("deferred")})
    _put(console, "/doc", {"body": _body("accepted")}, branch="agent/s1")
    _put(console, "/doc", {"body": _body("rejected")})
    r = console.post(MERGE, {"branch": "agent/s1", "into": "main", "dry_run": "1"}, headers={"HX-Request": "true"})
    assert r.status_code == 409, r.text
    for side, after in (("base", "ours"), ("ours", "theirs"), ("theirs", "pick")):
        cell = r.text.split(f'<div class="{side}">')[1].split(f'<div class="{after}">')[0]
        shown = cell.split("<details")[0]
        assert len(shown) < 3_000, side
        assert '<details class="whole">' in cell and "characters)</summary>" in cell
    assert "rejected" in r.text.split('<div class="ours">')[1]
