"""``kg ingest``: files become nodes, their text chunked and embedded, a format's relations edges.

The lifecycle (DESIGN.md, "Retrieval"): a file whose node is unchanged is skipped (no write, no
embedding call); a changed file is re-embedded and its node replaced; unchanged text is never
embedded again because chunks are keyed by content. What a file becomes is its format's
business (:mod:`kg.ops.formats`: ``text``, the default, or ``pep``).

:func:`ingest_path` is an orchestration over use cases: embedding is batched across a group of
files outside any transaction, then each file is written in a unit of work of its own
(:func:`ingest_file`, through :func:`kg.context.run` and :func:`kg.ops.texts.write_node`), so a
failure loses nothing already ingested; the relations follow in one more (:func:`relate_files`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kg.access import (
    authorize_new_repository,
    authorize_new_workspace,
    can_see,
    refuse_reserved_workspace,
    reserved_repositories,
)
from kg.context import Actor, Resources, UnitOfWork, reading, run
from kg.errors import InvalidInput, NotFound, ProviderError
from kg.indexing.config import parse_embedding_config
from kg.ops.files import iter_files, read_file_node
from kg.ops.formats import DEFAULT_FORMAT, FileNode, IngestFormat, get_format
from kg.ops.text_store import EmbeddedText, prepare_chunks
from kg.ops.texts import write_node
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.models import NodeVersion
from kg.store.repos import create_repository, create_workspace, get_repository, get_workspace

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
    unreadable: list[dict[str, str]] = field(default_factory=list)
    """Files skipped because they could not be read: ``{"file", "reason"}``."""

    def as_dict(self) -> dict[str, Any]:
        """The report as the CLI prints it: counts.

        Returns
        -------
        dict
            The counts, as ``kg ingest`` prints them.
        """
        return {
            "files": self.files, "inserted": len(self.inserted), "replaced": len(self.replaced),
            "skipped": len(self.skipped), "passages_embedded": self.passages_embedded,
            "relations_added": self.relations_added,
            "relations_unchanged": self.relations_unchanged, "stub_nodes": len(self.stub_nodes),
            "index_failures": self.index_failures, "unreadable": len(self.unreadable),
        }


def ensure_repo_workspace(uow: UnitOfWork, repo: str, workspace: str, *, create: bool = True) -> None:
    """Create the repository and workspace when missing (and ``create``).

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, workspace : str
        Their names.
    create : bool
        Create what is missing; else refuse.

    Raises
    ------
    kg.errors.NotFound
        Missing and ``create`` is False.
    kg.errors.InvalidInput
        A bad name, or a reserved one to create (:func:`kg.access.authorize_new_repository`:
        the RAG node's repository is made by the RAG node only), or a workspace to create in
        it (:func:`kg.access.refuse_reserved_workspace`).
    kg.errors.Forbidden
        A key without ``admin`` on the repository, to create it or the workspace.
    """
    session = uow.session
    try:
        r = get_repository(session, repo, lock=True)
    except NotFound:
        if not create:
            raise
        authorize_new_repository(uow.actor, repo, reserved_repositories(uow.services.settings))
        r = create_repository(session, name=repo)
    if create and not can_see(uow.actor, repo, workspace=workspace):
        # Before existence: a name outside the key's workspaces answers alike, taken or free.
        uow.authorize("admin", repo)
        authorize_new_workspace(uow.actor, repo, workspace)
    try:
        get_workspace(session, r, workspace)
    except NotFound:
        if not create:
            raise
        uow.authorize("admin", repo)
        authorize_new_workspace(uow.actor, repo, workspace)
        refuse_reserved_workspace(repo, workspace, reserved_repositories(uow.services.settings))
        config = parse_embedding_config(None, default_model=uow.services.settings.embedding_model)
        create_workspace(session, r, name=workspace, config={"embedding": config.model_dump()})


def ingest_file(uow: UnitOfWork, repo: str, branch: str, workspace: str, node: FileNode,
                embedded: EmbeddedText | None = None) -> bool:
    """Write one ingested file's node (missing ancestors as folders), as one revision.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, branch, workspace : str
        Where the node is written.
    node : FileNode
        The file as its format read it.
    embedded : EmbeddedText or None
        Its text as embedded before the transaction (:func:`kg.ops.text_store.prepare_chunks`).

    Returns
    -------
    bool
        Whether the node was created (False: it replaced one).

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput
    """
    ctx = uow.begin(repo, branch, message=f"ingest {node.source}")
    _, created = write_node(uow, ctx, workspace, node.path, node_type=node.node_type,
                            properties=node.properties, parents=True, embedded=embedded)
    return created


def relate_files(uow: UnitOfWork, repo: str, branch: str, workspace: str,
                 relations: list[tuple[str, str, str]], file_format: IngestFormat) -> list[str]:
    """Assert the files' relations in one revision; a missing target becomes the format's stub.

    Parameters
    ----------
    uow : kg.context.UnitOfWork
        The write transaction and its caller.
    repo, branch, workspace : str
        Where the relations are asserted.
    relations : list of (str, str, str)
        ``(from path, relation type, to path)`` in ``workspace``.
    file_format : IngestFormat
        Names the stub node of a target no file holds.

    Returns
    -------
    list of str
        The paths of the stub nodes written.

    Raises
    ------
    kg.errors.NotFound
        A missing target the format has no stub for.
    """
    session = uow.session
    ctx = uow.begin(repo, branch, message=f"ingest relations ({len(relations)})")
    stubs = []
    for src, rel, dst in relations:
        if file_format.stub is not None and node_store.find_node(session, ctx.view, workspace, dst) is None:
            stub = file_format.stub(dst)
            write_node(uow, ctx, workspace, dst, node_type=stub.node_type, properties=stub.properties,
                       parents=True)
            stubs.append(dst)
        relation_store.relate(session, ctx, f"{workspace}:{src}", f"{workspace}:{dst}", rel)
    return stubs


def _refuse_one_path_for_two_files(parsed: list[FileNode]) -> None:
    """Two files that become the same node would replace each other on every ingest."""
    by_path: dict[str, list[str]] = {}
    for node in parsed:
        by_path.setdefault(node.path, []).append(node.source)
    clashes = {path: sources for path, sources in by_path.items() if len(sources) > 1}
    if clashes:
        path, sources = next(iter(clashes.items()))
        raise InvalidInput(
            f"{' and '.join(sources)} would both be the node {path}: rename one (a node's path is "
            "its file's path without the suffix)",
            details={"clashes": [{"path": p, "files": s} for p, s in clashes.items()]})


def _add(total: list[int], n: int) -> None:
    """Count ``n`` more passages embedded into ``total[0]``."""
    total[0] += n


def _unchanged(current: NodeVersion | None, node: FileNode) -> bool:
    """Whether the stored node is the file's node already."""
    return current is not None and current.node_type == node.node_type and current.properties == node.properties


def ingest_path(services: Resources, caller: Actor, root: Path, *, repo: str, workspace: str, branch: str = "main",
                format_name: str = DEFAULT_FORMAT, create: bool = True,
                on_files: Callable[[int], None] | None = None,
                on_progress: Callable[[int], None] | None = None,
                skip_unreadable: bool = False) -> IngestReport:
    """Ingest a file or a folder of text files into ``repo`` / ``workspace`` on ``branch``.

    Parameters
    ----------
    services : kg.services.Services
        The process's resources (store, index, embedders).
    caller : kg.context.Actor
        Who ingests (the CLI: :data:`kg.context.OPERATOR`).
    root : Path
        A file, or a folder searched recursively for .md, .markdown, .txt, .rst, .text files.
    repo, workspace, branch : str
        Where the nodes are written.
    format_name : str
        The ingest format (:data:`kg.ops.formats.FORMATS`): ``text`` (documents) or ``pep``.
    create : bool
        Create the repository and workspace if missing.
    on_files : callable(int), optional
        Told the number of files once they are listed.
    on_progress : callable(int), optional
        Called with the number of files done after each group of files.
    skip_unreadable : bool
        Skip a file that cannot be read (not UTF-8, no permission, refused by the format) and
        ingest the others, listing it in the report's ``unreadable``; False: refuse the whole
        ingest before anything is written.

    Returns
    -------
    IngestReport
        What was inserted, replaced, skipped and embedded.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown format, a missing path, an unreadable or non-UTF-8 file (without
        ``skip_unreadable``), or two files that would be the same node (``a.md`` and
        ``a.txt`` are both ``/a``): nothing is written.
    kg.errors.NotFound
        Unknown branch, or repository / workspace without ``create``.
    kg.errors.ProviderError
        The embedder failed (files already written stay written).
    """
    file_format = get_format(format_name)
    files = list(iter_files(root))  # a missing path is refused before anything is created
    base = root if root.is_dir() else root.parent
    parsed: list[FileNode] = []
    unreadable: list[dict[str, str]] = []
    for path in files:
        try:
            parsed.append(read_file_node(path, base, file_format))
        except InvalidInput as exc:
            if not skip_unreadable:
                raise
            unreadable.append({"file": str(path), "reason": exc.details.get("reason", exc.message)})
    _refuse_one_path_for_two_files(parsed)
    run(services, caller, ensure_repo_workspace, repo, workspace, create=create)
    if on_files is not None:
        on_files(len(parsed))
    report = IngestReport(files=len(files), unreadable=unreadable)
    relations: list[tuple[str, str, str]] = []
    for start in range(0, len(parsed), GROUP_FILES):
        group = parsed[start:start + GROUP_FILES]
        with reading(services, caller, repo, branch) as (session, view):
            current = {n.path: node_store.find_node(session, view, workspace, n.path) for n in group}
        todo = [n for n in group if not _unchanged(current[n.path], n)]
        report.skipped += [n.path for n in group if _unchanged(current[n.path], n)]
        counted = [0]
        items = [(workspace, n.properties) for n in todo]
        try:
            embedded = prepare_chunks(services, repo, items, progress=functools.partial(_add, counted))
        except ProviderError:
            # One bad text must not stop the others: store the nodes and let the indexer
            # embed them one by one, recording the failing one with its reason.
            embedded = prepare_chunks(services, repo, items, embed=False)
        report.passages_embedded += counted[0]
        for node, text in zip(todo, embedded, strict=True):
            created = run(services, caller, ingest_file, repo, branch, workspace, node, text)
            (report.inserted if created else report.replaced).append(node.path)
        for node in group:
            relations += [(node.path, rel, target) for rel, target in node.relations]
        if on_progress is not None:
            on_progress(len(group))
    if relations:
        _write_relations(services, caller, repo, workspace, branch, relations, file_format, report)
    if report.inserted or report.replaced:
        services.db.analyze()
    return report


def _write_relations(services: Resources, caller: Actor, repo: str, workspace: str, branch: str,
                     relations: list[tuple[str, str, str]], file_format: IngestFormat,
                     report: IngestReport) -> None:
    """Count the relations already asserted; assert the others in one unit of work."""
    with reading(services, caller, repo, branch) as (session, view):
        pending = []
        for src, rel, dst in relations:
            a = node_store.find_node(session, view, workspace, src)
            b = node_store.find_node(session, view, workspace, dst)
            if a is not None and b is not None and relation_store.find_relation(session, view, a.node_id,
                                                                                b.node_id, rel):
                report.relations_unchanged += 1
            else:
                pending.append((src, rel, dst))
    if not pending:
        return
    report.stub_nodes += run(services, caller, relate_files, repo, branch, workspace, pending, file_format)
    report.relations_added += len(pending)
