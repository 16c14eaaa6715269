"""The journeys' helper: kg over HTTP as its users meet it, a ledger of what it acknowledged, and
a reviewer who merges only what they were shown.

- :class:`Kg` is one repository over the HTTP API. Every write it makes must be answered 2xx,
  and is recorded as acknowledged on its branch (:meth:`Kg.check_acknowledged` reads each back;
  :meth:`Kg.check_searchable` settles the index, then finds each text by search).
- :class:`Snapshot` is a branch as the API reads it: every node (``node_type``, ``properties``,
  ``order``) of every workspace, and every relation (``neighbors``, out of each node, invalid
  ones included), keyed by ``workspace:/path`` and ``(from, type, to)``.
- :class:`Reviewer` does what a person does before merging: reads the target and the branch,
  the branch's diff and the merge's dry run (:meth:`Reviewer.review`), picks resolutions, then
  merges with ``if_plan`` set to the dry run's plan token (:meth:`Reviewer.merge`) and checks
  the target against what was shown (:meth:`Reviewer.check`):

  * the merge applied what the dry run said (``applied``, ``fast_forward``, ``base``);
  * nothing on the target changed that the reviewer was not shown (the diff, the dry run);
  * the target's nodes and relations equal the target before the merge plus the branch's
    diff (a modified node: the target's value with the branch's changed keys; an edge whose
    endpoint is gone: gone), with the resolutions taken; the dry run's ``applied`` lists
    exactly the nodes that differ, and counts exactly the relations;
  * the merge is one revision on the target whose logged changes are exactly the plan's;
  * the branch has nothing left to merge (its diff is empty).

  Whatever a dry run names beyond the branch's diff (a node or an edge lineage will write, in
  whatever shape the dry run gives it) is exempt from the value comparison but must be named:
  the check asserts what the reviewer was shown, not the dry run's field names.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from kg.graph.neighbors import MAX_LIMIT
from kg.store.history import MAX_LOG_CHANGES

#: ``workspace:/path``
Address = str
#: ``(from address, relation type, to address)``
RelKey = tuple[str, str, str]
#: How long :meth:`Kg.settle` waits for the background indexer before failing the test.
SETTLE_TIMEOUT_S = 60.0
#: A node's text fields, in the order :meth:`Kg.check_searchable` picks its query from.
TEXT_KEYS = ("content", "answer", "body", "text", "question", "title")
RELATION_FIELDS = ("weight", "properties", "valid_from", "valid_to", "invalidated_by")


def address(workspace: str, path: str) -> Address:
    """``workspace:/path``."""
    return f"{workspace}:{path}"


def split(addr: Address) -> tuple[str, str]:
    """``(workspace, path)`` of ``workspace:/path``."""
    workspace, _, path = addr.partition(":")
    return workspace, path


def named(body: Any) -> set[Address | RelKey]:
    """Every node address and edge a response names, whatever its shape: a dict with string
    ``workspace`` and ``path`` names a node, one with string ``from``, ``type`` and ``to`` an
    edge, at any depth."""
    out: set[Address | RelKey] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if isinstance(x.get("workspace"), str) and isinstance(x.get("path"), str):
                out.add(address(x["workspace"], x["path"]))
            if all(isinstance(x.get(k), str) for k in ("from", "type", "to")):
                out.add((x["from"], x["type"], x["to"]))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(body)
    return out


def text_of(properties: dict[str, Any]) -> str:
    """The node's text fields, joined, whitespace folded ('' when it has none)."""
    return " ".join(" ".join(str(properties[k]) for k in TEXT_KEYS if isinstance(properties.get(k), str)).split())


@dataclass(frozen=True)
class Snapshot:
    """A branch as the API reads it (see the module docstring)."""

    branch: str
    head: int
    nodes: dict[Address, dict[str, Any]]
    relations: dict[RelKey, dict[str, Any]]


class Kg:
    """One repository over HTTP, and the writes it acknowledged, per branch."""

    def __init__(self, client: Any, repo: str) -> None:
        self.client = client
        self.repo = repo
        self.api = f"/api/repos/{repo}"
        #: branch -> address -> the node as acknowledged (None: deleted)
        self.nodes_acked: dict[str, dict[Address, dict[str, Any] | None]] = {}
        #: branch -> edge -> the relation as acknowledged (None: removed)
        self.relations_acked: dict[str, dict[RelKey, dict[str, Any] | None]] = {}

    # -- requests -----------------------------------------------------------------------------

    def ok(self, response: Any, status: int | None = None) -> Any:
        """The JSON of a response answered ``status`` (any 2xx when None)."""
        what = f"{response.request.method} {response.request.url}: {response.status_code} {response.text[:2000]}"
        if status is None:
            assert 200 <= response.status_code < 300, what
        else:
            assert response.status_code == status, what
        return response.json() if response.content else None

    def create(self, *workspaces: str) -> None:
        """The repository and its workspaces."""
        self.ok(self.client.post("/api/repos", json={"name": self.repo}), 201)
        for ws in workspaces:
            self.ok(self.client.post(f"{self.api}/workspaces", json={"name": ws}), 201)

    def workspaces(self) -> list[str]:
        return [w["name"] for w in self.ok(self.client.get(f"{self.api}/workspaces"), 200)["workspaces"]]

    def branch(self, name: str, from_: str = "main") -> dict[str, Any]:
        """Create a branch; answered 201 with its parent."""
        out = self.ok(self.client.post(f"{self.api}/branches", json={"name": name, "from": from_}), 201)
        assert out["name"] == name and out["parent"] == from_, out
        return dict(out)

    def head(self, branch: str) -> int:
        return int(self.ok(self.client.get(f"{self.api}/branches/{branch}"), 200)["head_revision"])

    def _nodes_url(self, addr: Address) -> str:
        ws, path = split(addr)
        return f"{self.api}/workspaces/{ws}/nodes{path}"

    # -- writes: each answered 2xx is acknowledged ---------------------------------------------

    def put(self, branch: str, addr: Address, node_type: str, properties: dict[str, Any]) -> dict[str, Any]:
        """PUT a node (missing parents as folders); acknowledged as sent."""
        out = self.ok(self.client.put(self._nodes_url(addr), params={"branch": branch, "parents": True},
                                      json={"node_type": node_type, "properties": properties}))
        assert (out["node_type"], out["properties"]) == (node_type, properties), out
        self.acknowledge(branch, addr, {"node_type": node_type, "properties": properties, "order": out["order"]})
        return dict(out)

    def patch(self, branch: str, addr: Address, properties: dict[str, Any]) -> dict[str, Any]:
        """PATCH a node's properties; acknowledged as answered (each key patched as sent)."""
        out = self.ok(self.client.patch(self._nodes_url(addr), params={"branch": branch},
                                        json={"properties": properties}), 200)
        for key, value in properties.items():
            assert out["properties"].get(key) == value, (key, out)
        self.acknowledge(branch, addr, {"node_type": out["node_type"], "properties": out["properties"],
                                        "order": out["order"]})
        return dict(out)

    def delete(self, branch: str, addr: Address) -> None:
        out = self.ok(self.client.delete(self._nodes_url(addr), params={"branch": branch}), 200)
        assert out["deleted"] == 1, out
        self.acknowledge(branch, addr, None)

    def relate(self, branch: str, from_: Address, to: Address, rel_type: str, *, weight: float | None = None,
               properties: dict[str, Any] | None = None) -> dict[str, Any]:
        """Assert an edge; acknowledged as sent."""
        body = {"from": from_, "to": to, "type": rel_type, "weight": weight, "properties": properties or {}}
        out = self.ok(self.client.post(f"{self.api}/relations", params={"branch": branch}, json=body))
        assert (out["weight"], out["properties"]) == (weight, properties or {}), out
        self.relations_acked.setdefault(branch, {})[(from_, rel_type, to)] = {k: out[k] for k in RELATION_FIELDS}
        return dict(out)

    def invoke(self, name: str, payload: dict[str, Any], branch: str = "main") -> dict[str, Any]:
        """Invoke a function and wait for its output."""
        return dict(self.ok(self.client.post(f"/api/functions/{self.repo}/{name}/invoke",
                                             json={"input": payload, "branch": branch}), 200))

    def acknowledge(self, branch: str, addr: Address, value: dict[str, Any] | None) -> None:
        self.nodes_acked.setdefault(branch, {})[addr] = copy.deepcopy(value)

    # -- reads ---------------------------------------------------------------------------------

    def node(self, branch: str, addr: Address) -> dict[str, Any] | None:
        """The node's ``{"node_type", "properties", "order"}``; None when the branch has none."""
        r = self.client.get(self._nodes_url(addr), params={"branch": branch})
        if r.status_code == 404:
            assert r.json()["error"]["code"] == "not_found", r.text
            return None
        out = self.ok(r, 200)
        return {"node_type": out["node_type"], "properties": out["properties"], "order": out["order"]}

    def edges_from(self, branch: str, addr: Address, rel_type: str | None = None) -> dict[RelKey, dict[str, Any]]:
        """The edges out of a node (``neighbors``, invalid ones included)."""
        params: dict[str, Any] = {"node": addr, "branch": branch, "direction": "OUT", "include_invalid": True,
                                  "limit": MAX_LIMIT}
        if rel_type is not None:
            params["type"] = rel_type
        out = self.ok(self.client.get(f"{self.api}/neighbors", params=params), 200)
        assert out["truncated"] is False, out
        return {(addr, e["relation_type"], address(e["workspace"], e["path"])): {k: e[k] for k in RELATION_FIELDS}
                for e in out["neighbors"]}

    def snapshot(self, branch: str) -> Snapshot:
        """Every node and relation of the branch, read through the API."""
        head = self.head(branch)
        nodes: dict[Address, dict[str, Any]] = {}
        for ws in self.workspaces():
            cursor = None
            while True:
                params: dict[str, Any] = {"prefix": "/", "branch": branch, "limit": 1000}
                if cursor:
                    params["cursor"] = cursor
                page = self.ok(self.client.get(f"{self.api}/workspaces/{ws}/nodes", params=params), 200)
                for n in page["nodes"]:
                    nodes[address(ws, n["path"])] = {"node_type": n["node_type"], "properties": n["properties"],
                                                     "order": n["order"]}
                cursor = page.get("next_cursor")
                if not cursor:
                    break
        relations: dict[RelKey, dict[str, Any]] = {}
        for addr in nodes:
            relations.update(self.edges_from(branch, addr))
        assert self.head(branch) == head, f"{branch} moved while it was read"
        return Snapshot(branch, head, nodes, relations)

    def log(self, branch: str, limit: int = 1) -> list[dict[str, Any]]:
        """The branch's newest revisions, every change listed."""
        out = self.ok(self.client.get(f"{self.api}/log", params={"branch": branch, "limit": limit,
                                                                 "changes": MAX_LOG_CHANGES}), 200)
        return list(out["revisions"])

    def revisions(self, branch: str) -> int:
        """How many revisions the branch's log holds (its own and its ancestors' to the fork)."""
        return len(self.log(branch, limit=1000))

    def diff(self, branch: str, against: str) -> dict[str, Any]:
        return dict(self.ok(self.client.get(f"{self.api}/branches/{branch}/diff", params={"against": against}), 200))

    def settle(self) -> dict[str, Any]:
        """Wait until the indexer has nothing pending or running for the repository (the
        background indexer embeds what writes queued); none may have failed."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            status = self.ok(self.client.get(f"{self.api}/index/status"), 200)
            if status["pending"] == 0 and status["running"] == 0:
                assert status["failed"] == 0, status["failures"]
                return dict(status)
            if time.monotonic() > deadline:
                pytest.fail(f"the index did not catch up in {SETTLE_TIMEOUT_S:.0f} s: {status}")
            time.sleep(0.05)

    def search(self, branch: str, query: str, **options: Any) -> list[dict[str, Any]]:
        out = self.ok(self.client.post(f"{self.api}/search", params={"branch": branch},
                                       json={"query": query, "k": 20, **options}), 200)
        return list(out["results"])

    # -- what was acknowledged is there --------------------------------------------------------

    def check_acknowledged(self, branch: str) -> None:
        """Every node and edge acknowledged on the branch reads back as acknowledged."""
        for addr, value in self.nodes_acked.get(branch, {}).items():
            assert self.node(branch, addr) == value, f"acknowledged {addr} on {branch}"
        for (from_, rel_type, to), value in self.relations_acked.get(branch, {}).items():
            edges = self.edges_from(branch, from_, rel_type) if self.node(branch, from_) is not None else {}
            assert edges.get((from_, rel_type, to)) == value, f"acknowledged {from_} -{rel_type}-> {to} on {branch}"

    def check_searchable(self, branch: str) -> None:
        """Once the index has caught up, search on the branch finds every acknowledged node that
        has text, with a passage of its current text."""
        self.settle()
        for addr, value in self.nodes_acked.get(branch, {}).items():
            if value is None or not text_of(value["properties"]):
                continue
            query = next(value["properties"][k] for k in TEXT_KEYS if isinstance(value["properties"].get(k), str))
            ws, path = split(addr)
            hits = [h for h in self.search(branch, query, workspaces=[ws]) if h["path"] == path]
            assert hits, f"{addr} is not found on {branch} by its text {query!r}"
            current = text_of(value["properties"])
            assert all(" ".join(h["chunk_text"].split()) in current for h in hits), (addr, hits)


@dataclass
class Review:
    """What the reviewer was shown of a merge of ``branch`` into ``into``."""

    branch: str
    into: str
    before: Snapshot
    source: Snapshot
    diff: dict[str, Any]
    status: int
    shown: dict[str, Any]
    resolutions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def conflicts(self) -> list[dict[str, Any]]:
        """The conflicts the dry run listed ([] when it had a plan)."""
        return list(self.shown["error"]["details"]["conflicts"]) if self.status == 409 else []

    @property
    def plan(self) -> str:
        """The plan token the merge must be asked with."""
        return str(self.shown["plan"] if self.status == 200 else self.shown["error"]["details"]["plan"])

    def diff_names(self) -> set[Address | RelKey]:
        """The nodes and edges the branch's diff shows."""
        out: set[Address | RelKey] = set()
        for entries in self.diff["nodes"].values():
            out |= {address(e["workspace"], e["path"]) for e in entries}
        for entries in self.diff["relations"].values():
            out |= {(e["from"], e["type"], e["to"]) for e in entries}
        return out

    def beyond_diff(self) -> set[Address | RelKey]:
        """What the dry run names that the diff does not (what a merge would write besides the
        branch's changes)."""
        return named(self.shown) - self.diff_names()

    def expected(self) -> tuple[dict[Address, dict[str, Any]], dict[RelKey, dict[str, Any]]]:
        """The target after the merge as the reviewer was shown it: before, plus the diff, with
        the resolutions taken; an edge whose endpoint is gone is gone."""
        nodes = copy.deepcopy(self.before.nodes)
        relations = copy.deepcopy(self.before.relations)
        for e in self.diff["nodes"]["added"]:
            nodes[address(e["workspace"], e["path"])] = copy.deepcopy(self.source.nodes[address(e["workspace"],
                                                                                                 e["path"])])
        for e in self.diff["nodes"]["modified"]:
            addr = address(e["workspace"], e["path"])
            value = copy.deepcopy(nodes.get(addr) or self.source.nodes[addr])
            for key, change in e["changes"].items():
                if key == "kg:node_type":
                    value["node_type"] = change["new"]
                elif key == "kg:order":
                    value["order"] = change["new"]
                elif change["new"] is None:  # removed (the stories never store null)
                    value["properties"].pop(key, None)
                else:
                    value["properties"][key] = change["new"]
            nodes[addr] = value
        for e in self.diff["nodes"]["deleted"]:
            nodes.pop(address(e["workspace"], e["path"]), None)
        for kind in ("added", "modified"):
            for e in self.diff["relations"][kind]:
                key = (e["from"], e["type"], e["to"])
                relations[key] = copy.deepcopy(self.source.relations[key])
        for e in self.diff["relations"]["removed"]:
            relations.pop((e["from"], e["type"], e["to"]), None)
        for res in self.resolutions:
            if "path" in res:
                addr = address(res["workspace"], res["path"])
                side = {"ours": self.before.nodes, "theirs": self.source.nodes}.get(res["take"])
                if side is not None:
                    if addr in side:
                        nodes[addr] = copy.deepcopy(side[addr])
                    else:
                        nodes.pop(addr, None)
                else:
                    template = self.source.nodes.get(addr) or self.before.nodes[addr]
                    nodes[addr] = {**copy.deepcopy(template), "properties": copy.deepcopy(res["value"])}
            else:
                key = (res["from"], res["type"], res["to"])
                side = self.before.relations if res["take"] == "ours" else self.source.relations
                if key in side:
                    relations[key] = copy.deepcopy(side[key])
                else:
                    relations.pop(key, None)
        relations = {k: v for k, v in relations.items() if k[0] in nodes and k[2] in nodes}
        return nodes, relations


class Reviewer:
    """A person who reviews a branch, then merges exactly what they were shown."""

    def __init__(self, kg: Kg) -> None:
        self.kg = kg
        self.reviews: list[Review] = []

    def review(self, branch: str, into: str = "main", resolutions: list[dict[str, Any]] | None = None) -> Review:
        """Read the target, the branch, the branch's diff and the merge's dry run (with the
        resolutions picked so far). A dry run answers its plan (200) or the conflicts (409)."""
        kg = self.kg
        before = kg.snapshot(into)
        source = kg.snapshot(branch)
        diff = kg.diff(branch, into)
        r = kg.client.post(f"{kg.api}/branches/{branch}/merge",
                           json={"into": into, "dry_run": True, "resolutions": resolutions or []})
        assert r.status_code == 200 or (r.status_code == 409 and r.json()["error"]["code"] == "merge_conflict"), \
            r.text
        review = Review(branch, into, before, source, diff, r.status_code, r.json(), list(resolutions or []))
        assert (kg.head(into), kg.head(branch)) == (before.head, source.head), "a dry run wrote something"
        if review.status == 200:
            applied = review.shown["applied"]["nodes"]
            listed = {address(a["workspace"], a["path"]) for kind in ("added", "modified", "deleted", "kept")
                      for a in applied[kind]}
            assert listed <= review.diff_names(), f"the dry run lists nodes the diff does not show: " \
                                                  f"{sorted(listed - review.diff_names())}"
        self.reviews.append(review)
        return review

    def merge(self, review: Review, message: str | None = None) -> dict[str, Any]:
        """Merge what the review showed (``if_plan``), then check the target against it."""
        assert review.status == 200, f"a merge with conflicts left: {review.conflicts}"
        kg = self.kg
        body: dict[str, Any] = {"into": review.into, "if_plan": review.plan, "resolutions": review.resolutions}
        if message is not None:
            body["message"] = message
        result = dict(kg.ok(kg.client.post(f"{kg.api}/branches/{review.branch}/merge", json=body), 200))
        for key in ("applied", "fast_forward", "base"):
            assert result[key] == review.shown[key], (key, result[key], review.shown[key])
        after = kg.snapshot(review.into)
        self.check(review, result, after)
        for addr in set(review.before.nodes) | set(after.nodes):
            if review.before.nodes.get(addr) != after.nodes.get(addr):
                kg.acknowledge(review.into, addr, after.nodes.get(addr))
        for key in set(review.before.relations) | set(after.relations):
            if review.before.relations.get(key) != after.relations.get(key):
                kg.relations_acked.setdefault(review.into, {})[key] = copy.deepcopy(after.relations.get(key))
        return result

    def merge_refused_as_stale(self, review: Review) -> None:
        """The merge of a review one of whose branches moved since: 409 ``stale_plan``, and the
        target is as it was."""
        kg = self.kg
        before = kg.snapshot(review.into)
        r = kg.client.post(f"{kg.api}/branches/{review.branch}/merge",
                           json={"into": review.into, "if_plan": review.plan, "resolutions": review.resolutions})
        assert r.status_code == 409, r.text
        assert r.json()["error"]["details"]["reason"] == "stale_plan", r.text
        assert kg.snapshot(review.into) == before, "a refused merge wrote something"

    def check(self, review: Review, result: dict[str, Any], after: Snapshot) -> None:
        """The target after the merge is the target before plus what the reviewer was shown
        (see the module docstring)."""
        before, into = review.before, review.into
        shown = review.diff_names() | named(review.shown)
        beyond = review.beyond_diff()
        changed: set[Address | RelKey] = {a for a in set(before.nodes) | set(after.nodes)
                                          if before.nodes.get(a) != after.nodes.get(a)}
        changed |= {k for k in set(before.relations) | set(after.relations)
                    if before.relations.get(k) != after.relations.get(k)}
        unseen = changed - shown
        assert not unseen, f"the merge changed on {into} what the reviewer was not shown: {sorted(unseen, key=str)}"
        nodes, relations = review.expected()
        wrong = [(a, nodes.get(a), after.nodes.get(a)) for a in sorted(set(nodes) | set(after.nodes))
                 if a not in beyond and nodes.get(a) != after.nodes.get(a)]
        wrong += [(k, relations.get(k), after.relations.get(k))
                  for k in sorted(set(relations) | set(after.relations))
                  if k not in beyond and relations.get(k) != after.relations.get(k)]
        assert not wrong, f"{into} after the merge is not what the reviewer was shown " \
                          f"(what, expected, read): {wrong}"
        # The dry run's plan lists exactly what differs.
        resolved = {address(r["workspace"], r["path"]): r["take"] for r in review.resolutions if "path" in r}
        kept = {a for a, take in resolved.items() if take == "ours"}
        plan_nodes = {a: {"added": a not in before.nodes, "deleted": a not in nodes}
                      for a in set(before.nodes) | set(nodes) if a not in beyond
                      and (before.nodes.get(a) != nodes.get(a) or a in kept)}
        applied = result["applied"]
        listed = {kind: sorted(address(a["workspace"], a["path"]) for a in applied["nodes"][kind])
                  for kind in ("added", "modified", "deleted", "kept")}
        assert listed == {
            "added": sorted(a for a, s in plan_nodes.items() if s["added"] and a not in kept),
            "modified": sorted(a for a, s in plan_nodes.items() if not s["added"] and not s["deleted"]
                               and a not in kept),
            "deleted": sorted(a for a, s in plan_nodes.items() if s["deleted"] and a not in kept),
            "kept": sorted(kept)}, listed
        rel_kept = {(r["from"], r["type"], r["to"]) for r in review.resolutions if "path" not in r
                    and r["take"] == "ours"}
        upserted = {k for k in relations if k not in beyond and k not in rel_kept
                    and relations[k] != before.relations.get(k)}
        removed = {k for k in before.relations if k not in beyond and k not in relations}
        assert applied["relations"] == {"upserted": len(upserted), "removed": len(removed),
                                        "kept": len(rel_kept)}, (applied["relations"], upserted, removed)
        # One revision on the target, whose changes are the plan's.
        assert result["revision"] is not None and after.head == result["revision"] > before.head, \
            (result["revision"], before.head, after.head)
        (revision,) = self.kg.log(into, limit=1)
        assert revision["revision"] == result["revision"] and revision["branch"] == into, revision
        logged: set[Address | RelKey] = {address(c["workspace"], c["path"]) if c["kind"] == "node"
                                         else (c["from"], c["type"], c["to"]) for c in revision["changes"]}
        assert revision["change_count"] == len(revision["changes"]), revision
        planned = set(plan_nodes) | upserted | removed | rel_kept
        assert planned <= logged and logged - planned <= beyond, \
            f"the merge's revision logged {sorted(logged - planned, key=str)} beyond the plan and left out " \
            f"{sorted(planned - logged, key=str)}"
        # Nothing left to merge.
        left = self.kg.diff(review.branch, into)
        assert not any(left["nodes"].values()) and not any(left["relations"].values()), left
