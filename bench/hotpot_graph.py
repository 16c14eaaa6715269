"""The graph leg of ``bench/hotpot.py``: entity extraction over the corpus, then graph-context.

Not a benchmark itself: ``bench/hotpot.py --graph`` imports it.

1. :func:`extract_all` runs the ``extract-entities`` function (``kg.rag.functions.invoke``, the
   code behind ``POST /api/functions/{repo}/extract-entities/invoke``) on every passage node. With
   no LLM configured it uses kg's deterministic extractor (capitalised names, acronyms); entity
   nodes converge at ``/entities/{slug}`` with ``mentioned_in`` edges to the passages. A second
   run finds every fingerprint unchanged and writes nothing.
2. :func:`graph_ranking` answers one question: hybrid search (node granularity, top 100, the
   ranking of the ``hybrid`` mode), then
   the ``graph-context`` function from the hybrid top ``keep`` passages as seeds, 2 hops over
   ``mentioned_in`` edges (passage -> entity -> passage), and fuses two rankings by reciprocal
   rank (k = 60): hybrid's, and the graph's (passages reached from the seeds, by graph-context's
   ``score``: the seeds' mass spread over the entity edges and split by degree, so a passage
   sharing a rare entity with a seed outranks one reached through a hub). The hybrid top ``keep``
   stay first; the other 10 - ``keep`` places go
   to the best fused passages. A passage the graph reaches but search ranked low can thus enter
   the top 10: the second hop that no similarity search finds.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from kg.context import OPERATOR
from kg.rag.functions import invoke
from kg.types.functions import ExtractEntitiesOutput, GraphContextOutput, ResolveEntitiesOutput

RRF_K = 60


def extract_all(services: Any, workspace: str, corpus: dict[str, dict]) -> dict[str, Any]:
    """Run extract-entities on every passage node; figures of the run."""
    from bench.beir import REPO

    started = time.perf_counter()
    done = skipped = entities = mentions = 0
    extractor: str | None = None
    for n, did in enumerate(corpus, start=1):
        out = invoke(services, OPERATOR, REPO, "extract-entities", {"workspace": workspace, "path": f"/doc/{did}"})
        assert isinstance(out, ExtractEntitiesOutput)
        extractor = out.extractor
        if out.skipped:
            skipped += 1
        else:
            done += 1
            entities += len(out.entities)
            mentions += sum(1 for r in out.relations if r.type == "mentioned_in")
        if n % 500 == 0:
            print(f"  extracted {n}/{len(corpus)}", file=sys.stderr, flush=True)
    return {"extracted": done, "skipped": skipped, "entities_named": entities,
            "extractor": extractor,
            "seconds": round(time.perf_counter() - started, 1)}


def resolve_onto_branch(services: Any, workspace: str) -> tuple[str, dict[str, Any]]:
    """Resolve the entities on a new branch made from ``main`` and merge the proposal into it.

    Returns the branch (``bench/resolved-<UTC timestamp>``; the proposal branch is deleted once
    merged) and the figures: entities, merges, names merged, edges re-pointed / combined /
    dropped, the merge's changes, seconds.
    """
    from datetime import UTC, datetime

    from bench.beir import REPO
    from kg.context import run
    from kg.ops.branches import create_branch, delete_branch
    from kg.ops.merge import merge_branch

    # the review loop: a branch made from main, the proposal made from it, merged back into it
    target = f"bench/resolved-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    run(services, OPERATOR, create_branch, REPO, name=target, from_branch="main")
    started = time.perf_counter()
    proposal = invoke(services, OPERATOR, REPO, "resolve-entities", {"workspace": workspace}, branch=target)
    assert isinstance(proposal, ResolveEntitiesOutput)
    resolved = time.perf_counter() - started
    merge_changes: dict[str, Any] = {}
    if proposal.branch:
        merged = run(services, OPERATOR, merge_branch, REPO, proposal.branch, target,
                     message="bench: the resolve-entities proposal")
        merge_changes = {"nodes": {k: len(v) for k, v in merged.applied.nodes.as_json().items()},
                         "relations": merged.applied.relations.as_json()}
        run(services, OPERATOR, delete_branch, REPO, proposal.branch)
    figures = {
        "entities": proposal.entities, "merges": len(proposal.merges),
        "names_merged": sum(len(m.merged) for m in proposal.merges),
        "edges": proposal.edges.as_json() if proposal.edges else {},
        "merge_changes": merge_changes,
        "examples": [[m.kept_name, *m.names] for m in proposal.merges[:8]],
        "resolve_seconds": round(resolved, 1), "seconds": round(time.perf_counter() - started, 1),
    }
    return target, figures


#: The subject leg's settings chosen by 5-fold cross-validation in bench/cv_graph.py (the same
#: choice on every fold; docs/benchmarks/retrieval.md): the subject passages of hybrid's top 5 first.
SUBJECT_SEEDS, SUBJECT_KEEP = 5, 0


def subject_ranking(services: Any, workspace: str, question: str, *, branch: str = "main") -> list[str]:
    """Passage ids, best first: the subject leg (``graph-context`` ``follow: "subjects"``) of
    hybrid's top :data:`SUBJECT_SEEDS`, then the rest of hybrid (bench/cv_graph.py's
    :func:`~bench.cv_graph.subject_combined`)."""
    from bench.cv_graph import subject_combined, subject_leg
    from bench.hotpot import run_search

    ranked = run_search(services, workspace, question, "hybrid", 100, branch)
    reached, _ = subject_leg(services, workspace, ranked, SUBJECT_SEEDS, branch)
    return subject_combined(ranked, reached, seeds=SUBJECT_SEEDS, keep=SUBJECT_KEEP)


def graph_ranking(services: Any, workspace: str, question: str, *, keep: int = 5, k: int = 10,
                  branch: str = "main") -> list[str]:
    """Passage ids, best first: hybrid top ``keep``, then hybrid and graph fused by RRF."""
    from bench.beir import REPO
    from bench.hotpot import run_search

    # the same hybrid ranking as the "hybrid" mode (node granularity), so that the two modes
    # differ only by the graph leg
    ranked = run_search(services, workspace, question, "hybrid", 100, branch)
    seeds = [f"{workspace}:/doc/{did}" for did in ranked[:keep]]
    reached: list[str] = []
    if seeds:
        context = invoke(services, OPERATOR, REPO, "graph-context", {
            "seeds": seeds, "hops": 2, "types": ["mentioned_in"], "direction": "BOTH",
            "max_nodes": 200, "fan_out": 25}, branch=branch)
        assert isinstance(context, GraphContextOutput)
        found = [node for node in context.nodes if node.hop == 2 and node.path.startswith("/doc/")]
        # graph-context's relevance score (seed mass spread over the entity edges, split by
        # degree), best first; the walk order breaks ties
        found.sort(key=lambda node: -(node.score or 0.0))
        reached = [node.path.rsplit("/", 1)[-1] for node in found]
    score: dict[str, float] = {}
    for rank, did in enumerate(ranked, start=1):
        score[did] = score.get(did, 0.0) + 1 / (RRF_K + rank)
    for rank, did in enumerate(reached, start=1):
        score[did] = score.get(did, 0.0) + 1 / (RRF_K + rank)
    head = ranked[:keep]
    rest = sorted((d for d in score if d not in head), key=lambda d: -score[d])
    return (head + rest)[:k]
