"""``kg ingest``: files become nodes, their text chunked and embedded, PEP headers relations.

The lifecycle (DESIGN.md, "Retrieval"): a file whose node is unchanged is skipped (no write, no
embedding call); a changed file is re-embedded and its node replaced; unchanged text is never
embedded again because chunks are keyed by content. Embedding is batched across files; each
file is then written in its own transaction, so a failure loses nothing already ingested.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kg.errors import NotFound, ProviderError
from kg.indexing.chunks import store_chunks
from kg.indexing.config import parse_embedding_config
from kg.indexing.index_jobs import enqueue
from kg.ops.files import FileNode, iter_files, read_file_node
from kg.ops.nodes import plan_for, prepare_chunks, prepare_chunks_plans_only
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.nodes import NodeWrite
from kg.store.repos import (
    begin_write,
    branch_view,
    create_repository,
    create_workspace,
    get_repository,
    get_workspace,
)

GROUP_FILES = 16


@dataclass
class IngestReport:
    """What an ingest did."""

    files: int = 0
    inserted: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    passages_embedded: int = 0
    relations_added: int = 0
    relations_unchanged: int = 0
    stub_nodes: list[str] = field(default_factory=list)
    index_failures: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": self.files, "inserted": len(self.inserted), "replaced": len(self.replaced),
            "skipped": len(self.skipped), "passages_embedded": self.passages_embedded,
            "relations_added": self.relations_added,
            "relations_unchanged": self.relations_unchanged, "stub_nodes": len(self.stub_nodes),
            "index_failures": self.index_failures,
        }


def ensure_repo_workspace(services, repo: str, workspace: str, *, create: bool = True) -> None:
    """Create the repository and workspace when missing (and ``create``).

    Raises
    ------
    kg.errors.NotFound
        Missing and ``create`` is False.
    """
    with services.db.write() as session:
        try:
            r = get_repository(session, repo, lock=True)
        except NotFound:
            if not create:
                raise
            r = create_repository(session, name=repo)
        try:
            get_workspace(session, r, workspace)
        except NotFound:
            if not create:
                raise
            config = parse_embedding_config(None, default_model=services.settings.embedding_model)
            create_workspace(session, r, name=workspace, config={"embedding": config.model_dump()})


def _unchanged(current, node: FileNode) -> bool:
    return current is not None and current.node_type == node.node_type and current.properties == node.properties


def ingest_path(services, root: Path, *, repo: str, workspace: str, branch: str = "main",
                create: bool = True, on_files: Callable[[int], None] | None = None,
                on_progress: Callable[[int], None] | None = None) -> IngestReport:
    """Ingest a file or a folder of text files into ``repo`` / ``workspace`` on ``branch``.

    Parameters
    ----------
    services : kg.services.Services
    root : Path
        A file, or a folder searched recursively for .md, .markdown, .txt, .rst, .text files.
    repo, workspace, branch : str
    create : bool
        Create the repository and workspace if missing.
    on_files : callable(int), optional
        Told the number of files once they are listed.
    on_progress : callable(int), optional
        Called with the number of files done after each file.

    Returns
    -------
    IngestReport

    Raises
    ------
    kg.errors.InvalidInput
        A missing path or a non-UTF-8 file (nothing of that file is written).
    kg.errors.NotFound
        Unknown branch, or repository / workspace without ``create``.
    kg.errors.ProviderError
        The embedder failed (files already written stay written).
    """
    files = list(iter_files(root))  # a missing path is refused before anything is created
    ensure_repo_workspace(services, repo, workspace, create=create)
    if on_files is not None:
        on_files(len(files))
    base = root if root.is_dir() else root.parent
    report = IngestReport(files=len(files))
    parsed = [read_file_node(path, base) for path in files]
    relations: list[tuple[str, str, str]] = []
    for start in range(0, len(parsed), GROUP_FILES):
        group = parsed[start:start + GROUP_FILES]
        with services.db.read() as session:
            view = branch_view(session, repo, branch)
            current = {n.path: node_store.find_node(session, view, workspace, n.path) for n in group}
        todo = [n for n in group if not _unchanged(current[n.path], n)]
        report.skipped += [n.path for n in group if _unchanged(current[n.path], n)]
        counted = [0]

        def count(n: int) -> None:
            counted[0] += n

        try:
            plans, rows = prepare_chunks(services, repo, [(workspace, n.properties) for n in todo],
                                         progress=count)
        except ProviderError:
            # One bad text must not stop the others: store the nodes and let the indexer
            # embed them one by one, recording the failing one with its reason.
            plans, rows = prepare_chunks_plans_only(services, repo, [(workspace, n.properties) for n in todo]), {}
        report.passages_embedded += counted[0]
        for node, plan in zip(todo, plans):
            with services.db.write() as session:
                ctx = begin_write(session, repo, branch, message=f"ingest {node.source}")
                # The workspace may have been re-embedded since the text was planned: then the
                # chunks embedded above belong to the old settings and the indexer embeds anew.
                key = plan_for(services, session, ctx.repo, workspace, node.properties).content_key
                if key == plan.content_key and key in rows:
                    store_chunks(session, ctx.repo.id, rows[key])
                version, created = node_store.put_node(
                    session, ctx, workspace, node.path,
                    NodeWrite(node.node_type, node.properties, None, key), parents=True,
                )
                enqueue(session, repo_id=ctx.repo.id, workspace_id=version.workspace_id,
                        content_key=key, node_version_id=version.id)
            (report.inserted if created else report.replaced).append(node.path)
        for node in group:
            relations += [(node.path, rel, target) for rel, target in node.relations]
        if on_progress is not None:
            on_progress(len(group))
    if relations:
        _write_relations(services, repo, workspace, branch, relations, report)
    if report.inserted or report.replaced:
        services.db.analyze()
    return report


def _write_relations(services, repo, workspace, branch, relations, report: IngestReport) -> None:
    """Assert the files' relations in one revision; a missing target becomes a stub node."""
    with services.db.read() as session:
        view = branch_view(session, repo, branch)
        pending = []
        for src, rel, dst in relations:
            a = node_store.find_node(session, view, workspace, src)
            b = node_store.find_node(session, view, workspace, dst)
            if a is not None and b is not None and relation_store.find_relation(session, view, a.node_id, b.node_id, rel):
                report.relations_unchanged += 1
            else:
                pending.append((src, rel, dst))
    if not pending:
        return
    with services.db.write() as session:
        ctx = begin_write(session, repo, branch, message=f"ingest relations ({len(pending)})")
        for src, rel, dst in pending:
            if node_store.find_node(session, ctx.view, workspace, dst) is None:
                number = dst.rsplit("-", 1)[-1].lstrip("0") or "0"
                node_store.put_node(session, ctx, workspace, dst, NodeWrite(
                    "pep:External", {"pep": int(number), "in_corpus": False}, None, None), parents=True)
                report.stub_nodes.append(dst)
            relation_store.relate(session, ctx, f"{workspace}:{src}", f"{workspace}:{dst}", rel)
            report.relations_added += 1
