"""The MCP server through the SDK's in-memory client (no transport): the tool list per caller,
the read-only switch, search's path-prefix mode, merge's plan token, and the research assistant
once kg.rag has it."""

from __future__ import annotations

import pytest

from kg.access import Actor, make_grant
from kg.context import OPERATOR, run
from kg.mcp.server import (
    READ_TOOLS,
    RESEARCH_ASSISTANT,
    WRITE_TOOLS,
    Binding,
    build_server,
    fixed_binding,
    offered_tools,
)
from kg.ops import branches as branch_ops
from kg.ops import nodes as node_ops
from kg.ops import repos as repo_ops
from kg.rag.functions import FUNCTIONS
from tests.mcp.client import call, mcp_session, tool_names

AGENT = Actor("key", "agent", "0" * 16, (make_grant("acme", ["main"], ["*"], ["read"]),
                                         make_grant("acme", ["agent/*"], ["*"], ["read", "write", "branch:create"])))
READER = Actor("key", "reader", "1" * 16, (make_grant("acme", ["*"], ["*"], ["read"]),))


@pytest.fixture
def acme(services):
    run(services, OPERATOR, repo_ops.create_repository, "acme")
    run(services, OPERATOR, repo_ops.create_workspace, "acme", "kb")
    run(services, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/keys", node_type="kb:Article",
        properties={"content": "To rotate an API key, create a new key, then revoke the old key."})
    return services


def test_offered_tools_follow_the_grants_in_the_repository():
    every = [*READ_TOOLS, *WRITE_TOOLS]
    assert offered_tools(Binding("acme", "main", OPERATOR), every) == every
    assert offered_tools(Binding("acme", "main", READER), every) == list(READ_TOOLS)
    assert "merge" not in offered_tools(Binding("acme", "main", AGENT), every)
    assert offered_tools(Binding("other", "main", AGENT), every) == list(READ_TOOLS)  # no grant there


def test_read_only_registers_only_the_read_tools(acme):
    server = build_server(acme, fixed_binding("acme", "main"), read_only=True)
    assert tool_names(server) == list(READ_TOOLS)
    assert "Unknown tool" in call(server, None, "put_node", {"workspace": "kb", "path": "/x", "node_type": "kb:Note",
                                                             "properties": {}}, error=True, raw=True)
    assert call(server, None, "search", {"query": "rotate"})["results"][0]["path"] == "/keys"


def test_a_key_is_listed_its_tools_in_memory_too(acme):
    assert tool_names(build_server(acme, fixed_binding("acme", "main", READER))) == list(READ_TOOLS)
    put = call(build_server(acme, fixed_binding("acme", "main", READER)), None, "put_node",
               {"workspace": "kb", "path": "/x", "node_type": "kb:Note", "properties": {}}, error=True)
    assert put["error"]["code"] == "forbidden"


def test_search_takes_the_path_prefix_mode(acme):
    for path in ("/answers/a", "/answers-old/b"):
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Note", parents=True,
            properties={"content": "Rotate the signing key every month."})
    server = build_server(acme, fixed_binding("acme", "main"))
    query = {"query": "signing key", "mode": "fulltext", "path_prefix": "/answers"}
    segments = call(server, None, "search", query)
    assert [r["path"] for r in segments["results"]] == ["/answers/a"]  # the default: whole segments
    raw = call(server, None, "search", {**query, "path_prefix_mode": "raw"})
    assert sorted(r["path"] for r in raw["results"]) == ["/answers-old/b", "/answers/a"]
    bad = call(server, None, "search", {**query, "path_prefix_mode": "glob"}, error=True)
    assert bad["error"]["code"] == "invalid_input"
    assert bad["error"]["details"]["errors"][0]["loc"] == ["path_prefix_mode"]


def test_search_takes_where_and_no_tool_takes_an_argument_it_does_not_know(acme):
    """A new user's agent passed ``where`` to the search tool, which had none and dropped it
    (an unfiltered answer, isError false), as it dropped any argument it did not know."""
    for path, status in (("/draft", "draft"), ("/published", "published")):
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Note",
            properties={"content": "Rotate the signing key every month.", "status": status})
    server = build_server(acme, fixed_binding("acme", "main"))
    query = {"query": "signing key", "mode": "fulltext"}
    found = call(server, None, "search", {**query, "where": {"status": {"$in": ["draft"]}}})
    assert [r["path"] for r in found["results"]] == ["/draft"]
    bad = call(server, None, "search", {**query, "where": {"status": {"$regex": "^d"}}}, error=True)
    assert bad["error"]["code"] == "invalid_input" and "unknown operator '$regex'" in bad["error"]["message"]
    unknown = call(server, None, "search", {**query, "wehre": {"status": "draft"}}, error=True, raw=True)
    assert "wehre" in unknown and "Extra inputs are not permitted" in unknown
    unknown = call(server, None, "get_node", {"workspace": "kb", "path": "/draft", "depth": 3}, error=True, raw=True)
    assert "depth" in unknown and "Extra inputs are not permitted" in unknown


@pytest.mark.parametrize(("tool", "arguments", "loc", "kind"), [
    ("search", {"query": "key", "k": "many"}, "k", "int_parsing"),
    ("search", {"query": "key", "wehre": {"status": "draft"}}, "wehre", "extra_forbidden"),
    ("search", {"k": 3}, "query", "missing"),
    ("get_node", {"workspace": "kb", "path": "/keys", "depth": 3}, "depth", "extra_forbidden"),
    ("get_node", {"workspace": ["kb"], "path": "/keys"}, "workspace", "string_type"),
    ("put_node", {"workspace": "kb", "path": "/x", "node_type": "kb:Note", "properties": "{}x"},
     "properties", "value_error"),  # NodePut's validator, as the HTTP body's
    ("merge", {"dry_run": "perhaps"}, "dry_run", "bool_parsing"),
])
def test_refused_arguments_are_tool_errors_in_kgs_error_shape(acme, tool, arguments, loc, kind):
    """A wrong type, a missing or an unknown argument answered the SDK's text of the pydantic
    error: now a tool error whose structured content is kg's error shape naming the argument."""
    server = build_server(acme, fixed_binding("acme", "main"))
    refused = call(server, None, tool, arguments, error=True)
    assert set(refused) == {"error"} and set(refused["error"]) == {"code", "message", "details"}
    assert refused["error"]["code"] == "invalid_input"
    assert refused["error"]["message"].startswith(f"{loc}: ")
    assert refused["error"]["details"]["errors"][0]["loc"] == [loc]
    assert refused["error"]["details"]["errors"][0]["type"] == kind
    assert call(server, None, tool, arguments, error=True, raw=True).startswith(f"invalid_input: {loc}: ")


def test_search_attaches_each_hits_parent_and_neighbouring_sections(acme):
    """The enrichment loop of RAG patterns over MCP: ``context_siblings`` attaches the parent and the
    sections beside each hit, in order, each with its kg:// citation handle."""
    run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/guide", node_type="kb:Article",
        properties={"title": "Rigging guide"})
    for order, (name, text) in enumerate((("shrouds", "Check the shrouds for wear."),
                                          ("bowline", "The bowline ties a fixed loop that holds."),
                                          ("anchor", "Let out five times the depth in chain."))):
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", f"/guide/{name}", node_type="kb:Section",
            properties={"content": text}, order=float(order))
    server = build_server(acme, fixed_binding("acme", "main"))
    found = call(server, None, "search", {"query": "bowline fixed loop", "mode": "fulltext", "k": 1,
                                          "context_siblings": 1})
    row = found["results"][0]
    assert row["path"] == "/guide/bowline"
    assert row["context"]["parent"]["path"] == "/guide"
    assert row["context"]["parent"]["uri"] == row["uri"].replace("/bowline", "")
    assert [n["path"] for n in row["context"]["before"]] == ["/guide/shrouds"]
    assert [n["path"] for n in row["context"]["after"]] == ["/guide/anchor"]
    assert "context" not in call(server, None, "search", {"query": "bowline", "mode": "fulltext"})["results"][0]
    bad = call(server, None, "search", {"query": "bowline", "context_siblings": 11}, error=True)
    assert bad["error"]["code"] == "invalid_input" and "context.siblings" in bad["error"]["message"]


def test_merge_applies_only_the_plan_its_dry_run_showed(acme):
    run(acme, OPERATOR, branch_ops.create_branch, "acme", name="agent/s1", from_branch="main")
    run(acme, OPERATOR, node_ops.put_node, "acme", "agent/s1", "kb", "/one", node_type="kb:Note",
        properties={"content": "one"})
    server = build_server(acme, fixed_binding("acme", "agent/s1"))
    seen = call(server, None, "merge", {"dry_run": True})
    assert seen["dry_run"] is True and seen["revision"] is None and isinstance(seen["plan"], str) and seen["plan"]
    assert call(server, None, "merge", {"dry_run": True, "if_plan": seen["plan"]})["plan"] == seen["plan"]

    run(acme, OPERATOR, node_ops.put_node, "acme", "agent/s1", "kb", "/two", node_type="kb:Note",
        properties={"content": "two"})  # after the dry run: the reviewer did not see /two
    stale = call(server, None, "merge", {"if_plan": seen["plan"]}, error=True)
    assert stale["error"]["code"] == "conflict" and stale["error"]["details"]["reason"] == "stale_plan"
    assert stale["error"]["details"]["expected"] == seen["plan"]
    text = call(server, None, "merge", {"if_plan": seen["plan"]}, error=True, raw=True)
    assert text.startswith("conflict (stale_plan): "), text   # the reason reaches a text-only client
    for path in ("/one", "/two"):  # nothing was written on main
        missing = call(server, None, "get_node", {"workspace": "kb", "path": path, "branch": "main"}, error=True)
        assert missing["error"]["code"] == "not_found"
    assert call(server, None, "merge", {"dry_run": True, "if_plan": seen["plan"]}, error=True)[
        "error"]["details"]["reason"] == "stale_plan"

    fresh = call(server, None, "merge", {"dry_run": True})["plan"]
    assert fresh != seen["plan"]
    merged = call(server, None, "merge", {"if_plan": fresh})
    assert merged["revision"] is not None and merged["branch"] == "agent/s1"
    on_main = call(server, None, "get_node", {"workspace": "kb", "path": "/two", "branch": "main"})
    assert on_main["node"]["path"] == "/two"


@pytest.mark.skipif(RESEARCH_ASSISTANT not in FUNCTIONS, reason="the research assistant has not landed in kg.rag")
def test_the_research_assistant_answers_on_its_own_session_branch(acme):
    server = build_server(acme, fixed_binding("acme", "main"))
    assert "research_assistant" in tool_names(server)
    out = call(server, None, "research_assistant", {"question": "How do I rotate an API key?"})
    assert out["grounded"] is True and out["branch"].startswith("research/") and out["from"] == "main"
    added = call(server, None, "diff", {"branch": out["branch"]})["nodes"]["added"]
    assert any(n["path"].startswith("/answers/") for n in added)
    missing = call(server, None, "get_node", {"workspace": "kb", "path": out["stored"]["path"]}, error=True)
    assert missing["error"]["code"] == "not_found"  # main is unchanged until a merge


def test_graph_context_follows_a_documents_mentions_to_the_pages_about_them(acme):
    """``follow: "subjects"`` over MCP: from a film's page to the director's page (its title
    names him), not to another page that only mentions him; a bad ``follow`` is a tool error."""
    from kg.rag.functions import invoke as invoke_function

    pages = {"/film": ("Ed Wood (film)", "Ed Wood is a 1994 biopic directed by Tim Burton."),
             "/burton": ("Tim Burton", "Timothy Walter Burton grew up in Burbank, California."),
             "/batman": ("Batman (1989 film)", "Batman is a superhero picture directed by Tim Burton.")}
    for path, (title, text) in pages.items():
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Page",
            properties={"title": title, "content": text})
    for path in pages:
        invoke_function(acme, OPERATOR, "acme", "extract-entities", {"workspace": "kb", "path": path})
    server = build_server(acme, fixed_binding("acme", "main", READER))
    body = call(server, None, "graph_context", {"seeds": ["kb:/film"], "follow": "subjects"})
    reached = [(n["path"], n["via"]) for n in body["nodes"] if n["hop"] == 2]
    assert reached == [("/burton", "about")]
    walk = call(server, None, "graph_context", {"seeds": ["kb:/film"], "types": ["mentioned_in"]})
    assert "/batman" in [n["path"] for n in walk["nodes"] if n["hop"] == 2]
    bad = call(server, None, "graph_context", {"seeds": ["kb:/film"], "follow": "subjects", "hops": 3}, error=True)
    assert bad["error"]["code"] == "invalid_input"


def test_relations_over_time_through_the_tools(acme):
    """relate with valid_from, invalidate_relation, and neighbors / traverse reading current
    facts by default, as_of and include_invalid (issue 17); a naive time is a tool error."""
    for path in ("/dana", "/acme", "/globex"):
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", path, node_type="kb:Entity", properties={})
    server = build_server(acme, fixed_binding("acme", "main"))
    made = call(server, None, "relate", {"source": "kb:/dana", "target": "kb:/acme", "type": "works_at",
                                         "valid_from": "2020-01-01T00:00:00Z"})
    assert made["relation"]["valid_from"] == "2020-01-01T00:00:00+00:00"
    call(server, None, "relate", {"source": "kb:/dana", "target": "kb:/globex", "type": "works_at"})
    gone = call(server, None, "invalidate_relation", {"source": "kb:/dana", "target": "kb:/acme", "type": "works_at",
                                                      "valid_to": "2022-01-01T00:00:00Z",
                                                      "invalidated_by": "kb:/dana|works_at|kb:/globex"})
    assert gone["relation"]["valid_to"] == "2022-01-01T00:00:00+00:00"
    assert gone["relation"]["invalidated_by"] == "kb:/dana|works_at|kb:/globex"

    def around(**extra):
        answer = call(server, None, "neighbors", {"node": "kb:/dana", "direction": "OUT", **extra})
        return [n["path"] for n in answer["neighbors"]]

    assert around() == ["/globex"]
    assert around(as_of="2021-01-01T00:00:00Z") == ["/acme", "/globex"]
    assert around(include_invalid=True) == ["/acme", "/globex"]
    walked = call(server, None, "traverse", {"seeds": ["kb:/dana"], "hops": 1, "as_of": "2021-01-01T00:00:00Z"})
    assert [n["path"] for n in walked["nodes"]] == ["/dana", "/acme", "/globex"]
    context = call(server, None, "graph_context", {"seeds": ["kb:/dana"], "hops": 1, "include_invalid": True})
    assert sorted(n["path"] for n in context["nodes"]) == ["/acme", "/dana", "/globex"]
    context = call(server, None, "graph_context", {"seeds": ["kb:/dana"], "hops": 1})
    assert sorted(n["path"] for n in context["nodes"]) == ["/dana", "/globex"]
    bad = call(server, None, "neighbors", {"node": "kb:/dana", "as_of": "2021-01-01T00:00:00"}, error=True)
    assert bad["error"]["code"] == "invalid_input"
    bad = call(server, None, "neighbors", {"node": "kb:/dana", "as_of": "0001-01-01T00:00:00+01:00"}, error=True)
    assert bad["error"]["code"] == "invalid_input"  # was an unexpected tool error (OverflowError)
    bad = call(server, None, "invalidate_relation", {"source": "kb:/dana", "target": "kb:/acme", "type": "works_at",
                                                     "valid_to": "2019-01-01T00:00:00Z"}, error=True)
    assert bad["error"]["code"] == "invalid_input"


def test_the_lineage_tool_lists_what_was_derived_from_a_node(acme):
    from kg.rag.entities import extract_entities

    run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/bio", node_type="kb:Doc",
        properties={"content": "Ada Lovelace worked with Charles Babbage."})
    extract_entities(acme, OPERATOR, "acme", "main", {"workspace": "kb", "path": "/bio"})
    server = build_server(acme, fixed_binding("acme", "main", READER))
    out = call(server, None, "lineage", {"workspace": "kb", "path": "/bio"})
    assert out["branch"] == "main" and out["path"] == "/bio"
    assert sorted(r["path"] for r in out["derived"] if r["kind"] == "mention") == [
        "/entities/ada-lovelace", "/entities/charles-babbage"]
    missing = call(server, None, "lineage", {"workspace": "kb", "path": "/nope"}, error=True)
    assert missing["error"]["code"] == "not_found"


def test_resolve_entities_proposes_the_merges_on_a_proposal_branch(acme):
    for slug, name in (("ahab", "Ahab"), ("captain-ahab", "Captain Ahab")):
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", f"/entities/{slug}", node_type="kg:Entity",
            properties={"name": name, "entity_type": "person"}, parents=True)
    server = build_server(acme, fixed_binding("acme", "main"))
    assert "resolve_entities" in tool_names(server)
    dry = call(server, None, "resolve_entities", {"workspace": "kb", "dry_run": True})
    assert dry["branch"] is None and [m["merged"] for m in dry["merges"]] == [["/entities/captain-ahab"]]
    out = call(server, None, "resolve_entities", {"workspace": "kb"})
    assert out["branch"].startswith("proposals/entities-")
    deleted = call(server, None, "diff", {"branch": out["branch"]})["nodes"]["deleted"]
    assert [n["path"] for n in deleted] == ["/entities/captain-ahab"]
    bad = call(server, None, "resolve_entities", {"workspace": "kb", "threshold": 7}, error=True)
    assert bad["error"]["code"] == "invalid_input"
    reader = build_server(acme, fixed_binding("acme", "main", READER))
    assert "resolve_entities" not in tool_names(reader)


def test_get_node_pages_the_children_with_a_cursor(acme):
    """A folder of an imported corpus may hold millions of children: get_node answers a page of
    them (default 100) and the cursor of the next, as the HTTP children listing does."""
    for i in range(5):
        run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", f"/shelf/item-{i}", node_type="kb:Note",
            properties={"title": f"Item {i}"}, order=float(i), parents=True)
    server = build_server(acme, fixed_binding("acme", "main"))
    whole = call(server, None, "get_node", {"workspace": "kb", "path": "/shelf"})
    assert [c["path"] for c in whole["children"]] == [f"/shelf/item-{i}" for i in range(5)]
    assert whole["next_cursor"] is None
    seen, cursor, pages = [], None, 0
    while True:
        args = {"workspace": "kb", "path": "/shelf", "children_limit": 2, **({"cursor": cursor} if cursor else {})}
        page = call(server, None, "get_node", args)
        assert page["node"]["path"] == "/shelf" and len(page["children"]) <= 2
        seen += [c["path"] for c in page["children"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"/shelf/item-{i}" for i in range(5)] and pages == 3
    for bad, said in (({"children_limit": 0}, "children_limit"), ({"children_limit": 1001}, "children_limit"),
                      ({"cursor": "not-a-cursor"}, "cursor")):
        error = call(server, None, "get_node", {"workspace": "kb", "path": "/shelf", **bad}, error=True, raw=True)
        assert said in error, error


def test_a_merge_conflict_is_resolved_over_mcp(acme):
    """An agent finishes a conflicted merge through the tool: the dry run lists the conflict,
    the same call with ``resolutions`` shows the plan, and the merge writes the taken side."""
    run(acme, OPERATOR, branch_ops.create_branch, "acme", name="agent/s1", from_branch="main")
    run(acme, OPERATOR, node_ops.put_node, "acme", "agent/s1", "kb", "/keys", node_type="kb:Article",
        properties={"content": "Rotate keys monthly."})
    run(acme, OPERATOR, node_ops.put_node, "acme", "main", "kb", "/keys", node_type="kb:Article",
        properties={"content": "Rotate keys yearly."})
    server = build_server(acme, fixed_binding("acme", "agent/s1"))
    refused = call(server, None, "merge", {"dry_run": True}, error=True)
    assert refused["error"]["code"] == "merge_conflict"
    assert [(c["workspace"], c["path"]) for c in refused["error"]["details"]["conflicts"]] == [("kb", "/keys")]
    theirs = [{"workspace": "kb", "path": "/keys", "take": "theirs"}]
    seen = call(server, None, "merge", {"dry_run": True, "resolutions": theirs})
    assert seen["applied"]["nodes"]["modified"] == [{"workspace": "kb", "path": "/keys"}]
    merged = call(server, None, "merge", {"resolutions": theirs, "if_plan": seen["plan"]})
    assert merged["revision"] is not None
    on_main = call(server, None, "get_node", {"workspace": "kb", "path": "/keys", "branch": "main"})
    assert on_main["node"]["properties"]["content"] == "Rotate keys monthly."
    bad = call(server, None, "merge", {"resolutions": [{"workspace": "kb", "path": "/keys", "take": "mine"}]},
               error=True)
    assert bad["error"]["code"] == "invalid_input" and "take" in bad["error"]["message"]


def test_the_function_tools_take_the_fields_of_the_functions_input_models(acme):
    """Each tool over an agent function is typed by the fields of its kg.types input model (ask
    without store_answer, a write), and branch; an argument out of the model's bounds is refused
    as invalid_input before the function runs."""
    from kg.types.functions import (
        AskInput,
        ExtractEntitiesInput,
        GraphContextInput,
        ResearchAssistantInput,
        ResolveEntitiesInput,
    )

    async def listed(client):
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    schemas = mcp_session(build_server(acme, fixed_binding("acme", "main")), None, listed)
    expected = {"ask": [f for f in AskInput.model_fields if f != "store_answer"],
                "graph_context": list(GraphContextInput.model_fields),
                "extract_entities": list(ExtractEntitiesInput.model_fields),
                "resolve_entities": list(ResolveEntitiesInput.model_fields)}
    if "research_assistant" in schemas:
        expected["research_assistant"] = list(ResearchAssistantInput.model_fields)
    for tool, fields in expected.items():
        assert list(schemas[tool]["properties"]) == [*fields, "branch"], tool
    assert schemas["ask"]["required"] == ["question"]
    assert schemas["graph_context"]["properties"]["hops"] == {
        "type": "integer", "minimum": 0, "maximum": 4, "description": "Default: 2."}
    assert schemas["resolve_entities"]["properties"]["threshold"]["maximum"] == 1.0
    server = build_server(acme, fixed_binding("acme", "main"))
    bad = call(server, None, "graph_context", {"seeds": ["kb:/keys"], "max_nodes": 0}, error=True)
    assert bad["error"]["code"] == "invalid_input"
    answer = call(server, None, "ask", {"question": "How do I rotate an API key?", "use_graph": False})
    assert answer["branch"] == "main" and answer["citations"][0]["path"] == "/keys"
