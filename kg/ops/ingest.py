"""``kg ingest``: files become nodes, their text chunked and embedded, a format's relations edges.

The lifecycle (``docs/guides/ingest.md``) is per file content hash, and people's edits of ingested
nodes survive it: a file whose sha256 is the one the branch's last ingest of it recorded
(:mod:`kg.store.ingest_records`) is skipped, whatever happened to its node since (no write, no
embedding); a changed file is a three-way merge (:func:`plan_file`, :func:`merge_file`) of the
node now with the file's new parse against the parse the last ingest recorded: the file's
changes apply where the node was not edited, a property both changed keeps the person's value
and is reported (or, with ``conflicts="review"``, the file's version goes to a review branch);
a node people deleted stays deleted. Chunks are keyed by content, so unchanged text is never
embedded again. What a file becomes is its format's business (:mod:`kg.ops.formats`).

:func:`ingest_path` orchestrates use cases: embedding is batched over a group of files outside
any transaction, then each file is planned again and written in a unit of work of its own
(:func:`ingest_file`), so a failure loses nothing already ingested; the relations follow in
one more (:func:`relate_files`), the review branch in a last one (:func:`write_review`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.orm import Session

from kg.access import (
    authorize_new_repository,
    authorize_new_workspace,
    can_see,
    refuse_reserved_workspace,
    reserved_repositories,
)
from kg.context import Actor, Resources, UnitOfWork, reading, run
from kg.errors import Conflict, InvalidInput, NotFound, ProviderError
from kg.indexing.config import parse_embedding_config
from kg.ops.branches import create_branch
from kg.ops.files import iter_files, read_file_node
from kg.ops.formats import DEFAULT_FORMAT, FileNode, IngestFormat, get_format
from kg.ops.text_store import EmbeddedText, prepare_chunks
from kg.ops.texts import write_node
from kg.store import ingest_records
from kg.store import nodes as node_store
from kg.store import relations as relation_store
from kg.store.models import utcnow
from kg.store.paths import validate_name, validate_path
from kg.store.repos import (
    BranchView,
    WriteContext,
    create_repository,
    create_workspace,
    get_repository,
    get_workspace,
    list_branches,
)
from kg.types.bulk import IngestReport, KeptEdit, UnreadableFile

__all__ = [
    "CONFLICT_MODES", "FilePlan", "GROUP_FILES", "RELATIONS_MESSAGE", "REVIEW_BRANCH_FORMAT",
    "ensure_repo_workspace", "file_sha256", "ingest_file", "ingest_files", "ingest_message", "ingest_path",
    "merge_file", "plan_file", "relate_files", "unrelate_files", "write_review",
]

GROUP_FILES = 16


def _count(report: IngestReport, plan: FilePlan) -> None:
    """Count in ``report`` what the ingest of one file did."""
    path = plan.node.path
    {"insert": report.inserted, "write": report.replaced}.get(plan.action, report.skipped).append(path)
    report.kept_edits += plan.kept
    if plan.kept_deleted:
        report.kept_deleted.append(path)


def ensure_repo_workspace(uow: UnitOfWork, repo: str, workspace: str, *, create: bool = True) -> None:
    """Create the repository and workspace when missing and ``create`` (``admin`` needed); refuse
    the RAG node's reserved repository (:func:`kg.access.authorize_new_repository`,
    :func:`kg.access.refuse_reserved_workspace`).

    Raises
    ------
    kg.errors.NotFound
        Missing and ``create`` is False.
    kg.errors.InvalidInput
        The RAG node's repository, to create or to create a workspace in.
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


#: What ``conflicts`` may be: keep the person's value of a property both changed, or also put
#: the file's version of the node on a review branch.
CONFLICT_MODES = ("keep", "review")
#: The review branch's name when the caller gives none: ``ingest/`` and the UTC time.
REVIEW_BRANCH_FORMAT = "ingest/%Y%m%d-%H%M%S"
_MISSING = object()
#: What ingesting a file does at its node (:class:`FilePlan`).
FileAction = Literal["insert", "write", "skip", "record", "review"]
#: The start of the revision message of an ingest's relations (and the stubs of their targets).
RELATIONS_MESSAGE = "ingest relations ("


@dataclass
class FilePlan:
    """What the ingest of one file does at its node (:func:`plan_file`).

    ``action``: ``insert`` a new node; ``write`` the merged ``value``; ``skip`` an unchanged file
    or a node that is its parse; ``record`` the hash alone, keeping ``value`` (people deleted the
    node, ``kept_deleted``, or hold every value the file changed); ``review``: the file's version
    (``review_value``) goes to the review branch. ``kept`` lists a :class:`kg.types.bulk.KeptEdit`
    per property both sides changed; ``base_relations`` the relations of the last
    ingest (None: unknown).
    """

    node: FileNode
    action: FileAction
    value: dict[str, Any] | None = None
    kept: list[KeptEdit] = field(default_factory=list)
    kept_deleted: bool = False
    review_value: dict[str, Any] | None = None
    base_relations: list[tuple[str, str]] | None = None

    def relation_changes(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """``(added, dropped)`` ``(type, target path)`` relations since the last ingest (all added when
        its are unknown).
        """
        if self.base_relations is None:
            return list(self.node.relations), []
        return ([r for r in self.node.relations if r not in self.base_relations],
                [r for r in self.base_relations if r not in self.node.relations])


def ingest_message(node: FileNode) -> str:
    """The revision message of a file's ingest: ``ingest <file>``."""
    return f"ingest {node.source}"


def file_sha256(node: FileNode) -> str:
    """The sha256 of a parsed file's bytes (:func:`kg.ops.files.read_file_node` sets it).

    Raises
    ------
    kg.errors.InvalidInput
        The parse carries no hash (not read from a file).
    """
    sha = node.properties.get("sha256")
    if not isinstance(sha, str):
        raise InvalidInput(f"{node.source or node.path} has no sha256: read it with read_file_node")
    return sha


def merge_file(base: dict[str, Any] | None, ours: dict[str, Any],
               theirs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Three-way merge of flat values: ``(merged, conflicting keys)``, ours kept on a conflict. Per
    key, as diff3 per line: a key only the file (``theirs``) changed takes its value, one only the
    person (``ours``) changed keeps theirs, one changed alike is that value, one changed
    differently is a conflict; ``sha256`` is the file's. With ``base`` None (no ingest recorded),
    every differing key counts as changed on both sides. O(k).

    >>> base = {"status": "Draft", "title": "T"}
    >>> merge_file(base, {"status": "Final", "title": "T"}, {"status": "Draft", "title": "U"})
    ({'status': 'Final', 'title': 'U'}, [])
    >>> merge_file(base, {"status": "Final", "title": "T"}, {"status": "Active", "title": "T"})
    ({'status': 'Final', 'title': 'T'}, ['status'])
    """
    merged: dict[str, Any] = {}
    conflicts = []
    for key in sorted(set(base or {}) | set(ours) | set(theirs)):
        ov, tv = ours.get(key, _MISSING), theirs.get(key, _MISSING)
        bv = _MISSING if base is None else base.get(key, _MISSING)
        if key == "sha256" or ov == tv:
            result = tv
        elif base is not None and tv == bv:
            result = ov
        elif base is not None and ov == bv:
            result = tv
        else:
            conflicts.append(key)
            result = ov
        if result is not _MISSING:
            merged[key] = result
    return merged, conflicts


def plan_file(session: Session, view: BranchView, workspace: str, node: FileNode, *,
              conflicts: str = "keep") -> FilePlan:
    """Decide what ingesting one file does at its node (the lifecycle of the module docstring);
    reads only.

    A node without a record (ingested before records were kept, or made by a person) is skipped
    when its ``sha256`` property is the file's hash or it is the file's parse; otherwise its base
    is the version the file's last ingest wrote, found in the revision log
    (:func:`ingest_message`), failing that unknown: every differing value is kept as the node
    holds it.
    """
    sha = file_sha256(node)
    path = validate_path(node.path)
    base_relations: list[tuple[str, str]] | None = None
    record = ingest_records.find_record(session, view, workspace, path)
    current = node_store.find_node(session, view, workspace, path)
    theirs = ingest_records.flat_value(node.node_type, node.properties)
    ours = ingest_records.version_value(current)
    if record is not None and record.sha256 == sha:
        return FilePlan(node, "skip", ours)
    if record is None:
        if ours is None:
            return FilePlan(node, "insert", theirs)
        if ours == theirs or ours.get("sha256") == sha:
            return FilePlan(node, "skip", ours)
        # Ingested before records were kept: that ingest wrote the file's parse exactly.
        # (a stub of a relation's target too: it was written by the ingest's relations).
        base = ingest_records.version_value(ingest_records.last_written_by(
            session, view, workspace, path, ingest_message(node), prefix=RELATIONS_MESSAGE))
    else:
        base = ingest_records.record_base(session, view, record)
        if record.relations is not None:
            base_relations = [(rel, target) for rel, target in record.relations]
        if ours is None:  # people deleted the node: it stays deleted
            if conflicts == "review":
                return FilePlan(node, "review", None, kept_deleted=True, review_value=theirs,
                                base_relations=base_relations)
            return FilePlan(node, "record", None, kept_deleted=True, base_relations=base_relations)
    merged, clashes = merge_file(base, ours, theirs)
    kept = [KeptEdit(path=path, key=key, kept=ours.get(key), file=theirs.get(key)) for key in clashes]
    if clashes and conflicts == "review":
        review_value = {k: v for k, v in merged.items() if k not in clashes}
        review_value.update({k: theirs[k] for k in clashes if k in theirs})
        return FilePlan(node, "review", ours, kept=kept, review_value=review_value, base_relations=base_relations)
    if merged == ours:
        return FilePlan(node, "record", ours, kept=kept, base_relations=base_relations)
    return FilePlan(node, "write", merged, kept=kept, base_relations=base_relations)


def ingest_file(uow: UnitOfWork, repo: str, branch: str, workspace: str, node: FileNode,
                embedded: EmbeddedText | None = None, *, conflicts: str = "keep") -> FilePlan:
    """Ingest one file as one revision: plan it again under the write lock, write the node (missing
    ancestors as folders) and its record, or the record alone; ``skip`` and ``review`` write
    nothing. ``embedded`` is used only if written as it was embedded.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput
        A bad path or value.
    """
    ctx = uow.begin(repo, branch, message=ingest_message(node))
    plan = plan_file(uow.session, ctx.view, workspace, node, conflicts=conflicts)
    if plan.action == "record":
        ctx.retitle(f"ingest {node.source} (the node stays deleted)" if plan.kept_deleted
                    else f"ingest {node.source} (the node already holds it)")
    _apply(uow, ctx, workspace, plan, embedded)
    return plan


def ingest_files(uow: UnitOfWork, repo: str, branch: str, workspace: str,
                 files: list[tuple[FileNode, EmbeddedText | None]], *, message: str) -> list[FilePlan]:
    """:func:`ingest_file` for several files in one revision (the RAG node's input); their plans.

    Raises
    ------
    kg.errors.NotFound, kg.errors.InvalidInput
        A bad path or value.
    """
    ctx = uow.begin(repo, branch, message=message)
    plans = []
    for node, embedded in files:
        plan = plan_file(uow.session, ctx.view, workspace, node)
        _apply(uow, ctx, workspace, plan, embedded)
        plans.append(plan)
    return plans


def _apply(uow: UnitOfWork, ctx: WriteContext, workspace: str, plan: FilePlan,
           embedded: EmbeddedText | None) -> None:
    if plan.action in ("skip", "review"):
        return
    node = plan.node
    if plan.action in ("insert", "write"):
        assert plan.value is not None
        node_type, properties = ingest_records.split_value(plan.value)
        write_node(uow, ctx, workspace, node.path, node_type=node_type, properties=properties, parents=True,
                   embedded=embedded)
    theirs = ingest_records.flat_value(node.node_type, node.properties)
    ingest_records.put_record(uow.session, ctx, workspace, validate_path(node.path), sha256=file_sha256(node),
                              source=node.source, patch=ingest_records.base_patch(plan.value, theirs),
                              relations=node.relations)


def write_review(uow: UnitOfWork, repo: str, branch: str, workspace: str, review_branch: str,
                 plans: list[FilePlan]) -> int:
    """Write the ``review`` plans' values and records on ``review_branch``, forked from ``branch``'s
    head; its revision.

    Raises
    ------
    kg.errors.Conflict
        A branch of that name exists.
    """
    create_branch(uow, repo, name=review_branch, from_branch=branch)
    ctx = uow.begin(repo, review_branch, message=f"ingest: the files' versions of {len(plans)} edited node(s)")
    for plan in plans:
        assert plan.review_value is not None
        node_type, properties = ingest_records.split_value(plan.review_value)
        write_node(uow, ctx, workspace, plan.node.path, node_type=node_type, properties=properties, parents=True)
        theirs = ingest_records.flat_value(plan.node.node_type, plan.node.properties)
        ingest_records.put_record(uow.session, ctx, workspace, validate_path(plan.node.path),
                                  sha256=file_sha256(plan.node), source=plan.node.source,
                                  patch=ingest_records.base_patch(plan.review_value, theirs),
                                  relations=plan.node.relations)
    return ctx.revision


def relate_files(uow: UnitOfWork, repo: str, branch: str, workspace: str,
                 relations: list[tuple[str, str, str]], file_format: IngestFormat) -> list[str]:
    """Assert the files' ``(from path, type, to path)`` relations in one revision, a missing target
    becoming ``file_format``'s stub; the stubs' paths.

    Raises
    ------
    kg.errors.NotFound
        A missing target the format has no stub for.
    """
    session = uow.session
    ctx = uow.begin(repo, branch, message=f"{RELATIONS_MESSAGE}{len(relations)})")
    stubs = []
    for src, rel, dst in relations:
        if file_format.stub is not None and node_store.find_node(session, ctx.view, workspace, dst) is None:
            stub = file_format.stub(dst)
            write_node(uow, ctx, workspace, dst, node_type=stub.node_type, properties=stub.properties,
                       parents=True)
            # The stub's record (no file: no hash) makes it the base of its file's first ingest.
            ingest_records.put_record(session, ctx, workspace, validate_path(dst), sha256="", source="", patch=None)
            stubs.append(dst)
        relation_store.relate(session, ctx, f"{workspace}:{src}", f"{workspace}:{dst}", rel)
    return stubs


def unrelate_files(uow: UnitOfWork, repo: str, branch: str, workspace: str,
                   relations: list[tuple[str, str, str]]) -> int:
    """Remove, in one revision, the relations files no longer assert; how many were still there."""
    session = uow.session
    ctx = uow.begin(repo, branch, message=f"ingest: relations the files dropped ({len(relations)})")
    removed = 0
    for src, rel, dst in relations:
        if node_store.find_node(session, ctx.view, workspace, src) is None or \
                node_store.find_node(session, ctx.view, workspace, dst) is None:
            continue
        removed += relation_store.unrelate(session, ctx, f"{workspace}:{src}", f"{workspace}:{dst}", rel)
    return removed


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
    total[0] += n


def ingest_path(services: Resources, caller: Actor, root: Path, *, repo: str, workspace: str, branch: str = "main",
                format_name: str = DEFAULT_FORMAT, create: bool = True,
                on_files: Callable[[int], None] | None = None,
                on_progress: Callable[[int], None] | None = None,
                skip_unreadable: bool = False, conflicts: str = "keep",
                review_branch: str | None = None) -> IngestReport:
    """Ingest a file or a folder (recursively: .md, .markdown, .txt, .rst, .text) into ``repo`` /
    ``workspace`` on ``branch`` in the format ``format_name``; the report. The CLI calls it as
    :data:`kg.context.OPERATOR`; ``on_files`` is told the number of files, ``on_progress`` the
    number done after each group.

    ``skip_unreadable`` skips (reports in ``unreadable``) a file that cannot be read, else the
    ingest is refused before any write. ``conflicts``: a property both a person and the file
    changed keeps the person's value (``keep``), and with ``review`` the file's version goes to a
    new branch (``review_branch``, default ``ingest/<UTC time>``, made if needed); ``kept_edits``
    lists them either way.

    Raises
    ------
    kg.errors.InvalidInput
        An unknown format or ``conflicts``, a missing path, an unreadable file (without
        ``skip_unreadable``), or two files that would be one node (``a.md``, ``a.txt``): nothing
        is written.
    kg.errors.NotFound
        Repository or workspace missing without ``create``.
    kg.errors.Conflict
        ``review_branch`` exists already (refused before anything is written).
    kg.errors.ProviderError
        The embedder failed (files already written stay written).
    """
    file_format = get_format(format_name)
    if conflicts not in CONFLICT_MODES:
        raise InvalidInput(f"conflicts must be one of {', '.join(CONFLICT_MODES)}, not {conflicts!r}",
                           details={"conflicts": conflicts})
    if review_branch is not None:
        validate_name("branch", review_branch)
    files = list(iter_files(root))  # a missing path is refused before anything is created
    base = root if root.is_dir() else root.parent
    parsed: list[FileNode] = []
    unreadable: list[UnreadableFile] = []
    for path in files:
        try:
            parsed.append(read_file_node(path, base, file_format))
        except InvalidInput as exc:
            if not skip_unreadable:
                raise
            unreadable.append(UnreadableFile(file=str(path), reason=exc.details.get("reason", exc.message)))
    _refuse_one_path_for_two_files(parsed)
    if review_branch is not None:
        _refuse_existing_branch(services, repo, review_branch)
    run(services, caller, ensure_repo_workspace, repo, workspace, create=create)
    if on_files is not None:
        on_files(len(parsed))
    report = IngestReport(files=len(files), unreadable=unreadable)
    relations: list[tuple[str, str, str]] = []
    dropped: list[tuple[str, str, str]] = []
    to_review: list[FilePlan] = []
    for start in range(0, len(parsed), GROUP_FILES):
        group = parsed[start:start + GROUP_FILES]
        with reading(services, caller, repo, branch) as (session, view):
            planned = [plan_file(session, view, workspace, n, conflicts=conflicts) for n in group]
        todo = [p for p in planned if p.action in ("insert", "write")]
        counted = [0]
        items = [(workspace, ingest_records.split_value(p.value)[1]) for p in todo if p.value is not None]
        try:
            embedded = prepare_chunks(services, repo, items, progress=functools.partial(_add, counted))
        except ProviderError:
            # One bad text must not stop the others: store the nodes and let the indexer
            # embed them one by one, recording the failing one with its reason.
            embedded = prepare_chunks(services, repo, items, embed=False)
        report.passages_embedded += counted[0]
        texts = {id(p.node): text for p, text in zip(todo, embedded, strict=True)}
        for planned_file in planned:
            node = planned_file.node
            if planned_file.action == "skip":  # re-planned under the write lock only when it writes
                report.skipped.append(node.path)
                continue
            done = run(services, caller, ingest_file, repo, branch, workspace, node, texts.get(id(node)),
                       conflicts=conflicts)
            _count(report, done)
            if done.action in ("insert", "write"):
                # The file's relation changes since its last ingest, as for its properties: a
                # relation it asserted before is not asserted again (a person may have removed it).
                added, removed = done.relation_changes()
                relations += [(node.path, rel, target) for rel, target in added]
                dropped += [(node.path, rel, target) for rel, target in removed]
            if done.action == "review":
                to_review.append(done)
        if on_progress is not None:
            on_progress(len(group))
    if relations:
        _write_relations(services, caller, repo, workspace, branch, relations, file_format, report)
    if dropped:
        report.relations_removed = run(services, caller, unrelate_files, repo, branch, workspace, dropped)
    if to_review:
        name = review_branch or _free_review_branch(services, repo)
        run(services, caller, write_review, repo, branch, workspace, name, to_review)
        report.review_branch = name
        # The files' relations are part of their version: asserted on the review branch (not
        # counted in the report, which counts the ingested branch's).
        proposed = [(p.node.path, rel, target) for p in to_review if p.review_value is not None
                    for rel, target in p.node.relations]
        if proposed:
            _write_relations(services, caller, repo, workspace, name, proposed, file_format, IngestReport())
        # ... and those the files dropped since their last ingest are removed there, so that
        # merging the review branch removes them as an ingest would have.
        gone = [(p.node.path, rel, target) for p in to_review for rel, target in p.relation_changes()[1]]
        if gone:
            run(services, caller, unrelate_files, repo, name, workspace, gone)
    if report.inserted or report.replaced or to_review:
        services.db.analyze()
    return report


def _branch_names(services: Resources, repo: str) -> set[str]:
    """The names of ``repo``'s branches (none when it does not exist yet)."""
    with services.db.read() as session:
        try:
            return {b.name for b in list_branches(session, get_repository(session, repo))}
        except NotFound:
            return set()


def _refuse_existing_branch(services: Resources, repo: str, name: str) -> None:
    """Refuse a review branch name that is taken, before the ingest writes anything."""
    if name in _branch_names(services, repo):
        raise Conflict(f"branch {name!r} exists already: name another review branch", details={"branch": name})


def _free_review_branch(services: Resources, repo: str) -> str:
    """``ingest/<UTC time>``, with ``-2``, ``-3``... if taken."""
    stem = utcnow().strftime(REVIEW_BRANCH_FORMAT)
    taken = _branch_names(services, repo)
    name, n = stem, 1
    while name in taken:
        n += 1
        name = f"{stem}-{n}"
    return name


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
