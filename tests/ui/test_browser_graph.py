"""The graph, search and ask screens in a real browser against a real ``kg serve`` (issue 14):
cytoscape draws the expected nodes and edges (read through its API), a click on a node opens
its node page, and the search playground shows the per-leg ranks."""

from __future__ import annotations

import re

from tests.ui.conftest import screenshot, sign_in

DOCS = {
    "/rotate": ("Rotating API keys", "To rotate an API key open settings and press rotate key. Old keys expire."),
    "/billing": ("Billing", "Invoices are sent monthly. Payment by card or bank transfer."),
    "/deploy": ("Deploy failures", "A deploy fails when the build cache is stale. Clear the cache and retry."),
    "/dividends": ("Dividends", "The board approved a quarterly dividend of 40 cents per share payable in March."),
}
EDGES = [("/rotate", "/billing", "see_also", 0.9), ("/rotate", "/deploy", "requires", 0.4),
         ("/deploy", "/billing", "cites", None), ("/billing", "/dividends", "mentions", 0.2)]


def _seed(api, repo: str) -> None:
    assert api.post("/api/repos", json={"name": repo}).status_code == 201
    assert api.post(f"/api/repos/{repo}/workspaces", json={"name": "kb"}).status_code == 201
    for path, (title, body) in DOCS.items():
        r = api.put(f"/api/repos/{repo}/workspaces/kb/nodes{path}",
                    json={"node_type": "kb:Doc", "properties": {"title": title, "content": body}})
        assert r.status_code == 201, r.text
    for source, target, rel_type, weight in EDGES:
        body = {"from": f"kb:{source}", "to": f"kb:{target}", "type": rel_type}
        if weight is not None:
            body["weight"] = weight
        assert api.post(f"/api/repos/{repo}/relations", json=body).status_code == 201
    assert api.post(f"/api/repos/{repo}/branches", json={"name": "agent/a", "from": "main"}).status_code == 201
    r = api.put(f"/api/repos/{repo}/workspaces/kb/nodes/rotate-v2", params={"branch": "agent/a"},
                json={"node_type": "kb:Doc", "properties": {"title": "Rotating keys, new flow",
                                                             "content": "Rotate an API key on the keys page."}})
    assert r.status_code == 201, r.text
    r = api.post(f"/api/repos/{repo}/relations", params={"branch": "agent/a"},
                 json={"from": "kb:/rotate", "to": "kb:/rotate-v2", "type": "superseded_by", "weight": 1.0})
    assert r.status_code == 201, r.text


def _ready(page) -> None:
    page.wait_for_function("window.cy !== undefined && document.getElementById('graph').dataset.ready === 'true'")


def test_the_graph_draws_the_neighbourhood_and_a_click_opens_the_node_page(page, live):
    _seed(live.api, "gshop")
    sign_in(page, live.admin)
    said: list[str] = []
    page.on("console", lambda m: said.append(f"{m.type}: {m.text}") if m.type in ("warning", "error") else None)
    page.goto("/ui/r/gshop/graph?workspace=kb&path=/rotate&hops=1")
    _ready(page)
    assert said == []  # no warning of the library (a custom wheel sensitivity was one, on every load)
    assert page.evaluate("window.cy.nodes().length") == 3  # rotate, billing, deploy
    assert page.evaluate("window.cy.edges().length") == 3  # rotate-billing, rotate-deploy, deploy-billing
    assert sorted(page.evaluate("window.cy.nodes().map(n => n.id())")) == ["kb:/billing", "kb:/deploy", "kb:/rotate"]
    page.goto("/ui/r/gshop/graph?workspace=kb&path=/rotate&hops=2&branch=agent/a")
    _ready(page)
    assert page.evaluate("window.cy.nodes().length") == 5
    assert page.evaluate("window.cy.edges().length") == 5
    assert page.evaluate("window.cy.nodes('.added').map(n => n.id())") == ["kb:/rotate-v2"]
    assert page.evaluate("window.cy.edges('.added').map(e => e.data('type'))") == ["superseded_by"]
    # the drawn style: colour by type, width by weight, the branch's own edge dashed
    style = page.evaluate("""(() => { const e = window.cy.edges('.added')[0];
        return [e.style('line-style'), e.data('colour'), e.style('width')]; })()""")
    assert style[0] == "dashed" and re.fullmatch(r"#[0-9A-F]{6}", style[1]) and style[2] == "7px"
    assert page.locator("#graph-legend .legend-type").count() == 4 + 1
    assert page.locator("#graph-legend .legend-added").count() == 1
    assert page.locator(".badge.truncated").count() == 0
    screenshot(page, "graph")
    page.goto("/ui/r/gshop/graph?workspace=kb&path=/rotate&hops=1&cap=1")
    _ready(page)
    assert page.locator(".badge.truncated").inner_text() == "truncated"
    assert page.evaluate("window.cy.nodes().length") == 2
    # a click on the billing node opens its node page
    x, y = page.evaluate("""(() => { const n = window.cy.getElementById('kb:/billing');
        const p = n.renderedPosition(); const r = document.getElementById('graph').getBoundingClientRect();
        return [r.left + p.x, r.top + p.y]; })()""")
    page.mouse.click(x, y)
    page.wait_for_url(re.compile(r".*/ui/r/gshop/node\?.*"))
    assert page.url.endswith("/ui/r/gshop/node?branch=main&workspace=kb&path=%2Fbilling")


def test_the_search_playground_shows_per_leg_ranks_and_ask_answers(page, live):
    _seed(live.api, "sshop")
    sign_in(page, live.admin)
    page.goto("/ui/r/sshop/search")
    page.fill("#search-form input[name=q]", "rotate api key")
    page.select_option("#search-form select[name=granularity]", "node")
    page.fill("#search-form input[name=compare]", "agent/a")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#search-results")
    main = page.locator("section.search-column[data-branch=main] tr.hit")
    first = main.first
    assert first.get_attribute("data-path") == "/rotate"
    assert first.locator("td.fulltext-rank").inner_text() == "1"
    assert first.locator("td.vector-rank").inner_text() == "1"
    # relative score fusion (the default): first in both legs scores 1
    assert first.locator("td.score").inner_text() == f"{1.0:.4f}"
    paths_a = page.locator("section.search-column[data-branch='agent/a'] tr.hit").evaluate_all(
        "rows => rows.map(r => r.dataset.path)")
    paths_main = main.evaluate_all("rows => rows.map(r => r.dataset.path)")
    assert "/rotate-v2" in paths_a and "/rotate-v2" not in paths_main
    screenshot(page, "search")
    page.goto("/ui/r/sshop/ask")
    page.fill("#ask-form input[name=q]", "What dividend did the board approve?")
    page.click("#ask-form button[type=submit]")
    page.wait_for_selector("#answer")
    assert "40 cents" in page.inner_text("#answer .answer-text")
    link = page.locator("#citations a").first
    assert link.inner_text() == "kb:/dividends"
    assert link.get_attribute("href") == "/ui/r/sshop/node?branch=main&workspace=kb&path=%2Fdividends"
    assert page.locator("#attempts tbody tr").count() >= 1
    screenshot(page, "ask")
