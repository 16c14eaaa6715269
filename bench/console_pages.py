"""Server time per page of the review console on the PEP demo, against the JSON API call that
reads the same thing (the baseline), in one run.

The app runs in process (``fastapi.testclient.TestClient``: the ASGI app, its middleware and
Jinja2 rendering, no socket), with auth on and a signed-in admin session, on a SQLite file, with
the deterministic ``fake:hash-384`` embedder (the figures are kg's and the console's, not the
model's). Data: the 150 PEPs of ``fixtures/peps`` as nodes (title and the first 4,000
characters), a ``cites`` relation for each "PEP NNN" one PEP mentions of another, and
``authored_by``, ``has_status`` and ``has_type`` relations to entity nodes made of the PEPs'
headers (the most linked, a PEP type, is the hub); a branch ``agent/review-100`` re-titles 60
PEPs, adds 20 notes, deletes 10 PEPs (and so their relations) and re-weights 10 relations.

Each page is requested ``--calls`` times after ``--warmup``, in turn with its baseline (page,
API, page, ...: both see the same load); the table gives p50 and p90 in milliseconds and the
ratio of the medians. Issue 14's bound: the review of the 100-change branch and the 3-hop graph
of the hub stay under 150 ms server time (printed, not asserted).

Run: ``python bench/console_pages.py [--calls 30]``; JSON in ``bench/results/console_pages.json``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from bench._common import RESULTS, machine, summary_ms, table, write_results  # noqa: E402

PEPPER = "bench-pepper-not-a-secret"
MODEL = "fake:hash-384"
BRANCH = "agent/review-100"
BOUND_MS = 150.0
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
_PEP = re.compile(r"\bPEP\s+(\d{1,4})\b")
_HEADER = re.compile(r"^([A-Z][A-Za-z-]+):\s*(.+)$", re.M)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _app(folder: Path) -> tuple[TestClient, str]:
    """The app on a fresh SQLite file, and an admin token."""
    from pydantic import SecretStr

    from api.app import create_app
    from kg.access import make_grant
    from kg.context import OPERATOR, run
    from kg.ops.keys import create_key
    from kg.services import Services
    from kg.settings import Settings

    settings = Settings(data_dir=folder, embedding_model=MODEL, allow_fake_embedder=True, index_inline=True,
                        auth=True, key_pepper=SecretStr(PEPPER), rate_expensive_per_min=0)
    services = Services.from_settings(settings)
    services.db.upgrade()
    token = run(services, OPERATOR, create_key, name="bench", grants=[make_grant("*", actions=["admin"])]).key
    return TestClient(create_app(services=services)), token


def _seed(api: Callable[..., Any]) -> str:
    """The PEPs, their ``cites`` relations and the 100-change branch; returns the hub's path."""
    api("post", "/api/repos", json={"name": "peps"})
    api("post", "/api/repos/peps/workspaces", json={"name": "peps"})
    upserts, texts = [], {}
    for path in sorted((ROOT / "fixtures" / "peps" / "docs").glob("pep-*.rst")):
        text = path.read_text(encoding="utf-8")
        title = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Title:")),
                     path.stem)
        texts[path.stem] = text
        upserts.append({"workspace": "peps", "path": f"/{path.stem}", "node_type": "pep:PEP",
                        "properties": {"title": title, "content": text[:4000]}})
    api("post", "/api/repos/peps/nodes:batch", json={"upserts": upserts})
    known = set(texts)
    edges: list[tuple[str, str, str]] = []
    for stem, text in texts.items():
        for number in sorted({int(n) for n in _PEP.findall(text)}):
            target = f"pep-{number:04d}"
            if target in known and target != stem:
                edges.append((f"/{stem}", f"/{target}", "cites"))
        headers = dict(_HEADER.findall(text.split("\n\n", 1)[0]))
        for name in [a.split("<")[0].strip() for a in headers.get("Author", "").split(",")]:
            if name:
                edges.append((f"/{stem}", f"/people/{_slug(name)}", "authored_by"))
        for field in ("Status", "Type"):
            if headers.get(field):
                edges.append((f"/{stem}", f"/{field.lower()}/{_slug(headers[field])}", f"has_{field.lower()}"))
    entities = sorted({t for _, t, kind in edges if kind != "cites"})
    api("post", "/api/repos/peps/nodes:batch", json={"parents": True, "upserts": [
        {"workspace": "peps", "path": path, "node_type": "kb:Entity", "properties": {"title": path.rsplit("/", 1)[1]}}
        for path in entities]})
    for source, target, kind in edges:
        api("post", "/api/repos/peps/relations", json={"from": f"peps:{source}", "to": f"peps:{target}",
                                                        "type": kind, "weight": 1.0})
    degree = Counter(t for _, t, _ in edges)
    hub = degree.most_common(1)[0][0]
    print(f"{len(upserts)} PEPs, {len(entities)} entities, {len(edges)} relations; the hub {hub} has "
          f"{degree[hub]} in-edges")
    api("post", "/api/repos/peps/branches", json={"name": BRANCH, "from": "main"})
    stems = sorted(known)
    q = f"?branch={BRANCH}"
    retitle = [{"workspace": "peps", "path": f"/{s}", "node_type": "pep:PEP",
                "properties": {"title": f"(reviewed) {s}", "content": texts[s][:4000]}} for s in stems[:60]]
    added = [{"workspace": "peps", "path": f"/notes/n{i:02d}", "node_type": "kb:Note",
              "properties": {"title": f"note {i}", "content": f"An agent's note number {i} on packaging."}}
             for i in range(20)]
    api("post", f"/api/repos/peps/nodes:batch{q}",
        json={"upserts": retitle + added, "parents": True,
              "deletes": [{"workspace": "peps", "path": f"/{s}"} for s in stems[-10:]]})
    renamed = {f"/{s}" for s in stems[:60]}
    reweighted = [(s, t, kind) for s, t, kind in edges if s in renamed][:10]
    for source, target, kind in reweighted:
        api("post", f"/api/repos/peps/relations{q}", json={"from": f"peps:{source}", "to": f"peps:{target}",
                                                            "type": kind, "weight": 0.5})
    return hub


def _timed(client: TestClient, method: str, url: str, **kw: Any) -> float:
    start = time.perf_counter()
    r = client.request(method, url, **kw)
    elapsed = time.perf_counter() - start
    if r.status_code >= 400:
        raise SystemExit(f"{method} {url}: {r.status_code} {r.text[:300]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        client, token = _app(Path(tmp))
        with client:
            auth = {"Authorization": f"Bearer {token}"}

            def api(method: str, url: str, **kw: Any) -> Any:
                r = client.request(method, url, headers=auth, **kw)
                if r.status_code >= 400:
                    raise SystemExit(f"seed {method} {url}: {r.status_code} {r.text[:300]}")
                return r.json() if r.content else None

            started = time.perf_counter()
            hub = _seed(api)
            seed_s = time.perf_counter() - started
            form = client.get("/ui/login")
            csrf = _CSRF.search(form.text).group(1)  # type: ignore[union-attr]
            signed = client.post("/ui/login", data={"key": token, "next": "/ui", "csrf_token": csrf},
                                 follow_redirects=False)
            assert signed.status_code == 303, signed.text
            csrf = _CSRF.search(client.get("/ui/r/peps/ask").text).group(1)  # type: ignore[union-attr]
            node = "/pep-0440"
            diff = api("get", f"/api/repos/peps/branches/{BRANCH}/diff")
            changes = sum(len(v) for v in diff["nodes"].values()) + sum(
                len(v) if isinstance(v, list) else 0 for v in diff["relations"].values())
            walk = api("post", "/api/repos/peps/traverse", json={"seeds": [f"peps:{hub}"], "hops": 3})
            print(f"the review branch has {changes} changes; the hub's 3-hop walk reaches "
                  f"{len(walk['nodes'])} nodes (truncated: {walk['truncated']})")
            search_q = "how are packages installed and uninstalled"
            cases: list[tuple[str, tuple[str, str, dict[str, Any]], tuple[str, str, dict[str, Any]]]] = [
                ("branches", ("GET", "/ui/r/peps/branches", {}), ("GET", "/api/repos/peps/branches", {})),
                ("review, 100 changes", ("GET", f"/ui/r/peps/review?branch={BRANCH}", {}),
                 ("GET", f"/api/repos/peps/branches/{BRANCH}/diff", {})),
                ("node tree (root)", ("GET", "/ui/r/peps/tree?branch=main&workspace=peps", {}),
                 ("GET", "/api/repos/peps/workspaces/peps/nodes?parent=/", {})),
                ("node page", ("GET", f"/ui/r/peps/node?branch=main&workspace=peps&path={node}", {}),
                 ("GET", f"/api/repos/peps/workspaces/peps/nodes{node}", {})),
                ("graph of the hub, 3 hops", ("GET", f"/ui/r/peps/graph?branch=main&workspace=peps"
                                              f"&path={hub}&hops=3", {}),
                 ("POST", "/api/repos/peps/traverse", {"json": {"seeds": [f"peps:{hub}"], "hops": 3}})),
                ("search, hybrid k=10", ("GET", f"/ui/r/peps/search?branch=main&q={search_q}&mode=hybrid&k=10", {}),
                 ("POST", "/api/repos/peps/search", {"json": {"query": search_q, "mode": "hybrid", "k": 10}})),
                ("ask", ("POST", "/ui/r/peps/ask", {"data": {"q": "What replaced PEP 386?", "branch": "main",
                                                            "csrf_token": csrf}}),
                 ("POST", "/api/functions/peps/ask/invoke",
                  {"json": {"input": {"question": "What replaced PEP 386?"}}})),
            ]
            rows, results = [], {}
            for name, (pm, pu, pkw), (am, au, akw) in cases:
                akw = {**akw, "headers": auth}
                for _ in range(args.warmup):
                    _timed(client, pm, pu, **pkw)
                    _timed(client, am, au, **akw)
                page_s, api_s = [], []
                for _ in range(args.calls):
                    page_s.append(_timed(client, pm, pu, **pkw))
                    api_s.append(_timed(client, am, au, **akw))
                p, a = summary_ms(page_s), summary_ms(api_s)
                ratio = p["median_ms"] / a["median_ms"] if a["median_ms"] else float("nan")
                results[name] = {"page": p, "api": a, "ratio_p50": ratio, "page_url": pu, "api_url": au}
                rows.append([name, f"{p['median_ms']:.1f}", f"{p['p90_ms']:.1f}", f"{a['median_ms']:.1f}",
                             f"{ratio:.2f}"])
    print(f"seeded in {seed_s:.1f} s; hub {hub}; {args.calls} calls per page after {args.warmup} warm-up")
    print(table(rows, ["page", "p50 ms", "p90 ms", "API p50 ms", "page / API"]))
    for name in ("review, 100 changes", "graph of the hub, 3 hops"):
        p50 = results[name]["page"]["median_ms"]
        print(f"{name}: p50 {p50:.1f} ms, {'under' if p50 < BOUND_MS else 'OVER'} the {BOUND_MS:.0f} ms bound")
    write_results({"machine": machine(), "calls": args.calls, "hub": hub, "pages": results},
                  RESULTS / "console_pages.json")


if __name__ == "__main__":
    main()
