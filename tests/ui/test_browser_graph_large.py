"""A large neighbourhood in a real browser (168 nodes, about 690 edges, 3 hops at cap 200): it
draws with every node and edge, every node placed, in a bounded time; the draw and layout times
are printed (``-s``), not asserted (the machine's speed varies)."""

from __future__ import annotations

import random
import time

from tests.ui.conftest import screenshot, sign_in

HOP_SIZES = (6, 30, 131)  # nodes at hop 1, 2, 3: 168 with the start node
EXTRA_EDGES = 524  # on top of the 167 of the tree: 691


def _seed(api, repo: str) -> tuple[int, int]:
    """A tree of 168 nodes three hops deep from /n0, and extra edges between them (each node's
    extra edges go at most one hop out, so the walk still finds each at its tree hop)."""
    assert api.post("/api/repos", json={"name": repo}).status_code == 201
    assert api.post(f"/api/repos/{repo}/workspaces", json={"name": "kb"}).status_code == 201
    rng = random.Random(7)
    levels: list[list[int]] = [[0]]
    parent: dict[int, int] = {}
    n = 1
    for size in HOP_SIZES:
        level = list(range(n, n + size))
        for child in level:
            parent[child] = rng.choice(levels[-1])
        levels.append(level)
        n += size
    hop = {node: h for h, level in enumerate(levels) for node in level}
    r = api.post(f"/api/repos/{repo}/nodes:batch", json={"upserts": [
        {"workspace": "kb", "path": f"/n{i}", "node_type": "kb:Doc", "properties": {"title": f"Node {i}"}}
        for i in range(n)]})
    assert r.status_code == 200, r.text
    edges = {(p, c) for c, p in parent.items()}
    while len(edges) < len(parent) + EXTRA_EDGES:
        a, b = rng.randrange(n), rng.randrange(n)
        if a != b and abs(hop[a] - hop[b]) <= 1:
            edges.add((a, b))
    types = ("cites", "mentions", "see_also", "requires")
    for a, b in sorted(edges):
        r = api.post(f"/api/repos/{repo}/relations", json={"from": f"kb:/n{a}", "to": f"kb:/n{b}",
                                                           "type": rng.choice(types), "weight": rng.random()})
        assert r.status_code == 201, r.text
    return n, len(edges)


def test_a_large_graph_draws_every_node_and_edge_quickly(page, live):
    nodes, edges = _seed(live.api, "big")
    sign_in(page, live.admin)
    started = time.monotonic()
    page.goto("/ui/r/big/graph?workspace=kb&path=/n0&hops=3&cap=200")
    page.wait_for_function("window.cy !== undefined && document.getElementById('graph').dataset.ready === 'true'",
                           timeout=60_000)
    drawn = time.monotonic() - started
    assert page.evaluate("window.cy.nodes().length") == nodes
    assert page.evaluate("window.cy.edges().length") == edges
    # every node has a finite place, and they are not all on one spot
    spread = page.evaluate("""(() => { const bb = window.cy.nodes().boundingBox();
        const ok = window.cy.nodes().every(n => isFinite(n.position('x')) && isFinite(n.position('y')));
        return [ok, bb.w, bb.h]; })()""")
    assert spread[0] and spread[1] > 100 and spread[2] > 100
    # the large graph's cheap drawing: straight edges, labels only when zoomed in enough to read
    assert page.evaluate("window.cy.edges()[0].style('curve-style')") == "straight"
    assert page.evaluate("window.cy.nodes()[0].style('min-zoomed-font-size')") == "9px"
    screenshot(page, "graph-large")
    draws = []
    for _ in range(3):  # the fastest of three draws (the machine is shared)
        page.reload()
        page.wait_for_function("document.getElementById('graph').dataset.drawMs !== undefined", timeout=60_000)
        draws.append(int(page.evaluate("document.getElementById('graph').dataset.drawMs")))
    layout = page.evaluate("""(() => {
        const options = window.kgGraph.layoutFor(window.cy.nodes().length);
        const t0 = performance.now();
        window.cy.layout(options).run();
        return [options.name, performance.now() - t0]; })()""")
    print(f"\n{nodes} nodes, {edges} edges: page to drawn {drawn:.2f} s; draw (cytoscape, layout, first frame) "
          f"{min(draws)} ms (of {draws}); layout {layout[0]} {layout[1]:.0f} ms")


def test_a_small_graph_keeps_its_layout_and_bezier_edges(page, live):
    api = live.api
    assert api.post("/api/repos", json={"name": "small"}).status_code == 201
    assert api.post("/api/repos/small/workspaces", json={"name": "kb"}).status_code == 201
    for i in range(3):
        r = api.put(f"/api/repos/small/workspaces/kb/nodes/s{i}", json={"node_type": "kb:Doc", "properties": {}})
        assert r.status_code == 201, r.text
    for a, b in ((0, 1), (0, 2)):
        r = api.post("/api/repos/small/relations", json={"from": f"kb:/s{a}", "to": f"kb:/s{b}", "type": "cites"})
        assert r.status_code == 201, r.text
    sign_in(page, live.admin)
    page.goto("/ui/r/small/graph?workspace=kb&path=/s0&hops=1")
    page.wait_for_function("window.cy !== undefined && document.getElementById('graph').dataset.ready === 'true'")
    assert page.evaluate("window.cy.edges()[0].style('curve-style')") == "bezier"
    assert page.evaluate("window.kgGraph.layoutFor(3).minNodeSpacing") == 40
