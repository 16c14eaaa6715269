"""The property-based leak test of issue 12 ("Proof"): random repositories, workspaces, branches,
nodes, relations across workspaces and references, and a random read-only key; for every read
route, no response body holds a token planted only where the key cannot read, and what it can
read is still found (so the test cannot pass by answering nothing). On SQLite and PostgreSQL.

Each node holds a token of its own, unique in the run, in its path, its text and the message of
the revision that wrote it; a node that references another holds that one's token too (in its
path). A token may appear in an answer on branch X of repository R exactly when a node the key
may read on X (its own writes and what X inherits, in a workspace its grants let it read there)
holds it. Every write on a parent branch is made before its children fork, so "X inherits it" is
"it was written on X or an ancestor of X". The oracle below is written from the rules (fnmatch
over the grants), not with kg.access.

The examples are drawn the same way every run (``derandomize``); the world of each example is
made in the module's one database, under repository names of its own.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from tests.api.access_world import App, auth_app
from tests.api.test_access import bearer
from tests.conftest import BACKENDS

WORKSPACES = ("alpha", "beta", "gamma")
CHILDREN = ("agent/one", "review/two")
BRANCH_GLOBS = ("main", "agent/*", "review/*", "*")
WORKSPACE_GLOBS = (*WORKSPACES, "*")
MODES = ("vector", "fulltext", "hybrid")
_serial = itertools.count(1)


def _word(n: int) -> str:
    """``n`` in base 16 written with the letters a..p (no q, no z: they delimit tokens)."""
    digits = ""
    while True:
        n, d = divmod(n, 16)
        digits = chr(ord("a") + d) + digits
        if n == 0:
            return digits


@pytest.fixture(scope="module", params=BACKENDS)
def app(request, tmp_path_factory) -> App:
    with auth_app(request.param, tmp_path_factory.mktemp("leak-property")) as made:
        yield made


# -- the scenario ---------------------------------------------------------------------------


@dataclass
class Node:
    repo: str
    branch: str
    workspace: str
    token: str
    ref: Node | None = None

    @property
    def path(self) -> str:
        return f"/{self.token}"

    @property
    def address(self) -> str:
        return f"{self.workspace}:{self.path}"

    @property
    def tokens(self) -> set[str]:
        return {self.token} | ({self.ref.token} if self.ref is not None else set())


@dataclass
class Repo:
    name: str
    workspaces: list[str]
    parents: dict[str, str | None]  # branch -> parent, in creation order
    nodes: list[Node] = field(default_factory=list)
    relations: list[tuple[str, Node, Node]] = field(default_factory=list)  # (branch, from, to)

    def lineage(self, branch: str) -> list[str]:
        chain: list[str] = []
        at: str | None = branch
        while at is not None:
            chain.append(at)
            at = self.parents[at]
        return chain

    def visible(self, branch: str) -> list[Node]:
        chain = self.lineage(branch)
        return [n for n in self.nodes if n.branch in chain]


@st.composite
def scenarios(draw) -> dict[str, Any]:
    """Repositories (1-2): workspaces (1-3), branches (main + 0-2 children, the second one off
    main or off the first), per branch 0-3 nodes (main: 1-3) each in a workspace and maybe
    referencing a node visible there, 0-3 relations between nodes visible there; and a key of
    1-2 read grants on a repository (or ``*``), branch globs and workspace globs."""
    repos = []
    for letter in "ab"[:draw(st.integers(1, 2))]:
        workspaces = draw(st.lists(st.sampled_from(WORKSPACES), min_size=1, max_size=3, unique=True))
        parents: dict[str, str | None] = {"main": None}
        for child in CHILDREN[:draw(st.integers(0, 2))]:
            parents[child] = draw(st.sampled_from(sorted(parents)))
        plan = {}
        for branch in parents:
            nodes = draw(st.lists(st.tuples(st.sampled_from(workspaces), st.integers(0, 5)),
                                  min_size=1 if branch == "main" else 0, max_size=3))
            relations = draw(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=3))
            plan[branch] = (nodes, relations)
        repos.append((letter, workspaces, parents, plan))
    names = [letter for letter, *_ in repos]
    grants = draw(st.lists(st.fixed_dictionaries({
        "repo": st.sampled_from([*names, "*"]),
        "branches": st.lists(st.sampled_from(BRANCH_GLOBS), min_size=1, max_size=2, unique=True),
        "workspaces": st.lists(st.sampled_from(WORKSPACE_GLOBS), min_size=1, max_size=2, unique=True),
    }), min_size=1, max_size=2))
    return {"repos": repos, "grants": grants}


@dataclass
class World:
    repos: list[Repo]
    grants: list[dict[str, Any]]
    key: dict[str, str]

    @property
    def tokens(self) -> set[str]:
        return {n.token for r in self.repos for n in r.nodes}

    def describe(self) -> str:
        """The example, for a failure's report."""
        lines = [f"key grants: {self.grants}"]
        for r in self.repos:
            lines.append(f"repo {r.name}: workspaces {r.workspaces}, branches {r.parents}")
            lines += [f"  node {n.branch} {n.address}" + (f" -> ref {n.ref.address}" if n.ref else "")
                      for n in r.nodes]
            lines += [f"  relation {b} {s.address} -> {d.address}" for b, s, d in r.relations]
        return "\n".join(lines)

    def sees(self, repo: str, branch: str | None = None, workspace: str | None = None) -> bool:
        return any(fnmatchcase(repo, g["repo"])
                   and (branch is None or any(fnmatchcase(branch, b) for b in g["branches"]))
                   and (workspace is None or any(fnmatchcase(workspace, w) for w in g["workspaces"]))
                   for g in self.grants)

    def readable(self, repo: Repo, branch: str) -> list[Node]:
        if not self.sees(repo.name, branch):
            return []
        return [n for n in repo.visible(branch) if self.sees(repo.name, branch, n.workspace)]

    def allowed(self, repo: Repo, branch: str) -> set[str]:
        return set().union(*(n.tokens for n in self.readable(repo, branch)))


def build(app: App, scenario: dict[str, Any]) -> World:
    """Make the scenario's repositories, writes and key (as the admin)."""
    api, admin = app.client, app.admin
    serial = _word(next(_serial))
    count = itertools.count()
    repos: list[Repo] = []
    for letter, workspaces, parents, plan in scenario["repos"]:
        repo = Repo(f"p{serial}{letter}", workspaces, parents)
        base = f"/api/repos/{repo.name}"
        _ok(api.post("/api/repos", json={"name": repo.name}, headers=admin), 201)
        for ws in workspaces:
            _ok(api.post(f"{base}/workspaces", json={"name": ws}, headers=admin), 201)
        for branch, parent in parents.items():
            if parent is not None:
                _ok(api.post(f"{base}/branches", json={"name": branch, "from": parent}, headers=admin), 201)
            nodes, relations = plan[branch]
            for ws, ref in nodes:
                seen = repo.visible(branch)
                node = Node(repo.name, branch, ws, f"tok{serial}z{_word(next(count))}q",
                            seen[ref % len(seen)] if seen and ref < len(seen) else None)
                props: dict[str, Any] = {"content": f"Survey note {node.token} about the harbour."}
                if node.ref is not None:
                    props["about"] = {"kg:ref": node.ref.path, "kg:workspace": node.ref.workspace}
                _ok(api.put(f"{base}/workspaces/{ws}/nodes{node.path}", params={"branch": branch}, headers=admin,
                            json={"node_type": "kb:Doc", "properties": props, "message": f"add {node.token}"}), 201)
                repo.nodes.append(node)
            seen = repo.visible(branch)
            for i, j in relations:
                src, dst = seen[i % len(seen)], seen[j % len(seen)]
                if src is dst:
                    continue
                r = api.post(f"{base}/relations", params={"branch": branch}, headers=admin,
                             json={"from": src.address, "to": dst.address, "type": "links"})
                assert r.status_code in (200, 201), r.text  # 200: the same edge again
                repo.relations.append((branch, src, dst))
        repos.append(repo)
    grants = [{**g, "repo": f"p{serial}{g['repo']}" if g["repo"] != "*" else "*", "actions": ["read"]}
              for g in scenario["grants"]]
    made = _ok(api.post("/api/keys", json={"name": f"reader-{serial}", "grants": grants}, headers=admin), 201)
    return World(repos, grants, bearer(made["key"]))


def _ok(r, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()


# -- the checks -----------------------------------------------------------------------------


class Checker:
    """Sends the key's requests and checks each answer: its status, no token it may not hold."""

    def __init__(self, app: App, world: World) -> None:
        self.api, self.world = app.client, world
        self.requests = self.found_tokens = 0

    def call(self, method: str, url: str, status: int, allowed: set[str], *, echo: str | None = None,
             **kwargs: Any) -> Any:
        """``echo``: the request's query, which the answer may repeat (``ask``'s attempts)."""
        r = self.api.request(method, url, headers=self.world.key, **kwargs)
        self.requests += 1
        text = r.text
        if echo and r.status_code == 200 and "attempts" in r.json():
            # ask's coverage attempt names the question's own words the caller's passages lack
            # (the caller's words, not the store's) and, for each, the quoted word nearest or
            # spelt alike (what the caller may read: scanned as the rest of the answer)
            body = r.json()
            asked = set(echo.lower().split())
            for attempt in body["attempts"]:
                if attempt.get("leg") == "coverage":
                    assert set(attempt["absent_terms"]) <= asked and set(attempt["uncovered"]) <= asked, attempt
                    quoted = [n["word"] for n in attempt["nearest"].values()] + list(attempt["misspelt"].values())
                    attempt["nearest"], attempt["misspelt"] = quoted, []
                    attempt["absent_terms"] = attempt["uncovered"] = []
            text = json.dumps(body)
        text = text.replace(json.dumps(echo)[1:-1], "") if echo else text
        leaked = sorted(t for t in self.world.tokens - allowed if t in text)
        assert not leaked, f"{method} {url} {kwargs}: {leaked} leaked in {r.text}"
        assert r.status_code == status, f"{method} {url} {kwargs}: {r.text}"
        if status >= 400:
            assert set(r.json()) == {"error"} and r.json()["error"]["code"] == "not_found", r.text
            return None
        return r.json()

    def found(self, tokens: set[str], body: Any, what: str) -> None:
        """Each of ``tokens`` (readable by the key) is in ``body``."""
        text = json.dumps(body)
        missing = sorted(t for t in tokens if t not in text)
        assert not missing, f"{what}: readable {missing} not found in {text}"
        self.found_tokens += len(tokens)




def check_branch(c: Checker, repo: Repo, branch: str) -> None:
    """Every content read of ``branch`` of ``repo``."""
    w = c.world
    base = f"/api/repos/{repo.name}"
    on = {"branch": branch}
    seen = w.sees(repo.name, branch)
    readable = w.readable(repo, branch)
    readable_tokens = {n.token for n in readable}
    allowed = w.allowed(repo, branch)
    every = " ".join(n.token for n in repo.visible(branch))
    miss = 200 if seen else 404

    for ws in repo.workspaces:
        ok = 200 if w.sees(repo.name, branch, ws) else 404
        mine = {n.token for n in readable if n.workspace == ws}
        for params in ({"prefix": "/"}, {"parent": "/"}):
            got = c.call("GET", f"{base}/workspaces/{ws}/nodes", ok, allowed, params={**on, **params})
            if got is not None:
                c.found(mine, got, f"{ws} {params}")
    for node in repo.visible(branch):
        ok = 200 if node in readable else 404
        got = c.call("GET", f"{base}/workspaces/{node.workspace}/nodes{node.path}", ok, allowed, params=on)
        if got is not None:
            assert node.token in json.dumps(got)
        c.call("GET", f"{base}/neighbors", ok, allowed, params={**on, "node": node.address})
        c.call("POST", f"{base}/traverse", ok, allowed, params=on, json={"seeds": [node.address], "hops": 3})
        refs = c.call("GET", f"{base}/references", ok, allowed, params={**on, "target": node.address})
        if refs is not None:
            c.found({n.token for n in readable if n.ref is node}, refs, f"references to {node.address}")
    for b, src, dst in repo.relations:
        if b in repo.lineage(branch) and src in readable and dst in readable:
            got = c.call("GET", f"{base}/neighbors", 200, allowed, params={**on, "node": src.address})
            c.found({dst.token}, got, f"neighbors of {src.address}")
    if every:
        for mode in MODES:
            for granularity in ("chunk", "node"):
                got = c.call("POST", f"{base}/search", miss, allowed, params=on, echo=every,
                             json={"query": every, "k": 100, "mode": mode, "granularity": granularity})
                if got is not None:
                    c.found(readable_tokens, got, f"search {mode} {granularity}")
        got = c.call("POST", f"/api/functions/{repo.name}/search-documents/invoke", miss, allowed, echo=every,
                     json={"input": {"query": every, "k": 100}, "branch": branch})
        if got is not None:
            c.found(readable_tokens, got, "search-documents")
        for use_graph in (False, True):
            c.call("POST", f"/api/functions/{repo.name}/ask/invoke", miss, allowed, echo=every,
                   json={"input": {"question": every, "use_graph": use_graph}, "branch": branch})
        c.call("POST", f"/api/functions/{repo.name}/graph-context/invoke", miss, allowed, echo=every,
               json={"input": {"query": every, "hops": 3, "k": 100}, "branch": branch})
    log = c.call("GET", f"{base}/log", miss, allowed, params={**on, "limit": 1000})
    if log is not None:
        c.found(readable_tokens, log, "log")
    parent = repo.parents[branch]
    if parent is not None:
        both = w.sees(repo.name, parent)
        diff = c.call("GET", f"{base}/branches/{branch}/diff", 200 if seen and both else 404, allowed)
        if diff is not None:  # a diff compares the workspaces the key reads on both branches
            c.found({n.token for n in readable if n.branch == branch and w.sees(repo.name, parent, n.workspace)},
                   diff, "diff")
    if parent is not None:
        check_dry_run(c, repo, branch, parent)
    got = c.call("GET", f"{base}/branches/{branch}", miss, set())
    if got is not None:
        assert got["parent"] == (parent if parent is not None and w.sees(repo.name, parent) else None), got


def check_dry_run(c: Checker, repo: Repo, branch: str, parent: str) -> None:
    """A dry-run merge of ``branch`` into its parent: answered only when the key reads, on both
    branches, every workspace the merge would touch (the nodes written on the branch, the new
    relations' endpoints), and then it lists those nodes."""
    w = c.world
    before = {(src.token, dst.token) for b, src, dst in repo.relations if b in repo.lineage(parent)}
    new = [(src, dst) for b, src, dst in repo.relations if b == branch and (src.token, dst.token) not in before]
    touched = {n.workspace for n in repo.nodes if n.branch == branch} | \
        {x.workspace for edge in new for x in edge}
    ok = w.sees(repo.name, branch) and w.sees(repo.name, parent) and \
        all(w.sees(repo.name, b, ws) for b in (branch, parent) for ws in touched)
    got = c.call("POST", f"/api/repos/{repo.name}/branches/{branch}/merge", 200 if ok else 404,
                 w.allowed(repo, branch), json={"into": parent, "dry_run": True})
    if got is not None:
        c.found({n.token for n in repo.nodes if n.branch == branch}, got, "dry-run merge")


def check_repo(c: Checker, repo: Repo) -> None:
    """The repository-level reads: the branch list, the workspace list."""
    w = c.world
    base = f"/api/repos/{repo.name}"
    status = 200 if w.sees(repo.name) else 404
    branches = c.call("GET", f"{base}/branches", status, set())
    if branches is not None:
        assert sorted(b["name"] for b in branches["branches"]) == \
            sorted(b for b in repo.parents if w.sees(repo.name, b))
        hidden = [b for b in repo.parents if not w.sees(repo.name, b)]
        text = json.dumps(branches)
        assert not [b for b in hidden if f'"{b}"' in text], text
    workspaces = c.call("GET", f"{base}/workspaces", status, set())
    if workspaces is not None:
        assert sorted(x["name"] for x in workspaces["workspaces"]) == \
            sorted(ws for ws in repo.workspaces if w.sees(repo.name, workspace=ws))


def test_no_read_route_answers_a_token_the_key_cannot_read(app):
    """15 examples; across them, the keys were refused tokens and found others (not vacuous)."""
    totals = {"examples": 0, "requests": 0, "found": 0, "hidden": 0}

    @settings(max_examples=15, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(scenario=scenarios())
    def example(scenario):
        world = build(app, scenario)
        note(world.describe())
        c = Checker(app, world)
        listed = c.call("GET", "/api/repos", 200, set())
        names = {r.name for r in world.repos}
        assert sorted(r["name"] for r in listed["repos"] if r["name"] in names) == \
            sorted(n for n in names if world.sees(n))
        for repo in world.repos:
            check_repo(c, repo)
            for branch in repo.parents:
                check_branch(c, repo, branch)
        readable_somewhere = set().union(*(world.allowed(r, b) for r in world.repos for b in r.parents))
        totals["examples"] += 1
        totals["requests"] += c.requests
        totals["found"] += c.found_tokens
        totals["hidden"] += len(world.tokens - readable_somewhere)

    example()
    print(f"leak property: {totals}")
    assert totals["examples"] == 15 and totals["found"] > 0 and totals["hidden"] > 0, totals
