"""Compile parsed statements to kg's use cases.

Each statement becomes a :class:`Plan`: the use cases it calls (what ``EXPLAIN`` answers) and
a function that calls them and shapes their answer into columns and rows. Planning binds the
``$n`` parameters in the tree and checks every construct; it reads and writes nothing. The use
cases are the ones the HTTP routes call, so keys, workspace scope, protected branches and the
unit of work apply as they do over HTTP. docs/guides/sql.md lists what compiles to what.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from kg.access import Action
from kg.context import Actor, Resources, run
from kg.errors import InvalidInput, NotFound
from kg.graph.neighbors import MAX_LIMIT as NEIGHBORS_MAX
from kg.ops import branches as branch_ops
from kg.ops import merge as merge_ops
from kg.ops import nodes as node_ops
from kg.ops import queries
from kg.ops import relations as relation_ops
from kg.rag.graph import neighbors as graph_neighbors
from kg.rag.search import SearchRequest, SearchResult, search_branch
from kg.sql.parse import Command, CreateBranch, MergeBranch, Relate, ShowBranches, Statement, refuse
from kg.store.paths import validate_path
from kg.store.references import MAX_LIMIT as REFERENCES_MAX
from kg.types.common import Schema
from kg.types.nodes import Node

Row = dict[str, Any]
Table = tuple[list[str], list[list[Any]]]

#: The search functions of ``FROM``: their mode.
SEARCH_FUNCTIONS = {"KNN": "vector", "HYBRID_SEARCH": "hybrid", "FULLTEXT_SEARCH": "fulltext"}
#: The named arguments each search function takes.
SEARCH_ARGUMENTS = {"workspaces", "granularity", "fulltext_weight", "vector_weight"}
#: What ``SELECT *`` answers, per source.
NODE_COLUMNS = ["node_id", "workspace_id", "path", "name", "parent_path", "node_type", "properties", "order",
                "revision"]
SEARCH_COLUMNS = ["workspace_id", "path", "node_id", "node_type", "chunk_index", "chunk_text", "score",
                  "vector_distance", "vector_rank", "fulltext_rank"]
NEIGHBOR_COLUMNS = ["workspace_id", "path", "node_id", "relation_type", "weight", "direction"]
REFERENCE_COLUMNS = ["workspace_id", "path", "node_id", "node_type", "property_key"]
#: The columns each source's rows have (``SELECT *`` answers the first lists).
NODE_KEYS = frozenset({*NODE_COLUMNS, "id", "workspace", "__order", "created_at", "updated_at"})
SEARCH_KEYS = frozenset({*SEARCH_COLUMNS, "workspace", "properties", "rerank_score"})
NEIGHBOR_KEYS = frozenset({*NEIGHBOR_COLUMNS, "workspace", "properties", "valid_from", "valid_to", "invalidated_by"})
REFERENCE_KEYS = NODE_KEYS | {"property_key"}
#: The clauses of a SELECT kg runs (sqlglot's argument names).
SELECT_CLAUSES = {"expressions", "from_", "where", "group", "having", "order", "limit", "offset", "distinct"}
#: The scan predicates: hierarchy functions of the workspace's rows.
TREE_FUNCTIONS = {"CHILD_OF", "DESCENDANT_OF", "PARENT_OF", "PATH_STARTS_WITH", "DEPTH"}
#: A prefix listing's page (the most queries.list_prefix returns at once).
PAGE = 10_000


@dataclass
class Step:
    """One use case a statement calls: its qualified name, its arguments (for ``EXPLAIN``),
    and whether it writes."""

    use_case: str
    arguments: dict[str, Any]
    write: bool = False


@dataclass
class Plan:
    """A compiled statement: the use cases it calls and how to run it."""

    statement: Statement
    steps: list[Step]
    execute: Callable[[], Table] = field(repr=False)
    #: ``(action, branch, workspace)`` the caller must be allowed (:func:`kg.context.permit`),
    #: checked for every statement before the first runs: a write a key may not make refuses the
    #: whole text, not the statements after those that ran. The use cases check again.
    checks: list[tuple[Action, str, str | None]] = field(default_factory=list)

    @property
    def writes(self) -> bool:
        """Whether it writes."""
        return any(step.write for step in self.steps)


@dataclass
class Target:
    """Where statements run: the services, the caller, the repository and the branch."""

    services: Resources
    caller: Actor
    repo: str
    branch: str


def plan(target: Target, statement: Statement, params: Sequence[Any]) -> Plan:
    """Compile ``statement`` with ``params`` bound to its ``$n``.

    Parameters
    ----------
    target : Target
        Where it runs and for whom.
    statement : kg.sql.parse.Statement
    params : sequence
        The values of ``$1``, ``$2``, ...

    Returns
    -------
    Plan

    Raises
    ------
    kg.errors.InvalidInput
        A construct kg does not run, a missing parameter, a value of the wrong type; the
        details name the construct and its position.
    """
    return _Planner(target, statement, params).plan()


def _name(node: exp.Expr) -> str:
    return node.name.upper() if isinstance(node, exp.Anonymous) else node.key.upper()


def _offset(node: exp.Expr) -> int | None:
    """Where ``node`` starts in the text: its leftmost token that sqlglot placed (``$n`` starts
    at its ``$``)."""
    starts = [int(sub.meta["start"]) for sub in node.walk() if getattr(sub, "_meta", None) and "start" in sub.meta]
    if not starts:
        return None
    return min(starts) - (1 if isinstance(node, exp.Parameter) else 0)


def _text(value: Any) -> str | None:
    """``->>``'s and ``::text``'s text of a JSON value."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _parent(path: str) -> str:
    head = path.rstrip("/").rsplit("/", 1)[0]
    return head or "/"


def _depth(path: str) -> int:
    return len([p for p in path.split("/") if p])


def _sort_key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return 1, int(value)
    if isinstance(value, int | float):
        return 1, value
    if isinstance(value, str):
        return 2, value
    return 3, json.dumps(value, sort_keys=True)


class _Planner:
    def __init__(self, target: Target, statement: Statement, params: Sequence[Any]) -> None:
        self.target = target
        self.statement = statement
        self.params = list(params)

    # --- errors and values ---------------------------------------------------------------

    def error(self, message: str, node: exp.Expr | None, construct: str | None = None) -> InvalidInput:
        """The 422 of ``node`` (None: the statement): its construct and where it starts."""
        statement = self.statement
        offset = _offset(node) if node is not None else None
        construct = construct or (_name(node) if node is not None else "statement")
        if offset is None and node is not None:
            # a construct sqlglot did not place (``?``): its first occurrence in the statement
            found = statement.text.find(node.sql(dialect="postgres"))
            offset = statement.offset + found if found >= 0 else None
        if offset is None:
            offset = statement.offset
        return refuse(message, statement.source, offset, construct, statement.index)

    def param(self, node: exp.Parameter) -> Any:
        index = node.this.this if isinstance(node.this, exp.Literal) else None
        if index is None or not str(index).isdigit():
            raise self.error("parameters are $1, $2, ...", node, "PARAMETER")
        n = int(index)
        if not 1 <= n <= len(self.params):
            raise self.error(f"${n} has no value ({len(self.params)} params given)", node, f"${n}")
        return self.params[n - 1]

    def constant(self, node: exp.Expr | None, what: str) -> Any:
        """The value of a node that needs no row (a literal, a cast literal, a parameter)."""
        if node is None:
            return None
        return _Eval(self, {}).value(node)

    def string(self, node: exp.Expr | None, what: str) -> str:
        value = self.constant(node, what)
        if not isinstance(value, str):
            raise self.error(f"{what} must be a string", node, what)
        return value

    def optional_string(self, node: exp.Expr | None, what: str) -> str | None:
        return None if node is None or self.constant(node, what) is None else self.string(node, what)

    def integer(self, node: exp.Expr | None, what: str) -> int:
        value = self.constant(node, what)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(f"{what} must be an integer >= 0", node, what)
        return value

    # --- statements -------------------------------------------------------------------------

    def plan(self) -> Plan:
        node = self.statement.node
        if self.statement.at_revision is not None and not isinstance(node, exp.Select):
            raise self.error("AS OF REVISION applies to a SELECT", None, "AS OF REVISION")
        if isinstance(node, exp.Select):
            return self.select(node)
        if isinstance(node, exp.Insert):
            return self.insert(node)
        if isinstance(node, exp.Update):
            return self.update(node)
        if isinstance(node, exp.Delete):
            return self.delete(node)
        if isinstance(node, exp.Expr):
            raise self.error(f"{_name(node)} statements are not supported", None, _name(node))
        return self.command(node)

    def _plan(self, steps: list[Step], execute: Callable[[], Table],
              checks: list[tuple[Action, str, str | None]] | None = None) -> Plan:
        return Plan(self.statement, steps, execute, checks or [])

    # --- commands ---------------------------------------------------------------------------

    def command(self, node: Command) -> Plan:
        t = self.target
        if isinstance(node, ShowBranches):
            step = Step("kg.ops.branches.list_branches", {"repo": t.repo})
            return self._plan([step], lambda: _dict_table(
                branch_ops.list_branches(t.services, t.caller, t.repo).branches))
        if isinstance(node, CreateBranch):
            name = self.string(node.name, "branch name")
            from_branch = self.optional_string(node.from_branch, "branch name") or t.branch
            at_revision = None if node.at_revision is None else self.integer(node.at_revision, "revision")
            args = {"repo": t.repo, "name": name, "from_branch": from_branch, "at_revision": at_revision}
            return self._plan([Step("kg.ops.branches.create_branch", args, write=True)],
                              lambda: _dict_table([run(t.services, t.caller, branch_ops.create_branch, t.repo,
                                                       name=name, from_branch=from_branch,
                                                       at_revision=at_revision)]),
                              [("read", from_branch, None), ("branch:create", name, None)])
        if isinstance(node, MergeBranch):
            source = self.string(node.source, "branch name")
            into = self.optional_string(node.into, "branch name")
            args = {"repo": t.repo, "source": source, "into": into}
            merge_checks: list[tuple[Action, str, str | None]] = [("read", source, None)]
            if into:
                merge_checks.append(("merge", into, None))
            return self._plan([Step("kg.ops.merge.merge_branch", args, write=True)],
                              lambda: _dict_table([run(t.services, t.caller, merge_ops.merge_branch, t.repo,
                                                       source, into, message=None)]),
                              merge_checks)
        assert isinstance(node, Relate)
        return self.relate(node)

    def relate(self, node: Relate) -> Plan:
        t = self.target
        ends = []
        spaces = []
        for path, workspace in ((node.from_path, node.from_workspace), (node.to_path, node.to_workspace)):
            if workspace is None:
                raise self.error("an endpoint needs IN WORKSPACE '...'", path, "IN WORKSPACE")
            spaces.append(self.string(workspace, "workspace"))
            ends.append(f"{spaces[-1]}:{self.string(path, 'path')}")
        from_, to = ends
        checks: list[tuple[Action, str, str | None]] = [("write", t.branch, spaces[0]),
                                                        ("read", t.branch, spaces[1])]
        rel_type = self.optional_string(node.rel_type, "relation type") if node.unrelate \
            else self.string(node.rel_type, "relation type")
        if node.unrelate:
            unrelate_args = {"repo": t.repo, "branch": t.branch, "from": from_, "to": to, "type": rel_type}
            return self._plan([Step("kg.ops.relations.unrelate", unrelate_args, write=True)],
                              lambda: _dict_table([run(t.services, t.caller, relation_ops.unrelate, t.repo,
                                                       t.branch, from_, to, rel_type)]), checks)
        weight = self.constant(node.weight, "weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float)):
            raise self.error("WEIGHT must be a number", node.weight, "WEIGHT")
        args: dict[str, Any] = {"repo": t.repo, "branch": t.branch, "from": from_, "to": to, "type": rel_type,
                                "weight": weight}
        relation_type = self.string(node.rel_type, "relation type")

        def execute() -> Table:
            relation, _ = run(t.services, t.caller, relation_ops.relate, t.repo, t.branch, from_, to, relation_type,
                              weight=None if weight is None else float(weight))
            return _dict_table([relation])

        return self._plan([Step("kg.ops.relations.relate", args, write=True)], execute, checks)

    # --- writes ------------------------------------------------------------------------------

    def _clauses(self, node: exp.Expr, allowed: set[str]) -> None:
        for key, value in node.args.items():
            if key in allowed or value in (None, False, []):
                continue
            sub = value[0] if isinstance(value, list) else value
            at = None if key == "with_" or not isinstance(sub, exp.Expr) else sub  # WITH comes first
            raise self.error(f"{key.rstrip('_').upper()} is not supported here", at, key.rstrip("_").upper())

    def workspace(self, table: exp.Expr | None) -> str:
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) \
                or table.args.get("db") or table.args.get("catalog"):
            raise self.error("expected a workspace name ('knowledge')", table, "FROM")
        for key, value in table.args.items():
            if key != "this" and value not in (None, False, []):
                construct = "ALIAS" if key == "alias" else key.rstrip("_").upper()
                raise self.error(f"a workspace takes no {construct} here", table, construct)
        return str(table.this.this)

    def insert(self, node: exp.Insert) -> Plan:
        t = self.target
        self._clauses(node, {"this", "expression"})
        schema = node.this
        if not isinstance(schema, exp.Schema):
            raise self.error("INSERT needs its column list: (path, name, node_type, properties)", node, "INSERT")
        workspace = self.workspace(schema.this)
        columns = [c.name.lower() for c in schema.expressions]
        known = {"path", "name", "node_type", "properties", "__order", "order"}
        for column, ident in zip(columns, schema.expressions, strict=True):
            if column not in known:
                raise self.error(f"unknown column {column!r} (path, name, node_type, properties, __order)",
                                 ident, column)
        if "path" not in columns or "node_type" not in columns:
            raise self.error("INSERT needs the columns path and node_type", schema, "INSERT")
        values = node.expression
        if not isinstance(values, exp.Values):
            raise self.error("INSERT takes VALUES (...)", values, f"INSERT ... {_name(values)}")
        upserts = []
        for row in values.expressions:
            items = row.expressions if isinstance(row, exp.Tuple) else [row]
            if len(items) != len(columns):
                raise self.error(f"{len(items)} values for {len(columns)} columns", row, "VALUES")
            record = {c: self.constant(v, c) for c, v in zip(columns, items, strict=True)}
            upserts.append(self._node_record(workspace, record, row))
        args = {"repo": t.repo, "branch": t.branch, "upserts": len(upserts), "workspace": workspace,
                "parents": True}

        def execute() -> Table:
            out = run(t.services, t.caller, node_ops.batch, t.repo, t.branch, upserts=upserts, parents=True,
                      message=f"SQL: INSERT INTO {workspace}")
            return _written(out.upserted, out.revision)

        return self._plan([Step("kg.ops.nodes.batch", args, write=True)], execute,
                          [("write", t.branch, workspace)])

    def _node_record(self, workspace: str, record: dict[str, Any], at: exp.Expr) -> dict[str, Any]:
        path = record.get("path")
        if not isinstance(path, str):
            raise self.error("path must be a string", at, "path")
        node_type = record.get("node_type")
        if not isinstance(node_type, str):
            raise self.error("node_type must be a string", at, "node_type")
        name = record.get("name")
        if name is not None and name != path.rstrip("/").rsplit("/", 1)[-1]:
            raise self.error(f"name {name!r} is not the last segment of {path!r}", at, "name")
        properties = record.get("properties", {})
        if properties is None:
            properties = {}
        if isinstance(properties, str):
            properties = self._json(properties, at)
        if not isinstance(properties, dict):
            raise self.error("properties must be a JSON object ('{...}'::jsonb)", at, "properties")
        order = record.get("__order", record.get("order"))
        if order is not None and (isinstance(order, bool) or not isinstance(order, int | float)):
            raise self.error("__order must be a number", at, "__order")
        return {"workspace": workspace, "path": path, "node_type": node_type, "properties": properties,
                "order": order}

    def _json(self, text: str, at: exp.Expr | None) -> Any:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise self.error(f"invalid JSON: {exc}", at, "jsonb") from None

    def _path_only(self, where: exp.Expr | None, what: str) -> str:
        cond = where.this if isinstance(where, exp.Where) else None
        if isinstance(cond, exp.EQ):
            for a, b in ((cond.this, cond.expression), (cond.expression, cond.this)):
                if isinstance(a, exp.Column) and a.name.lower() == "path" and not a.table:
                    path = self.constant(b, "path")
                    if isinstance(path, str):
                        return path
        raise self.error(f"{what} takes WHERE path = '...'", cond if cond is not None else where, "WHERE")

    def update(self, node: exp.Update) -> Plan:
        t = self.target
        self._clauses(node, {"this", "expressions", "where"})
        workspace = self.workspace(node.this)
        path = self._path_only(node.args.get("where"), "UPDATE")
        changes: dict[str, Any] = {}
        for item in node.expressions:
            if not isinstance(item, exp.EQ) or not isinstance(item.this, exp.Column):
                raise self.error("SET takes column = value", item, "SET")
            column = item.this.name.lower()
            if column not in ("properties", "node_type", "__order", "order"):
                raise self.error(f"cannot SET {column!r} (properties, node_type, __order)", item.this, column)
            changes["order" if column == "__order" else column] = self.constant(item.expression, column)
        if "properties" in changes:
            props = changes["properties"]
            changes["properties"] = self._json(props, node) if isinstance(props, str) else props
            if not isinstance(changes["properties"], dict):
                raise self.error("properties must be a JSON object ('{...}'::jsonb)", node, "properties")
        if "node_type" in changes and not isinstance(changes["node_type"], str):
            raise self.error("node_type must be a string", node, "node_type")
        args = {"repo": t.repo, "branch": t.branch, "workspace": workspace, "path": path, **changes}

        def execute() -> Table:
            current = self._current(workspace, path)
            if current is None:
                return _written([], None)
            node_type = str(changes.get("node_type", current.node_type))
            properties: dict[str, Any] = changes["properties"] if "properties" in changes else current.properties
            node_out, _ = run(t.services, t.caller, node_ops.put_node, t.repo, t.branch, workspace, path,
                              node_type=node_type, properties=properties,
                              order=changes.get("order", current.order), if_revision=current.revision,
                              message=f"SQL: UPDATE {workspace}")
            return _written([node_out], node_out.revision)

        return self._plan([Step("kg.ops.queries.get_node", {"workspace": workspace, "path": path}),
                           Step("kg.ops.nodes.put_node", args, write=True)], execute,
                          [("write", t.branch, workspace)])

    def _current(self, workspace: str, path: str, at_revision: int | None = None) -> Node | None:
        """The node at ``path`` (None: no such node, or a value that is no path at all)."""
        t = self.target
        try:
            validate_path(path)
            return queries.get_node(t.services, t.caller, t.repo, t.branch, workspace, path, at_revision=at_revision)
        except (NotFound, InvalidInput) as exc:
            # No row, once the read the caller asked for is one it may make: a branch, workspace
            # or revision that does not exist or that it may not read stays the error it is over
            # HTTP (the same read of the workspace's first node answers it).
            queries.list_prefix(t.services, t.caller, t.repo, t.branch, workspace, "/", limit=1,
                                at_revision=at_revision)
            if isinstance(exc, InvalidInput) and _is_path(path):
                raise
            return None

    def delete(self, node: exp.Delete) -> Plan:
        t = self.target
        self._clauses(node, {"this", "where"})
        workspace = self.workspace(node.this)
        path = self._path_only(node.args.get("where"), "DELETE")
        args = {"repo": t.repo, "branch": t.branch, "workspace": workspace, "path": path}

        def execute() -> Table:
            if self._current(workspace, path) is None:
                return ["path", "deleted", "revision"], []
            out = run(t.services, t.caller, node_ops.delete_node, t.repo, t.branch, workspace, path,
                      message=f"SQL: DELETE FROM {workspace}")
            return ["path", "deleted", "revision"], [[path, out.deleted, out.revision]]

        return self._plan([Step("kg.ops.nodes.delete_node", args, write=True)], execute,
                          [("write", t.branch, workspace)])

    # --- SELECT -------------------------------------------------------------------------------

    def select(self, node: exp.Select) -> Plan:
        self._clauses(node, SELECT_CLAUSES)
        distinct = node.args.get("distinct")
        if distinct is not None and distinct.args.get("on") is not None:
            raise self.error("DISTINCT ON is not supported", distinct, "DISTINCT ON")
        source = node.args.get("from_")
        if source is None:
            raise self.error("a SELECT needs FROM a workspace or a function", node, "FROM")
        table = source.this
        where = node.args.get("where")
        condition = where.this if where is not None else None
        shaper = _Shaper(self, node)
        at_revision = self.statement.at_revision
        if isinstance(table, exp.Table) and isinstance(table.this, exp.Anonymous | exp.Func) \
                and not isinstance(table.this, exp.Identifier):
            function = table.this
            name = _name(function)
            for key, value in table.args.items():
                if key not in ("this", "alias") and value not in (None, False, []):
                    raise self.error(f"{key.rstrip('_').upper()} is not supported here", table,
                                     key.rstrip("_").upper())
            if name in SEARCH_FUNCTIONS:
                fetch, steps, columns = self.search_source(function, SEARCH_FUNCTIONS[name], at_revision)
            elif name == "NEIGHBORS":
                fetch, steps, columns = self.neighbors_source(function, at_revision)
            elif name == "REFERENCES":
                fetch, steps, columns = self.references_source(function, at_revision)
            else:
                raise self.error(f"unknown table function {name}", function, name)
        elif isinstance(table, exp.Table):
            workspace = self.workspace(table)
            vector = [d for d in node.find_all(exp.CosineDistance)]
            if vector:
                fetch, steps, columns = self.vector_scan(workspace, vector, condition, node, at_revision)
            else:
                fetch, steps, columns = self.scan(workspace, condition, at_revision)
        else:
            raise self.error("FROM takes a workspace or a function", table, _name(table))
        shaper.check(_KNOWN[tuple(columns)])
        return self._plan(steps, lambda: shaper.shape(fetch(), columns))

    def _function_args(self, function: exp.Expr) -> tuple[list[exp.Expr], dict[str, exp.Expr]]:
        positional: list[exp.Expr] = []
        named: dict[str, exp.Expr] = {}
        for arg in function.expressions if isinstance(function, exp.Anonymous) else list(function.args.values()):
            if isinstance(arg, exp.Kwarg):
                named[arg.this.name.lower()] = arg.expression
            elif named:
                raise self.error("positional arguments come before named ones", arg, "ARGUMENT")
            else:
                positional.append(arg)
        return positional, named

    def search_source(self, function: exp.Expr, mode: str,
                      at_revision: int | None) -> tuple[Callable[[], list[Row]], list[Step], list[str]]:
        name = _name(function)
        positional, named = self._function_args(function)
        if len(positional) != 2:
            raise self.error(f"{name} takes (query, k, name => value, ...)", function, name)
        for key, value in named.items():
            if key not in SEARCH_ARGUMENTS or (key.endswith("_weight") and mode != "hybrid"):
                raise self.error(f"{name} takes no argument {key!r}", value, key)
        raw: dict[str, Any] = {"query": self.constant(positional[0], "query"),
                               "k": self.constant(positional[1], "k"), "mode": mode,
                               "granularity": self.constant(named["granularity"], "granularity")
                               if "granularity" in named else "node"}
        if "workspaces" in named:
            raw["workspaces"] = self._workspaces(named["workspaces"])
        for key in ("fulltext_weight", "vector_weight"):
            if key in named:
                weight = self.constant(named[key], key)
                raw[key] = float(weight) if isinstance(weight, int) and not isinstance(weight, bool) else weight
        request = SearchRequest.parse(raw)
        return self._search(request, at_revision), [self._search_step(request, at_revision)], SEARCH_COLUMNS

    def _workspaces(self, node: exp.Expr) -> list[str]:
        value = self.constant(node, "workspaces")
        if isinstance(value, str):
            return [w.strip() for w in value.split(",") if w.strip()]
        if isinstance(value, list) and all(isinstance(w, str) for w in value):
            return value
        raise self.error("workspaces takes 'a, b'", node, "workspaces")

    def _search_step(self, request: SearchRequest, at_revision: int | None) -> Step:
        t = self.target
        return Step("kg.rag.search.search_branch",
                    {"repo": t.repo, "branch": t.branch, "at_revision": at_revision,
                     "request": request.model_dump(exclude_unset=True)})

    def _search(self, request: SearchRequest, at_revision: int | None) -> Callable[[], list[Row]]:
        t = self.target

        def fetch() -> list[Row]:
            answer = search_branch(t.services, t.caller, t.repo, t.branch, request, at_revision=at_revision)
            return [_search_row(r) for r in answer.results]

        return fetch

    def vector_scan(self, workspace: str, distances: list[exp.CosineDistance], condition: exp.Expr | None,
                    node: exp.Select, at_revision: int | None
                    ) -> tuple[Callable[[], list[Row]], list[Step], list[str]]:
        queries_ = set()
        for d in distances:
            left, right = d.this, d.expression
            if not (isinstance(left, exp.Column) and left.name.lower() == "embedding"
                    and isinstance(right, exp.Anonymous) and right.name.upper() == "EMBEDDING"
                    and len(right.expressions) == 1):
                raise self.error("the vector distance is embedding <=> EMBEDDING('text')", d, "<=>")
            queries_.add(self.string(right.expressions[0], "EMBEDDING's text"))
        if len(queries_) != 1:
            raise self.error("one EMBEDDING('text') per statement", distances[-1], "EMBEDDING")
        limit = node.args.get("limit")
        if limit is None:
            raise self.error("a vector scan needs LIMIT (its k)", node, "LIMIT")
        k = self.integer(limit.expression, "LIMIT")
        offset = node.args.get("offset")
        if offset is not None:
            k += self.integer(offset.expression, "OFFSET")
        raw: dict[str, Any] = {"query": queries_.pop(), "k": max(k, 1), "mode": "vector", "granularity": "node",
                               "workspaces": [workspace]}
        where: dict[str, Any] = {}
        for term in _conjuncts(condition):
            self._push(term, raw, where)
        if where:
            raw["where"] = where
        request = SearchRequest.parse(raw)
        return self._search(request, at_revision), [self._search_step(request, at_revision)], SEARCH_COLUMNS

    def _push(self, term: exp.Expr, raw: dict[str, Any], where: dict[str, Any]) -> None:
        """Push one predicate of a vector scan into the search request (before the KNN)."""
        if isinstance(term, exp.Anonymous) and term.name.upper() in ("PATH_STARTS_WITH", "DESCENDANT_OF") \
                and "path_prefix" not in raw:
            args = term.expressions
            if term.name.upper() == "PATH_STARTS_WITH" and len(args) == 2 and isinstance(args[0], exp.Column) \
                    and args[0].name.lower() == "path":
                raw["path_prefix"] = self.string(args[1], "prefix")
                raw["path_prefix_mode"] = "raw"
                return
            if term.name.upper() == "DESCENDANT_OF" and len(args) == 1:
                prefix = self.string(args[0], "path")
                raw["path_prefix"] = prefix.rstrip("/") + "/"
                return
        if isinstance(term, exp.EQ):
            left, right = term.this, term.expression
            if isinstance(left, exp.Column) and left.name.lower() == "node_type" and "node_type" not in raw:
                raw["node_type"] = self.string(right, "node_type")
                return
            if isinstance(left, exp.JSONExtractScalar) and isinstance(left.this, exp.Column) \
                    and left.this.name.lower() == "properties":
                key = self.constant(left.expression, "key")
                value = self.constant(right, "value")
                if isinstance(key, str) and isinstance(value, str):
                    where[key] = value
                    return
        raise self.error("a vector scan's WHERE takes PATH_STARTS_WITH(path, ...), DESCENDANT_OF(...), "
                         "node_type = ... and properties->>'key' = '...', joined by AND", term, _name(term))

    def neighbors_source(self, function: exp.Expr,
                         at_revision: int | None) -> tuple[Callable[[], list[Row]], list[Step], list[str]]:
        t = self.target
        positional, named = self._function_args(function)
        if named or not 1 <= len(positional) <= 3:
            raise self.error("NEIGHBORS takes ('workspace:/path', 'OUT' | 'IN' | 'BOTH', type or NULL)",
                             function, "NEIGHBORS")
        address = self.string(positional[0], "address")
        direction = self.string(positional[1], "direction") if len(positional) > 1 else "BOTH"
        rel_type = self.optional_string(positional[2], "relation type") if len(positional) > 2 else None
        types = [x.strip() for x in rel_type.split(",") if x.strip()] if rel_type else None
        args = {"repo": t.repo, "branch": t.branch, "address": address, "direction": direction.upper(),
                "types": types, "at_revision": at_revision, "limit": NEIGHBORS_MAX}

        def fetch() -> list[Row]:
            out = graph_neighbors(t.services, t.caller, t.repo, t.branch, address, direction=direction.upper(),
                                  types=types, limit=NEIGHBORS_MAX, at_revision=at_revision)
            return [{**r, "workspace_id": r["workspace"]} for r in out["neighbors"]]

        return fetch, [Step("kg.rag.graph.neighbors", args)], NEIGHBOR_COLUMNS

    def references_source(self, function: exp.Expr,
                          at_revision: int | None) -> tuple[Callable[[], list[Row]], list[Step], list[str]]:
        t = self.target
        positional, named = self._function_args(function)
        if named or len(positional) != 1:
            raise self.error("REFERENCES takes ('workspace:/path')", function, "REFERENCES")
        address = self.string(positional[0], "address")
        args = {"repo": t.repo, "branch": t.branch, "target": address, "at_revision": at_revision,
                "limit": REFERENCES_MAX}

        def fetch() -> list[Row]:
            found = queries.references(t.services, t.caller, t.repo, t.branch, address, limit=REFERENCES_MAX,
                                       at_revision=at_revision)
            return [_node_row(r) for r in found.references]

        return fetch, [Step("kg.ops.queries.references", args)], REFERENCE_COLUMNS

    def scan(self, workspace: str, condition: exp.Expr | None,
             at_revision: int | None) -> tuple[Callable[[], list[Row]], list[Step], list[str]]:
        """A workspace's rows: the narrowest listing a conjunct of WHERE allows (the whole WHERE
        is then applied to its rows)."""
        t = self.target
        base = {"repo": t.repo, "branch": t.branch, "workspace": workspace, "at_revision": at_revision}
        for term in _conjuncts(condition):
            if isinstance(term, exp.EQ):
                for a, b in ((term.this, term.expression), (term.expression, term.this)):
                    if isinstance(a, exp.Column) and a.name.lower() == "path" and not a.table:
                        path = self.constant(b, "path")
                        if isinstance(path, str):
                            return (self._one(workspace, path, at_revision),
                                    [Step("kg.ops.queries.get_node", base | {"path": path})], NODE_COLUMNS)
            if isinstance(term, exp.Anonymous) and term.name.upper() in ("CHILD_OF", "DESCENDANT_OF", "PARENT_OF"):
                if len(term.expressions) != 1:
                    raise self.error(f"{term.name.upper()} takes one path", term, term.name.upper())
                path = self.string(term.expressions[0], "path")
                kind = term.name.upper()
                if kind == "CHILD_OF":
                    return (self._children(workspace, path, at_revision),
                            [Step("kg.ops.queries.list_children", base | {"parent": path})], NODE_COLUMNS)
                if kind == "PARENT_OF":
                    parent = _parent(path)
                    if parent == "/":
                        return (lambda: []), [], NODE_COLUMNS
                    return (self._one(workspace, parent, at_revision),
                            [Step("kg.ops.queries.get_node", base | {"path": parent})], NODE_COLUMNS)
                prefix = path.rstrip("/") + "/"
                return (self._prefix(workspace, prefix, "segments", at_revision),
                        [Step("kg.ops.queries.list_prefix", base | {"prefix": prefix, "mode": "segments"})],
                        NODE_COLUMNS)
            if isinstance(term, exp.Anonymous) and term.name.upper() == "PATH_STARTS_WITH" \
                    and len(term.expressions) == 2 and isinstance(term.expressions[0], exp.Column) \
                    and term.expressions[0].name.lower() == "path":
                prefix = self.string(term.expressions[1], "prefix")
                if prefix.startswith("/"):
                    return (self._prefix(workspace, prefix, "raw", at_revision),
                            [Step("kg.ops.queries.list_prefix", base | {"prefix": prefix, "mode": "raw"})],
                            NODE_COLUMNS)
        return (self._prefix(workspace, "/", "segments", at_revision),
                [Step("kg.ops.queries.list_prefix", base | {"prefix": "/", "mode": "segments"})], NODE_COLUMNS)

    def _one(self, workspace: str, path: str, at_revision: int | None) -> Callable[[], list[Row]]:
        def fetch() -> list[Row]:
            found = self._current(workspace, path, at_revision)
            return [] if found is None else [_node_row(found)]

        return fetch

    def _children(self, workspace: str, parent: str, at_revision: int | None) -> Callable[[], list[Row]]:
        t = self.target

        def fetch() -> list[Row]:
            if parent != "/" and self._current(workspace, parent, at_revision) is None:
                return []
            rows = queries.list_children(t.services, t.caller, t.repo, t.branch, workspace, parent,
                                         at_revision=at_revision)
            return [_node_row(r) | {"__order": i} for i, r in enumerate(rows)]

        return fetch

    def _prefix(self, workspace: str, prefix: str, mode: str, at_revision: int | None) -> Callable[[], list[Row]]:
        t = self.target

        def fetch() -> list[Row]:
            out: list[Row] = []
            cursor = None
            while True:
                page = queries.list_prefix(t.services, t.caller, t.repo, t.branch, workspace, prefix,
                                           limit=PAGE, cursor=cursor, at_revision=at_revision, mode=mode)
                out.extend(_node_row(r) for r in page.nodes)
                cursor = page.next_cursor
                if cursor is None:
                    return out

        return fetch


def _is_path(value: str) -> bool:
    try:
        validate_path(value)
    except InvalidInput:
        return False
    return True


def _conjuncts(condition: exp.Expr | None) -> list[exp.Expr]:
    if condition is None:
        return []
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    return [condition]


def _node_row(node: Node) -> Row:
    """A node (a :class:`~kg.types.nodes.Reference` with its ``property_key``) as a row: its JSON,
    ``node_id``, ``workspace_id`` and ``__order`` added."""
    return {**node.as_json(), "node_id": node.id, "workspace_id": node.workspace, "__order": node.order}


def _search_row(result: SearchResult) -> Row:
    return {**result.as_dict(), "workspace_id": result.workspace, "properties": result.properties}


def _written(nodes: list[Node], revision: int | None) -> Table:
    return (["workspace_id", "path", "node_id", "node_type", "revision"],
            [[n.workspace, n.path, n.id, n.node_type, revision] for n in nodes])


def _dict_table(results: Sequence[Schema]) -> Table:
    """Use case results as a table: a column per key of their JSON, in order."""
    rows = [r.as_json() for r in results]
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    return columns, [[row.get(c) for c in columns] for row in rows]


_KNOWN = {tuple(NODE_COLUMNS): NODE_KEYS, tuple(SEARCH_COLUMNS): SEARCH_KEYS,
          tuple(NEIGHBOR_COLUMNS): NEIGHBOR_KEYS, tuple(REFERENCE_COLUMNS): REFERENCE_KEYS}
_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)


class _Shaper:
    """The SELECT's clauses over fetched rows: WHERE, GROUP BY / aggregates, HAVING, ORDER BY,
    DISTINCT, OFFSET / LIMIT, and the select list."""

    def __init__(self, planner: _Planner, node: exp.Select) -> None:
        self.p = planner
        self.node = node
        self.where = node.args["where"].this if node.args.get("where") is not None else None
        self.group = list(node.args["group"].expressions) if node.args.get("group") is not None else []
        self.having = node.args["having"].this if node.args.get("having") is not None else None
        self.aggregate = bool(self.group) or any(e.find(*_AGGREGATES) for e in node.expressions) \
            or self.having is not None
        order = node.args.get("order")
        self.order = list(order.expressions) if order is not None else []
        self.limit = planner.integer(node.args["limit"].expression, "LIMIT") if node.args.get("limit") else None
        self.offset = planner.integer(node.args["offset"].expression, "OFFSET") if node.args.get("offset") else 0

    def check(self, known: frozenset[str]) -> None:
        """Refuse what cannot run, before anything does: each expression is tried without a
        row (unknown columns, functions and constructs raise)."""
        aliases = {e.alias.lower() for e in self.node.expressions if isinstance(e, exp.Alias)}
        for sub in [*self.node.expressions, *self.group]:
            if not isinstance(sub, exp.Star):
                _Eval(self.p, {}, check=known).value(sub)
        for sub in self.order:
            _Eval(self.p, {}, check=known | aliases | ({"count"} if self.aggregate else set())).value(sub.this)
        for cond in (self.where, self.having):
            if cond is not None:
                _Eval(self.p, {}, check=known).value(cond)
        if self.aggregate:
            keys = {g.sql() for g in self.group}
            for e in self.node.expressions:
                inner = e.this if isinstance(e, exp.Alias) else e
                if not inner.find(*_AGGREGATES) and inner.sql() not in keys:
                    raise self.p.error(f"{inner.sql()} must be in GROUP BY or in an aggregate", inner, "GROUP BY")

    def _names(self, columns: list[str]) -> list[tuple[str, exp.Expr | None]]:
        out: list[tuple[str, exp.Expr | None]] = []
        for e in self.node.expressions:
            if isinstance(e, exp.Star):
                out.extend((c, None) for c in columns)
            elif isinstance(e, exp.Alias):
                out.append((e.alias, e.this))
            elif isinstance(e, exp.Column):
                out.append((e.name, e))
            elif isinstance(e, exp.Count):
                out.append(("count", e))
            else:
                out.append((e.sql(dialect="postgres"), e))
        return out

    def shape(self, rows: list[Row], columns: list[str]) -> Table:
        if self.where is not None:
            rows = [r for r in rows if _Eval(self.p, r).value(self.where) is True]
        names = self._names(columns)
        outputs: list[tuple[list[Any], Row]] = []
        if self.aggregate:
            groups: dict[str, list[Row]] = {}
            for r in rows:
                key = json.dumps([_Eval(self.p, r).value(g) for g in self.group], sort_keys=True, default=str)
                groups.setdefault(key, []).append(r)
            if not self.group and not groups:
                groups[""] = []
            for members in groups.values():
                ev = _Eval(self.p, members[0] if members else {}, group=members)
                if self.having is not None and ev.value(self.having) is not True:
                    continue
                values = [ev.value(e) if e is not None else None for _, e in names]
                outputs.append((values, {n: v for (n, _), v in zip(names, values, strict=True)}))
        else:
            for r in rows:
                ev = _Eval(self.p, r)
                values = [r.get(n) if e is None else ev.value(e) for n, e in names]
                outputs.append((values, {**r, **{n: v for (n, _), v in zip(names, values, strict=True)}}))
        for ordered in reversed(self.order):
            desc = bool(ordered.args.get("desc"))
            nulls_first = ordered.args.get("nulls_first")
            nulls_first = desc if nulls_first is None else bool(nulls_first)
            expr = ordered.this
            keyed = [(_Eval(self.p, env).value(expr), (vals, env)) for vals, env in outputs]
            present = [x for x in keyed if x[0] is not None]
            absent = [x for x in keyed if x[0] is None]
            present.sort(key=lambda x: _sort_key(x[0]), reverse=desc)
            ordered_rows = absent + present if nulls_first else present + absent
            outputs = [pair for _, pair in ordered_rows]
        values_only = [v for v, _ in outputs]
        if self.node.args.get("distinct") is not None:
            seen: set[str] = set()
            unique = []
            for v in values_only:
                key = json.dumps(v, sort_keys=True, default=str)
                if key not in seen:
                    seen.add(key)
                    unique.append(v)
            values_only = unique
        end = None if self.limit is None else self.offset + self.limit
        return [n for n, _ in names], values_only[self.offset:end]


class _Eval:
    """An expression's value on a row (SQL's three-valued logic: None is NULL)."""

    def __init__(self, planner: _Planner, row: Row, *, group: list[Row] | None = None,
                 check: frozenset[str] | set[str] | None = None) -> None:
        self.p = planner
        self.row = row
        self.group = group
        #: Checking, not evaluating: the columns that exist (every value is then NULL).
        self.known = check
        self.check = check is not None

    def column(self, node: exp.Column) -> Any:
        if node.table:
            raise self.p.error("columns are not qualified by a table here", node, node.sql())
        name = node.name
        if self.known is not None and (name in self.known or name.lower() in self.known):
            return None
        for key in (name, name.lower()):
            if key in self.row:
                return self.row[key]
        if name.lower() in ("embedding",):
            raise self.p.error("embedding is compared with <=> EMBEDDING('text')", node, name)
        raise self.p.error(f"unknown column {name!r}", node, name)

    def value(self, node: exp.Expr) -> Any:  # noqa: C901 - one dispatch over the node types
        if isinstance(node, exp.Literal):
            if node.is_string:
                return node.this
            text = str(node.this)
            return float(text) if any(c in text for c in ".eE") else int(text)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Boolean):
            return bool(node.this)
        if isinstance(node, exp.Parameter):
            return self.p.param(node)
        if isinstance(node, exp.Placeholder):
            raise self.p.error("parameters are $1, $2, ... ('?' is not one)", node, "?")
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Alias):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Cast):
            return self.cast(node)
        if isinstance(node, exp.JSONExtractScalar | exp.JSONExtract):
            return self.extract(node)
        if isinstance(node, exp.And | exp.Or):
            a, b = self.value(node.this), self.value(node.expression)
            if isinstance(node, exp.And):
                return False if a is False or b is False else (None if a is None or b is None else True)
            return True if a is True or b is True else (None if a is None or b is None else False)
        if isinstance(node, exp.Not):
            v = self.value(node.this)
            return None if v is None else not v
        if isinstance(node, exp.EQ | exp.NEQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
            return self.compare(node)
        if isinstance(node, exp.Is):
            v = self.value(node.this)
            target = node.expression
            result = v is None if isinstance(target, exp.Null) else v is self.value(target)
            return not result if node.args.get("negate") else result
        if isinstance(node, exp.In):
            if node.args.get("query") is not None or node.args.get("unnest") is not None:
                raise self.p.error("IN takes a list of values", node, "IN")
            v = self.value(node.this)
            items = [self.value(e) for e in node.expressions]
            if self.check or v is None:
                return None
            return v in items
        if isinstance(node, exp.Between):
            v, low, high = self.value(node.this), self.value(node.args["low"]), self.value(node.args["high"])
            if self.check or v is None or low is None or high is None:
                return None
            return self._cmp(low, v, node) <= 0 <= self._cmp(high, v, node)
        if isinstance(node, exp.Like | exp.ILike):
            return self.like(node)
        if isinstance(node, exp.Neg):
            v = self.value(node.this)
            return None if v is None else -self._number(v, node)
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div):
            a, b = self.value(node.this), self.value(node.expression)
            if self.check or a is None or b is None:
                return None
            x, y = self._number(a, node), self._number(b, node)
            if isinstance(node, exp.Add):
                return x + y
            if isinstance(node, exp.Sub):
                return x - y
            if isinstance(node, exp.Mul):
                return x * y
            if y == 0:
                raise self.p.error("division by zero", node, "/")
            return x / y
        if isinstance(node, exp.Lower | exp.Upper):
            v = self.value(node.this)
            if v is None or self.check:
                return None
            return str(v).lower() if isinstance(node, exp.Lower) else str(v).upper()
        if isinstance(node, exp.Length):
            v = self.value(node.this)
            return None if v is None or self.check else len(str(v))
        if isinstance(node, exp.Coalesce):
            for e in [node.this, *node.expressions]:
                v = self.value(e)
                if v is not None:
                    return v
            return None
        if isinstance(node, _AGGREGATES):
            return self.aggregate(node)
        if isinstance(node, exp.CosineDistance):
            if self.check:
                return None
            return self.row.get("vector_distance")
        if isinstance(node, exp.Anonymous):
            return self.function(node)
        raise self.p.error(f"{_name(node)} is not supported", node)

    def _number(self, v: Any, node: exp.Expr) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            if self.check:
                return 0
            raise self.p.error(f"{v!r} is not a number", node, _name(node))
        return float(v) if isinstance(v, float) else int(v)

    def _cmp(self, a: Any, b: Any, node: exp.Expr) -> int:
        if isinstance(a, bool) != isinstance(b, bool) or (
                isinstance(a, int | float) != isinstance(b, int | float)) or (
                not isinstance(a, int | float | str | bool)):
            raise self.p.error(f"cannot compare {a!r} with {b!r}", node, _name(node))
        return int(a > b) - int(a < b)

    def compare(self, node: exp.Expr) -> Any:
        a, b = self.value(node.this), self.value(node.expression)
        if self.check or a is None or b is None:
            return None
        if isinstance(node, exp.EQ):
            return a == b and isinstance(a, bool) == isinstance(b, bool)
        if isinstance(node, exp.NEQ):
            return not (a == b and isinstance(a, bool) == isinstance(b, bool))
        c = self._cmp(a, b, node)
        if isinstance(node, exp.GT):
            return c > 0
        if isinstance(node, exp.GTE):
            return c >= 0
        if isinstance(node, exp.LT):
            return c < 0
        return c <= 0

    def like(self, node: exp.Like | exp.ILike) -> Any:
        v, pattern = self.value(node.this), self.value(node.expression)
        if self.check or v is None or pattern is None:
            return None
        if not isinstance(pattern, str):
            raise self.p.error("LIKE takes a string pattern", node, "LIKE")
        regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
        flags = re.IGNORECASE | re.DOTALL if isinstance(node, exp.ILike) else re.DOTALL
        return re.fullmatch(regex, _text(v) or "", flags) is not None

    def cast(self, node: exp.Cast) -> Any:
        v = self.value(node.this)
        to = node.to
        kind = to.this if isinstance(to, exp.DataType) else None
        T = exp.DataType.Type
        if kind in (T.JSON, T.JSONB):
            if isinstance(v, str):
                return self.p._json(v, node)
            return v
        if v is None or self.check:
            return None
        if kind in (T.TEXT, T.VARCHAR, T.CHAR, T.NCHAR, T.NVARCHAR):
            return _text(v)
        if kind in (T.INT, T.BIGINT, T.SMALLINT, T.TINYINT):
            try:
                return int(v) if not isinstance(v, float) or v.is_integer() else int(v)
            except (TypeError, ValueError):
                raise self.p.error(f"{v!r} is not an integer", node, "CAST") from None
        if kind in (T.FLOAT, T.DOUBLE, T.DECIMAL):
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise self.p.error(f"{v!r} is not a number", node, "CAST") from None
            if not math.isfinite(f):
                raise self.p.error(f"{v!r} is not a finite number", node, "CAST")
            return f
        if kind == T.BOOLEAN:
            if isinstance(v, bool):
                return v
            if isinstance(v, str) and v.lower() in ("true", "false"):
                return v.lower() == "true"
            raise self.p.error(f"{v!r} is not a boolean", node, "CAST")
        raise self.p.error(f"cannot cast to {to.sql()}", node, "CAST")

    def extract(self, node: exp.Expr) -> Any:
        base = self.value(node.this)
        path = node.expression
        keys: list[Any]
        if isinstance(path, exp.JSONPath):
            keys = []
            for part in path.expressions:
                if isinstance(part, exp.JSONPathRoot):
                    continue
                if isinstance(part, exp.JSONPathKey | exp.JSONPathSubscript):
                    keys.append(part.this)
                else:
                    raise self.p.error("a JSON path of keys", node, "JSONPATH")
        else:
            keys = [self.value(path)]
        if self.check:
            return None
        for key in keys:
            if isinstance(base, dict) and isinstance(key, str):
                base = base.get(key)
            elif isinstance(base, list) and isinstance(key, int) and not isinstance(key, bool):
                base = base[key] if -len(base) <= key < len(base) else None
            else:
                base = None
        return _text(base) if isinstance(node, exp.JSONExtractScalar) else base

    def aggregate(self, node: exp.Expr) -> Any:
        if self.group is None:
            if self.check:
                return None
            raise self.p.error(f"{_name(node)} outside a SELECT list", node)
        inner = node.this
        if isinstance(inner, exp.Distinct):
            raise self.p.error("DISTINCT in an aggregate is not supported", node, "DISTINCT")
        if isinstance(node, exp.Count) and (inner is None or isinstance(inner, exp.Star)):
            return len(self.group)
        values = [v for v in (_Eval(self.p, r).value(inner) for r in self.group) if v is not None]
        if isinstance(node, exp.Count):
            return len(values)
        if not values:
            return None
        if isinstance(node, exp.Min | exp.Max):
            key = [_sort_key(v) for v in values]
            i = key.index(min(key) if isinstance(node, exp.Min) else max(key))
            return values[i]
        numbers = [self._number(v, node) for v in values]
        return sum(numbers) if isinstance(node, exp.Sum) else sum(numbers) / len(numbers)

    def function(self, node: exp.Anonymous) -> Any:
        name = node.name.upper()
        args = [self.value(a) for a in node.expressions]
        arity = {"PATH_STARTS_WITH": 2, "CHILD_OF": 1, "DESCENDANT_OF": 1, "PARENT_OF": 1, "DEPTH": 1}
        if name not in arity:
            raise self.p.error(f"unknown function {name}", node, name)
        if len(args) != arity[name]:
            raise self.p.error(f"{name} takes {arity[name]} argument(s)", node, name)
        if self.check:
            return None
        if name == "DEPTH":
            return None if args[0] is None else _depth(str(args[0]))
        if any(a is None for a in args):
            return None
        path = str(self.row.get("path", ""))
        if name == "PATH_STARTS_WITH":
            return str(args[0]).startswith(str(args[1]))
        if name == "CHILD_OF":
            return _parent(path) == str(args[0]).rstrip("/") or (str(args[0]) == "/" and _parent(path) == "/")
        if name == "DESCENDANT_OF":
            prefix = str(args[0]).rstrip("/") + "/"
            return path.startswith(prefix) and path != prefix
        return path == _parent(str(args[0])) and str(args[0]).rstrip("/") != path
