"""Issue 16: ``GET /api/repos`` is paginated like the prefix listing of nodes (``limit``,
``cursor``, ``next_cursor`` null on the last page), and the console pages through it."""

from __future__ import annotations

from kg.context import OPERATOR, run
from kg.ops import repos as repo_ops

NAMES = ["a1", "a10", "a2", "b", "c9", "d", "0"]  # by name, as sorted()


def make(client, names):
    for name in names:
        assert client.post("/api/repos", json={"name": name}).status_code == 201, name


def pages(client, limit):
    seen, cursor, calls = [], None, 0
    while True:
        params = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        r = client.get("/api/repos", params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"repos", "next_cursor"} and len(body["repos"]) <= limit
        seen += [x["name"] for x in body["repos"]]
        calls += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return seen, calls


def test_repos_are_listed_by_name_page_after_page_with_no_gap_or_repeat(client):
    make(client, NAMES)
    wanted = sorted(NAMES)
    for limit in (1, 2, 3, 6, 7, 100):
        seen, calls = pages(client, limit)
        assert seen == wanted, limit
        assert calls == max(1, -(-len(wanted) // limit)), limit  # a full last page says null, not one more call


def test_the_first_page_is_the_default_and_the_last_says_null(client):
    make(client, ["acme", "beta"])
    body = client.get("/api/repos").json()
    assert [x["name"] for x in body["repos"]] == ["acme", "beta"] and body["next_cursor"] is None
    first = client.get("/api/repos", params={"limit": 1}).json()
    assert [x["name"] for x in first["repos"]] == ["acme"] and isinstance(first["next_cursor"], str)


def test_a_repository_created_between_pages_after_the_cursor_is_on_a_later_page(client):
    make(client, ["a", "c"])
    first = client.get("/api/repos", params={"limit": 1}).json()
    make(client, ["b"])
    rest = client.get("/api/repos", params={"limit": 10, "cursor": first["next_cursor"]}).json()
    assert [x["name"] for x in rest["repos"]] == ["b", "c"]


def test_a_bad_cursor_or_limit_or_an_unknown_parameter_is_422(client):
    make(client, ["acme"])
    for params in ({"cursor": "!!not base64!!"}, {"cursor": "Lw"}, {"cursor": ""}, {"limit": 0},
                   {"limit": 10_001}, {"limit": "x"}, {"page": "2"}):
        r = client.get("/api/repos", params=params)
        assert r.status_code == 422, (params, r.text)
        assert set(r.json()["error"]) == {"code", "message", "details"}
    assert client.get("/api/repos", params={"offset": "1"}).json()["error"]["details"]["unknown"] == ["offset"]


def test_the_use_case_pages_and_all_repositories_pages_through(services):
    for name in ("r1", "r2", "r3"):
        run(services, OPERATOR, repo_ops.create_repository, name)
    page = repo_ops.list_repositories(services, OPERATOR, limit=2)
    assert [r.name for r in page.repos] == ["r1", "r2"] and page.next_cursor is not None
    page = repo_ops.list_repositories(services, OPERATOR, limit=2, cursor=page.next_cursor)
    assert [r.name for r in page.repos] == ["r3"] and page.next_cursor is None
    every = repo_ops.all_repositories(services, OPERATOR)
    assert [r.name for r in every.repos] == ["r1", "r2", "r3"] and every.next_cursor is None
