"""The search and ask playgrounds on SQLite and PostgreSQL (issue 14): per-leg ranks and scores
of a seeded corpus, two branches side by side, an answer with citations linking to node pages
and its attempts, escaping, and bad input as a 422 page."""

from __future__ import annotations

import html
import re

from tests.ui.conftest import ConsoleClient, bearer, new_key

DOCS = {
    "/rotate": ("Rotating API keys", "To rotate an API key open settings and press rotate key. Old keys expire."),
    "/billing": ("Billing", "Invoices are sent monthly. Payment by card or bank transfer."),
    "/deploy": ("Deploy failures", "A deploy fails when the build cache is stale. Clear the cache and retry."),
    "/dividends": ("Dividends", "The board approved a quarterly dividend of 40 cents per share payable in March."),
}
_ROW = re.compile(r'<tr class="hit" data-path="([^"]+)".*?</tr>', re.S)


def _put(console: ConsoleClient, path: str, title: str, content: str, branch: str = "main",
         workspace: str = "kb") -> None:
    r = console.http.put(f"/api/repos/acme/workspaces/{workspace}/nodes{path}", params={"branch": branch},
                         json={"node_type": "kb:Doc", "properties": {"title": title, "content": content}},
                         headers=bearer(console.admin))
    assert r.status_code in (200, 201), r.text


def seed(console: ConsoleClient) -> None:
    api = {"headers": bearer(console.admin)}
    assert console.http.post("/api/repos", json={"name": "acme"}, **api).status_code == 201
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "kb"}, **api).status_code == 201
    for path, (title, body) in DOCS.items():
        _put(console, path, title, body)


def api_search(console: ConsoleClient, body: dict, branch: str = "main") -> list[dict]:
    r = console.http.post("/api/repos/acme/search", params={"branch": branch}, json=body,
                          headers=bearer(console.admin))
    assert r.status_code == 200, r.text
    return r.json()["results"]


def cells(row: str) -> dict[str, str]:
    """The text of a hit row's cells by class (rank, node, score, fulltext-rank, ...)."""
    out = {}
    for cls, text in re.findall(r'<td class="[^"]*?\b(rank|node|score|fulltext-rank|vector-rank|distance|passage)\b'
                                r'[^"]*">(.*?)</td>', row, re.S):
        out[cls] = " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())
    return out


def columns(page: str) -> dict[str, list[str]]:
    """The hit paths of each branch's column, in rank order."""
    out = {}
    for branch, body in re.findall(r'<section class="col search-column" data-branch="([^"]+)">(.*?)</section>',
                                   page, re.S):
        out[html.unescape(branch)] = _ROW.findall(body)
    return out


def test_the_search_page_shows_each_hits_score_and_per_leg_ranks(console):
    seed(console)
    # equal weights: the vector leg's passage (the body) is the one shown for a tie
    q = {"q": "rotate api key", "mode": "hybrid", "granularity": "node", "k": "3", "vector_weight": "1",
         "fulltext_weight": "1"}
    r = console.get("/ui/r/acme/search", params=q)
    assert r.status_code == 200, r.text
    expected = api_search(console, {"query": "rotate api key", "mode": "hybrid", "granularity": "node", "k": 3,
                                    "vector_weight": 1.0, "fulltext_weight": 1.0})
    assert expected[0]["path"] == "/rotate" and expected[0]["vector_rank"] == 1 and expected[0]["fulltext_rank"] == 1
    rows = _ROW.finditer(r.text)
    shown = [(m.group(1), cells(m.group(0))) for m in rows]
    assert [p for p, _ in shown] == [e["path"] for e in expected]
    for rank, ((path, c), e) in enumerate(zip(shown, expected, strict=True), start=1):
        assert c["rank"] == str(rank)
        assert c["node"].startswith(f"kb:{path}")
        assert c["score"] == f"{e['score']:.4f}"
        assert c["fulltext-rank"] == (str(e["fulltext_rank"]) if e["fulltext_rank"] is not None else "–")
        assert c["vector-rank"] == (str(e["vector_rank"]) if e["vector_rank"] is not None else "–")
        assert c["distance"] == (f"{e['vector_distance']:.4f}" if e["vector_distance"] is not None else "–")
    first = shown[0][1]
    # relative score fusion (the default): first in both legs is 1
    assert first["score"] == f"{1.0:.4f}" and first["fulltext-rank"] == "1" and first["vector-rank"] == "1"
    assert "press rotate key" in first["passage"]
    assert "press <mark>rotate</mark> <mark>key</mark>" in r.text  # the query's words highlighted
    assert 'href="/ui/r/acme/node?branch=main&amp;workspace=kb&amp;path=%2Frotate"' in r.text
    assert "&#34;engine&#34;: &#34;kg&#34;" in r.text or "engine" in r.text  # the fusion is described


def test_the_form_keeps_every_parameter_and_the_use_case_applies_them(console):
    seed(console)
    r = console.get("/ui/r/acme/search", params={"q": "cache", "mode": "fulltext", "k": "5", "path_prefix": "/deploy",
                                                  "granularity": "chunk", "fulltext_weight": "1",
                                                  "vector_weight": "0.5", "max_distance": "1.5"})
    assert r.status_code == 200, r.text
    assert columns(r.text) == {"main": ["/deploy"]}
    row = cells(_ROW.search(r.text).group(0))
    assert row["vector-rank"] == "–" and row["distance"] == "–" and row["fulltext-rank"] == "1"
    for field, value in (("k", "5"), ("path_prefix", "/deploy"), ("vector_weight", "0.5"), ("max_distance", "1.5")):
        assert f'name="{field}" value="{value}"' in r.text
    assert '<option value="fulltext" selected>' in r.text
    r = console.get("/ui/r/acme/search", params={"q": "rotate", "mode": "vector", "max_distance": "0.0001"})
    assert r.status_code == 200 and columns(r.text) == {"main": []} and "No hits on main" in r.text


def test_compare_shows_both_branches_side_by_side(console):
    seed(console)
    assert console.http.post("/api/repos/acme/branches", json={"name": "agent/x", "from": "main"},
                             headers=bearer(console.admin)).status_code == 201
    _put(console, "/rotate-v2", "Rotating keys, new flow", "To rotate an API key now use the keys page and rotate.",
         branch="agent/x")
    r = console.get("/ui/r/acme/search", params={"q": "rotate api key", "granularity": "node", "k": "10",
                                                  "branch": "main", "compare": "agent/x"})
    assert r.status_code == 200, r.text
    cols = columns(r.text)
    assert list(cols) == ["main", "agent/x"]
    assert "/rotate-v2" in cols["agent/x"] and "/rotate-v2" not in cols["main"]
    assert cols["main"] == [e["path"] for e in api_search(console, {"query": "rotate api key", "granularity": "node"})]
    assert cols["agent/x"] == [e["path"] for e in api_search(console, {"query": "rotate api key",
                                                                       "granularity": "node"}, branch="agent/x")]
    assert 'href="/ui/r/acme/node?branch=agent%2Fx&amp;workspace=kb&amp;path=%2Frotate-v2"' in r.text


def test_a_search_hit_is_escaped(console):
    seed(console)
    _put(console, "/evil", "<script>alert(1)</script>", "<script>alert(1)</script> rotate keys <b>bold</b>")
    r = console.get("/ui/r/acme/search", params={"q": "rotate keys", "mode": "fulltext"})
    assert r.status_code == 200
    assert "/evil" in columns(r.text)["main"]
    assert "<script>alert(1)</script>" not in r.text and "<b>bold</b>" not in r.text
    passage = "&lt;script&gt;alert(1)&lt;/script&gt; <mark>rotate</mark> <mark>keys</mark> &lt;b&gt;bold&lt;/b&gt;"
    assert passage in r.text
    # the query itself, echoed in the form, is escaped too
    r = console.get("/ui/r/acme/search", params={"q": '"><script>alert(2)</script>', "mode": "fulltext"})
    assert r.status_code == 200 and "<script>alert(2)</script>" not in r.text
    assert 'value="&#34;&gt;&lt;script&gt;alert(2)&lt;/script&gt;"' in r.text


def test_bad_search_parameters_are_a_422_page_with_the_use_cases_message(console):
    seed(console)
    for params, message in (({"k": "0"}, "k must be between 1 and 1000"),
                            ({"k": "ten"}, "k must be an integer"),
                            ({"mode": "psychic"}, "mode: Input should be"),
                            ({"max_distance": "3"}, "max_distance must be between 0 and 2"),
                            ({"vector_weight": "nan"}, "vector_weight must be a finite number"),
                            ({"fulltext_weight": "0", "vector_weight": "0"},
                             "at least one of fulltext_weight and vector_weight must be &gt; 0"),
                            ({"granularity": "page"}, "granularity: Input should be"),
                            ({"path_prefix": "no-slash"}, "path")):
        r = console.get("/ui/r/acme/search", params={"q": "rotate", **params})
        assert r.status_code == 422, (params, r.status_code, r.text[:300])
        assert r.headers["content-type"].startswith("text/html")
        assert message in r.text, (params, r.text)
    r = console.get("/ui/r/acme/search", params={"q": "rotate\x00"})
    assert r.status_code == 422 and "NUL" in r.text
    r = console.get("/ui/r/acme/search", params={"q": "rotate", "compare": "nope"})
    assert r.status_code == 404 and "nope" in r.text
    r = console.get("/ui/r/acme/search")  # no query: only the form
    assert r.status_code == 200 and 'id="search-form"' in r.text and 'id="search-results"' not in r.text


def test_a_restricted_key_searches_only_what_it_may_read(console):
    seed(console)
    assert console.http.post("/api/repos/acme/workspaces", json={"name": "secret"},
                             headers=bearer(console.admin)).status_code == 201
    _put(console, "/vault", "Vault", "rotate api key of the vault", workspace="secret")
    reader = new_key(console.services, "kb-reader", {"repo": "acme", "workspaces": ["kb"], "actions": ["read"]})
    console.sign_in(reader)
    r = console.get("/ui/r/acme/search", params={"q": "rotate api key vault", "granularity": "node"})
    assert r.status_code == 200
    assert "/vault" not in columns(r.text)["main"] and "secret:" not in r.text


def test_ask_shows_the_answer_its_citations_and_attempts(console):
    seed(console)
    question = "What dividend did the board approve?"
    r = console.post("/ui/r/acme/ask", {"q": question})
    assert r.status_code == 200, r.text
    answer = re.search(r'<p class="answer-text">(.*?)</p>', r.text, re.S)
    assert answer is not None and "40 cents" in answer.group(1)
    assert '<span class="badge added">grounded</span>' in r.text and ">extractive<" in r.text
    citations = re.search(r'<table id="citations">(.*?)</table>', r.text, re.S).group(1)
    assert 'href="/ui/r/acme/node?branch=main&amp;workspace=kb&amp;path=%2Fdividends"' in citations
    assert ">kb:/dividends</a>" in citations
    attempts = re.search(r'<table id="attempts">(.*?)</table>', r.text, re.S).group(1)
    assert f"<td>{html.escape(question, quote=True)}" in attempts or question in attempts
    assert re.search(r'<td class="num">1</td>\s*<td>What dividend did the board approve\?', attempts)


def test_ask_says_which_words_of_a_declined_question_the_documents_never_use(console):
    seed(console)
    r = console.post("/ui/r/acme/ask", {"q": "What dividend did the Tesla board approve in 1999?"})
    assert r.status_code == 200, r.text
    attempts = re.search(r'<table id="attempts">(.*?)</table>', r.text, re.S).group(1)
    assert "<td>coverage</td>" in attempts and "the documents never use: tesla" in attempts
    assert "The documents do not cover this." in r.text


def test_ask_escapes_and_refuses_bad_input(console):
    seed(console)
    r = console.post("/ui/r/acme/ask", {"q": "<script>alert(1)</script>"})
    assert r.status_code == 200
    assert "<script>alert(1)</script>" not in r.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in r.text
    r = console.post("/ui/r/acme/ask", {"q": "dividend", "branch": "nope"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    r = console.post("/ui/r/acme/ask", {"q": "dividend\x00"})  # text the store cannot hold
    assert r.status_code == 422 and "NUL" in r.text
    r = console.get("/ui/r/acme/ask")
    assert r.status_code == 200 and 'id="ask-form"' in r.text and 'id="answer"' not in r.text


def test_a_get_of_the_ask_page_spends_no_rate_limit(console):
    """A GET any page can make (<img src=/ui/r/acme/ask?q=...>) asked, and drained the caller's
    bucket of expensive calls; asking is now a POST with the CSRF token."""
    seed(console)
    from kg.ratelimit import RateLimiter

    console.services.rate_limiter = RateLimiter(0.001, 1)  # one call, then a refill every 16 h
    for _ in range(3):
        r = console.get("/ui/r/acme/ask", params={"q": "dividend"})
        assert r.status_code == 200 and 'id="answer"' not in r.text
    assert console.post("/ui/r/acme/ask", {"q": "dividend"}).status_code == 200
    assert console.post("/ui/r/acme/ask", {"q": "dividend"}).status_code == 429
    assert console.post("/ui/r/acme/ask", {"q": "dividend"}, csrf=False).status_code == 403


def test_ask_shows_a_property_citation_from_the_graph(console):
    """A question about a named node's property is answered from the node: the console shows
    the property and its value where a passage shows its chunk."""
    seed(console)
    r = console.http.put("/api/repos/acme/workspaces/kb/nodes/pep-0440", headers=bearer(console.admin),
                         json={"node_type": "pep:PEP", "properties": {
                             "pep": 440, "title": "Version Identification", "created": "18-Mar-2013"}})
    assert r.status_code == 201, r.text
    r = console.post("/ui/r/acme/ask", {"q": "When was PEP 440 created?"})
    assert r.status_code == 200, r.text
    assert "18-Mar-2013" in re.search(r'<p class="answer-text">(.*?)</p>', r.text, re.S).group(1)
    citations = re.search(r'<table id="citations">(.*?)</table>', r.text, re.S).group(1)
    assert ">kb:/pep-0440</a>" in citations and "created: 18-Mar-2013" in citations
    assert "<td>property</td>" in citations
