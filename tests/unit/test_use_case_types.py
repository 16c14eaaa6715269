"""The use cases answer the typed contract: every public function of ``kg.ops`` that takes a unit
of work, or a caller, is annotated to return :mod:`kg.types` models (or None, a scalar, or a list,
tuple or iterator of those), never a dict: a field exists in one place, the model, and HTTP, MCP,
the CLI and the console serialise it as it is.
"""

from __future__ import annotations

import collections.abc
import importlib
import inspect
import pkgutil
import types
import typing
from typing import Any

import pytest
from pydantic import BaseModel

import kg.ops
from kg.context import Actor, UnitOfWork
from kg.rag import functions

#: Modules whose use cases still answer dicts: none of the functions listed by
#: :func:`_use_cases` in them is checked until it leaves this set.
PENDING: set[str] = set()

#: Functions that take a unit of work or a caller but answer something else, and why.
ALLOWED: dict[str, str] = {
    "kg.ops.changes.stream_slot": "a context manager that holds one of the caller's change stream slots: no answer",
    "kg.ops.observability.scrape": "Prometheus's text exposition format (bytes), not a JSON answer",
    "kg.ops.texts.write_node": "a step inside a write's transaction (it takes the use case's WriteContext): the "
                               "stored version, which the use case answers as a kg.types.Node",
    "kg.ops.text_store.put_text": "a step inside a write's transaction, as kg.ops.texts.write_node",
    "kg.ops.texts.write_nodes": "a step inside a write's transaction (batch, graph writes), as "
                                "kg.ops.texts.write_node: the stored versions, answered as kg.types.Node",
    "kg.ops.repos.settle_index": "the indexer's run counts (kg.context.IndexRunCounts) the CLI reads",
    "kg.ops.ingest.ingest_file": "a step of ingest_path: the plan it carried out, counted into the report",
    "kg.ops.ingest.ingest_files": "a step of ingest_path (and the RAG node's ingestion): the plans carried out",
    "kg.ops.ingest.write_review": "a step of ingest_path: the nodes written to the review branch, counted",
    "kg.ops.ingest.relate_files": "a step of ingest_path: the stub nodes made, counted into the report",
    "kg.ops.ingest.unrelate_files": "a step of ingest_path: the relations removed, counted into the report",
}

_SCALARS = (str, int, float, bool, type(None))
_CONTAINERS = (list, tuple, collections.abc.Iterator, collections.abc.Iterable, collections.abc.Generator,
               collections.abc.Sequence)


def _offending(annotation: Any) -> list[str]:
    """The parts of a return annotation that are not a kg.types model, None, a scalar, or a
    list / tuple / iterator / union of those (empty: the annotation is typed)."""
    if annotation is Ellipsis:  # tuple[X, ...]
        return []
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return [] if annotation.__module__.startswith("kg.types") else [f"{annotation.__qualname__} (not kg.types)"]
        return [] if issubclass(annotation, _SCALARS) and annotation is not dict else [annotation.__name__]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) or origin in _CONTAINERS:
        return [bad for arg in typing.get_args(annotation) for bad in _offending(arg)]
    return [repr(annotation)]


def _use_cases() -> list[tuple[str, Any]]:
    """Every public function of kg.ops's modules taking a unit of work first, or a caller second."""
    found = []
    for info in pkgutil.walk_packages(kg.ops.__path__, "kg.ops."):
        module = importlib.import_module(info.name)
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or fn.__module__ != module.__name__:
                continue
            hints = typing.get_type_hints(fn)
            params = list(inspect.signature(fn).parameters)
            if (params and hints.get(params[0]) is UnitOfWork) or \
                    (len(params) > 1 and hints.get(params[1]) is Actor):
                found.append((f"{module.__name__}.{name}", fn))
    return found


USE_CASES = _use_cases()


def test_the_use_cases_are_found():
    names = {name for name, _ in USE_CASES}
    assert {"kg.ops.nodes.put_node", "kg.ops.queries.get_node", "kg.ops.merge.merge_branch",
            "kg.ops.branches.list_branches", "kg.ops.relations.unrelate"} <= names
    # helpers over a session are not use cases
    assert "kg.ops.merge.plan_token" not in names and "kg.ops.branches.is_protected" not in names


@pytest.mark.parametrize("name,fn", [(n, f) for n, f in USE_CASES if n.rpartition(".")[0] not in PENDING],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_a_use_case_answers_kg_types(name, fn):
    if name in ALLOWED:
        pytest.skip(ALLOWED[name])
    returned = typing.get_type_hints(fn).get("return", Any)
    assert _offending(returned) == [], f"{name} returns {returned}: answer a kg.types model"


def test_the_check_refuses_a_dict_anywhere_in_the_answer():
    from kg.types import Node

    assert _offending(Node) == [] and _offending(tuple[Node, bool]) == [] and _offending(Node | None) == []
    assert _offending(list[Node]) == [] and _offending(collections.abc.Iterator[Node]) == []
    assert _offending(dict[str, Any]) != []
    assert _offending(tuple[dict[str, Any], bool]) != []
    assert _offending(list[dict[str, Any]]) != []
    assert _offending(Node | dict[str, Any]) != []
    assert _offending(Any) != []


def test_pending_and_allowed_name_what_exists():
    modules = {name.rpartition(".")[0] for name, _ in USE_CASES}
    assert PENDING <= {info.name for info in pkgutil.walk_packages(kg.ops.__path__, "kg.ops.")}
    assert not PENDING & {"kg.ops.nodes", "kg.ops.relations", "kg.ops.queries", "kg.ops.branches", "kg.ops.merge",
                          "kg.ops.merge_lineage"}
    assert set(ALLOWED) <= {name for name, _ in USE_CASES}
    assert modules  # the walk found the package's modules


def test_the_agent_functions_answer_kg_types():
    """Each agent function (ask, graph-context, extract-entities, resolve-entities, the research
    assistant, search-documents) and the generic invoke answer a kg.types model."""
    agents = [*functions.FUNCTIONS.values(), functions.invoke]
    assert len(agents) >= 6
    for fn in agents:
        returned = typing.get_type_hints(fn).get("return", Any)
        assert _offending(returned) == [], f"{fn.__module__}.{fn.__name__} returns {returned}"
