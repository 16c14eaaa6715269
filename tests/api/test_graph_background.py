"""Issue 16: the first traverse of a large cold branch builds its view in a background thread;
that request and every request arriving while the view builds are answered from SQL without
waiting for the build. The build is held on an event here, so no clock is involved: a request
that waited for the build would see the build finished."""

from __future__ import annotations

import gc
import threading

import kg.rag.graph as rag_graph
from kg.graph.cache import GraphCache
from tests.api.test_graph import k, nb, node, rel, walk


def test_requests_during_a_background_build_are_answered_from_sql_without_waiting(client, repo, services,
                                                                                   monkeypatch):
    for p in ("/a", "/b", "/c", "/d"):
        node(client, k(p))
    rel(client, k("/a"), k("/b"), weight=2.0)
    rel(client, k("/a"), k("/c"), weight=1.0)
    rel(client, k("/c"), k("/d"))
    services.graphs = GraphCache(inline_build_max=0)  # every branch is "large": built in the background
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    builds = []
    original = rag_graph._build

    def held_build(session, view, max_edges, **options):
        builds.append(threading.current_thread().name)
        started.set()
        assert release.wait(60), "the test never released the build"
        try:
            return original(session, view, max_edges, **options)
        finally:
            finished.set()

    monkeypatch.setattr(rag_graph, "_build", held_build)
    first = walk(client, [k("/a")], hops=2)
    assert started.wait(60)  # the build runs, held, in another thread
    assert builds and builds[0] != threading.current_thread().name
    # While it is held: the first traverse was answered, and so are the next requests, from SQL.
    again = walk(client, [k("/a")], hops=2)
    near = nb(client, k("/a"))
    assert not finished.is_set() and len(services.graphs) == 0
    assert [n["path"] for n in first["nodes"]] == ["/a", "/b", "/c", "/d"] and again == first
    assert [(r["path"], r["weight"]) for r in near["neighbors"]] == [("/b", 2.0), ("/c", 1.0)]
    assert len(builds) == 1  # one build under way per branch, not one per request
    release.set()
    services.graphs.join_builds()
    assert finished.is_set() and len(services.graphs) == 1
    # A background build freezes its view: the cyclic collector's passes no longer walk it
    # (they held every request of the process for seconds at 5M edges).
    (held,) = [services.graphs.get(key) for key in list(services.graphs._views)]
    assert not any(o is held.graph._succ for o in gc.get_objects()) and gc.isenabled()
    # The view, once held, answers the same (and is brought forward by later writes).
    rel(client, k("/b"), k("/d"), weight=5.0)
    warm = walk(client, [k("/a")], hops=2)
    assert len(builds) == 1 and len(services.graphs) == 1
    assert [(n["path"], n["hop"]) for n in warm["nodes"]] == [("/a", 0), ("/b", 1), ("/c", 1), ("/d", 2)]
    assert nb(client, k("/a")) == near


def test_a_small_branch_is_still_built_by_the_traverse_that_asks(client, repo, services):
    node(client, k("/a"))
    node(client, k("/b"))
    rel(client, k("/a"), k("/b"))
    walk(client, [k("/a")], hops=1)
    assert len(services.graphs) == 1 and not services.graphs.building(next(iter(services.graphs._views)))


def test_a_failed_background_build_leaves_sql_answering(client, repo, services, monkeypatch):
    node(client, k("/a"))
    node(client, k("/b"))
    rel(client, k("/a"), k("/b"))
    services.graphs = GraphCache(inline_build_max=0)

    def broken(session, view, max_edges):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(rag_graph, "_build", broken)
    first = walk(client, [k("/a")], hops=1)
    services.graphs.join_builds()
    assert len(services.graphs) == 0
    assert walk(client, [k("/a")], hops=1) == first and [n["path"] for n in first["nodes"]] == ["/a", "/b"]
    services.graphs.join_builds()
