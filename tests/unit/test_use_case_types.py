"""The use cases of repositories, keys, bulk work, the change feed, webhooks, lineage, memory
imports, ingest and the agent functions answer the typed contract (:mod:`kg.types`), never a
dict: HTTP, MCP, the CLI and the client derive from those models, so a field exists in one place.

Read from the functions' return annotations (mypy holds the bodies to them). A use case is a
function taking a unit of work, or the services and a caller, and each agent function of
:data:`kg.rag.functions.FUNCTIONS`. Any other public function of these modules may answer
something else, but never a dict, unless :data:`ALLOWED` says why.
"""

from __future__ import annotations

import collections.abc
import importlib
import inspect
import types
import typing

import pytest
from pydantic import BaseModel

from kg.context import Actor, Resources, UnitOfWork
from kg.rag import functions

MODULES = ("kg.ops.repos", "kg.ops.keys", "kg.ops.bulk", "kg.ops.changes", "kg.ops.webhooks", "kg.ops.lineage",
           "kg.ops.memory", "kg.ops.ingest", "kg.rag.functions")

#: Public functions of these modules that answer something other than a kg.types model, and why.
ALLOWED = {
    # the indexer's own counts, read by the CLI into its reports: no surface answers them
    "kg.ops.repos.settle_index": "the indexer's run counts (kg.context.IndexRunCounts) the CLI reads",
    # steps of ingest_path, each a unit of work it runs; ingest_path answers the report
    "kg.ops.ingest.ingest_file": "a step of ingest_path: the plan it carried out, counted into the report",
    "kg.ops.ingest.ingest_files": "a step of ingest_path (and the RAG node's ingestion): the plans carried out",
    "kg.ops.ingest.write_review": "a step of ingest_path: the nodes written to the review branch, counted",
    "kg.ops.ingest.relate_files": "a step of ingest_path: the stub nodes made, counted into the report",
    "kg.ops.ingest.unrelate_files": "a step of ingest_path: the relations removed, counted into the report",
    # user JSON: node properties and the rows stored in them
    "kg.ops.ingest.merge_file": "a three-way merge of node properties (user JSON)",
    "kg.ops.lineage.stale_citations": "the stale_citations rows stored in an answer node's properties (JSON)",
    # steps of ask, over passages and words
    "kg.rag.functions.nearest_words": "a step of ask: each absent word's nearest quoted word",
    "kg.rag.functions.misspelt_words": "a step of ask: the absent words that misspell a quoted word",
    "kg.rag.functions.focus_passages": "a step of ask: passages holding a quoted focus, before the answer",
    "kg.rag.functions.leads": "a step of ask: the leads it answers, checked by AskOutput",
    "kg.rag.functions.graph_passages": "a step of ask: the graph leg's passages, before the answer",
    "kg.rag.functions.vocabulary_rewrite": "a step of ask: the rewritten query",
    "kg.rag.functions.absent_terms": "a step of ask: the question's words no passage holds",
}


def _public_functions() -> list[tuple[str, typing.Callable[..., object]]]:
    found = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, fn in vars(module).items():
            if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == module_name:
                found.append((f"{module_name}.{name}", fn))
    return found


def _is_use_case(fn: typing.Callable[..., object]) -> bool:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)
    if not params:
        return False
    if hints.get(params[0]) is UnitOfWork:
        return True
    return len(params) > 1 and hints.get(params[0]) is Resources and hints.get(params[1]) is Actor


def _models(annotation: object) -> bool:
    """A kg.types model, a union of them, None, or an iterator of models."""
    if annotation is type(None):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_models(arm) for arm in typing.get_args(annotation))
    if origin in (collections.abc.Iterator, collections.abc.Iterable):
        return all(_models(arm) for arm in typing.get_args(annotation))
    return (isinstance(annotation, type) and issubclass(annotation, BaseModel)
            and annotation.__module__.startswith("kg.types."))


def _holds_dict(annotation: object) -> bool:
    if annotation is dict or typing.get_origin(annotation) is dict:
        return True
    return any(_holds_dict(arg) for arg in typing.get_args(annotation))


USE_CASES = sorted({name for name, fn in _public_functions() if _is_use_case(fn)}
                   | {f"kg.rag.functions.{fn.__name__}" for fn in functions.FUNCTIONS.values()
                      if fn.__module__ == "kg.rag.functions"} | {"kg.rag.functions.invoke"})


def test_the_use_cases_are_found():
    """The rule is not vacuous: the use cases of every module are among those checked."""
    for name in ("kg.ops.repos.create_repository", "kg.ops.keys.list_keys", "kg.ops.bulk.import_ndjson",
                 "kg.ops.changes.changes", "kg.ops.webhooks.deliveries", "kg.ops.lineage.node_lineage",
                 "kg.ops.memory.import_memory_jsonl", "kg.ops.ingest.ingest_path", "kg.rag.functions.ask",
                 "kg.rag.functions.research_assistant", "kg.rag.functions.invoke"):
        assert name in USE_CASES


@pytest.mark.parametrize("name", USE_CASES)
def test_a_use_case_answers_a_kg_types_model(name):
    module_name, _, attr = name.rpartition(".")
    answer = typing.get_type_hints(getattr(importlib.import_module(module_name), attr))["return"]
    assert _models(answer) or name in ALLOWED, f"{name} answers {answer}, not a kg.types model"


@pytest.mark.parametrize("module_name", ["kg.rag.entities", "kg.rag.resolve"])
def test_the_agent_functions_of_other_modules_answer_models_too(module_name):
    agents = [fn for fn in functions.FUNCTIONS.values() if fn.__module__ == module_name]
    assert agents
    for fn in agents:
        assert _models(typing.get_type_hints(fn)["return"]), fn.__name__


def test_no_public_function_answers_a_dict_unless_allowed():
    offenders = [name for name, fn in _public_functions()
                 if _holds_dict(typing.get_type_hints(fn).get("return")) and name not in ALLOWED]
    assert offenders == []


def test_the_allow_list_names_functions_that_exist():
    names = {name for name, _ in _public_functions()}
    assert sorted(set(ALLOWED) - names) == []


def test_the_rule_tells_a_dict_from_a_model():
    """The checks themselves: a dict, a list of dicts and a dataclass fail; models pass."""
    from kg.types import ChangePage, Repo

    assert not _models(dict[str, typing.Any]) and _holds_dict(list[dict[str, int]])
    assert not _models(tuple[dict[str, typing.Any], list[str]]) and _holds_dict(tuple[dict[str, int], int])
    assert _models(Repo | None) and _models(collections.abc.Iterator[ChangePage])
    assert not _models(functions.ScoredSentence) and not _holds_dict(Repo)
