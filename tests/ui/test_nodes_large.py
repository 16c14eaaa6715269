"""A large node on the node page, on SQLite and PostgreSQL: long values cut (the whole value
named in the API), no edit form when the properties could not be posted back, chunks bounded."""

from __future__ import annotations

import re

from api.ui.core import MAX_FIELD_CHARS
from tests.ui.conftest import ConsoleClient, bearer

BIG = 5 * 1024 * 1024
NODE = "/ui/r/acme/node?branch=main&workspace=kb&path=/big"


def _start(console: ConsoleClient, props: dict) -> None:
    api = {"headers": bearer(console.admin)}
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "kb"}, **api).status_code == 201
    r = console.http.put("/api/repos/acme/workspaces/kb/nodes/big", params={"branch": "main"},
                         json={"node_type": "kb:Doc", "properties": props}, **api)
    assert r.status_code == 201, r.text


def test_a_5_mb_property_is_cut_and_the_node_is_not_editable_in_the_console(console):
    text = ("All work and no play makes Jack a dull boy. " * (BIG // 44 + 1))[:BIG]
    _start(console, {"title": "Big <b>", "body": text})
    r = console.get(NODE)
    assert r.status_code == 200, r.text
    assert len(r.content) < 200_000
    row = r.text.split('data-key="body"')[1].split("</tr>")[0]
    assert ("… 5,242,880 characters: the whole value is in "
            "<code>GET /api/repos/acme/workspaces/kb/nodes/big?branch=main</code>") in row
    assert 'data-key="title"' in r.text and "Big &lt;b&gt;" in r.text  # short values whole, escaped
    assert "<textarea" not in r.text and 'id="edit-form"' not in r.text
    edit = r.text.split('id="edit"')[1]
    assert "too large to edit in the console" in edit
    assert "PUT /api/repos/acme/workspaces/kb/nodes/big?branch=main" in edit
    assert 'id="delete-form"' in edit  # deleting it is still offered
    chunks = r.text.split('id="chunks"')[1].split("</section>")[0]  # chunked inline: thousands of chunks
    assert len(re.findall(r"<tr data-index=", chunks)) == 100
    assert re.search(r'id="chunks-more">The first 100 of [\d]+ chunks\.', chunks)


def test_a_node_just_under_the_limit_keeps_its_edit_form(console):
    _start(console, {"body": "x" * (MAX_FIELD_CHARS // 2)})
    r = console.get(NODE)
    assert r.status_code == 200
    assert 'id="edit-properties"' in r.text and "too large to edit" not in r.text
    row = r.text.split('data-key="body"')[1].split("</tr>")[0]
    assert "500,000 characters: the whole value is in" in row and len(row) < 5_000


def test_properties_longer_than_the_form_limit_are_not_editable(console):
    _start(console, {"a": "y" * (MAX_FIELD_CHARS // 2), "b": "z" * (MAX_FIELD_CHARS // 2 + 10)})
    r = console.get(NODE)
    assert r.status_code == 200
    assert "<textarea" not in r.text and "too large to edit in the console" in r.text
