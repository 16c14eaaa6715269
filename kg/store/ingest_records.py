"""Ingest records: the file hash and merge base of a node's last ingest, per branch.

An ingest (:mod:`kg.ops.ingest`) writes one :class:`~kg.store.models.IngestRecord` per file at
its revision; a branch sees its chain's records as it sees node versions, and an edit or a
delete of the node leaves them. A record's *base* (of the next three-way merge: ``ours`` the
node now, ``theirs`` the new parse) is the file's parse then: the node as the ingest wrote it
(read at the record's revision) with the record's ``base_patch`` (null when the ingest wrote
the parse exactly). Values are *flat*: the type under ``kg:node_type``, merging as a property.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.orm import Session

from kg.store.models import IngestRecord, NodeVersion, Revision, utcnow
from kg.store.repos import BranchView, WriteContext, workspace_id
from kg.store.visibility import Chain, visible_select

#: The key of a node's type in a flat value.
NODE_TYPE_KEY = "kg:node_type"


def flat_value(node_type: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A node's type and properties as one new flat dict.

    >>> flat_value("pep:PEP", {"status": "Final"})
    {'status': 'Final', 'kg:node_type': 'pep:PEP'}
    """
    return {**properties, NODE_TYPE_KEY: node_type}


def version_value(version: NodeVersion | None) -> dict[str, Any] | None:
    """The flat value of a node version; None for no version or a tombstone."""
    if version is None or version.deleted:
        return None
    return flat_value(version.node_type, version.properties)


def split_value(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """:func:`flat_value` inverted (a new properties dict)."""
    props = {k: v for k, v in value.items() if k != NODE_TYPE_KEY}
    return value[NODE_TYPE_KEY], props


def base_patch(written: dict[str, Any] | None, parse: dict[str, Any]) -> dict[str, Any] | None:
    """The patch turning ``written`` (the value after the ingest; None: no node, e.g. one people
    deleted) into the file's ``parse``: None when equal, else ``{"set": {...}, "unset": [...]}``.

    >>> base_patch({"a": 1, "b": 2}, {"a": 1, "c": 3})
    {'set': {'c': 3}, 'unset': ['b']}
    >>> base_patch({"a": 1}, {"a": 1}) is None
    True
    """
    written = written or {}
    changed = {k: v for k, v in parse.items() if k not in written or written[k] != v}
    removed = sorted(k for k in written if k not in parse)
    if not changed and not removed:
        return None
    return {"set": changed, "unset": removed}


def apply_patch(written: dict[str, Any] | None, patch: dict[str, Any] | None) -> dict[str, Any] | None:
    """The value ``patch`` (:func:`base_patch`; None: no change) makes of ``written``.

    >>> apply_patch({"a": 1, "b": 2}, {"set": {"c": 3}, "unset": ["b"]})
    {'a': 1, 'c': 3}
    """
    if patch is None:
        return None if written is None else dict(written)
    value = {k: v for k, v in (written or {}).items() if k not in set(patch.get("unset", []))}
    value.update(patch.get("set", {}))
    return value


def _record_select(chain: tuple[tuple[int, int], ...]) -> Any:
    stmt, _ = visible_select(
        IngestRecord, Chain(chain), (IngestRecord.workspace_id, IngestRecord.path),
        IngestRecord.workspace_id == bindparam("rec_wid"), IngestRecord.path == bindparam("rec_path"),
        include_deleted=True,
    )
    return stmt


def find_record(session: Session, view: BranchView, workspace: str, path: str) -> IngestRecord | None:
    """The last ingest record the view's chain holds at ``workspace:path``, or None."""
    wid = workspace_id(view, workspace)
    found: IngestRecord | None = session.scalar(_record_select(view.chain), {"rec_wid": wid, "rec_path": path})
    return found


def record_base(session: Session, view: BranchView, record: IngestRecord) -> dict[str, Any] | None:
    """The base of the next merge as of ``record``: the node at the record's revision (the view's
    chain capped there, so an inherited record reads the parent's history) with ``base_patch``.
    """
    capped = tuple((b, min(r, record.revision)) for b, r in view.chain)
    stmt, _ = visible_select(NodeVersion, Chain(capped), (NodeVersion.workspace_id, NodeVersion.path),
                             NodeVersion.workspace_id == record.workspace_id, NodeVersion.path == record.path,
                             include_deleted=True)
    written = version_value(session.scalar(stmt))
    return apply_patch(written, record.base_patch)


def last_written_by(session: Session, view: BranchView, workspace: str, path: str,
                    message: str, *, prefix: str | None = None) -> NodeVersion | None:
    """The newest live version at ``workspace:path`` written by a revision logged ``message``
    (``ingest <file>``) or starting with ``prefix`` (the ingest's relations, writing stubs): the
    base of a node ingested before records were kept. A query per chain entry.
    """
    wid = workspace_id(view, workspace)
    by_message = Revision.message == message
    if prefix is not None:
        by_message = or_(by_message, Revision.message.startswith(prefix, autoescape=True))
    on_chain = or_(*(and_(NodeVersion.branch_id == b, NodeVersion.revision <= r) for b, r in view.chain))
    found: NodeVersion | None = session.scalar(
        select(NodeVersion)
        .join(Revision, (Revision.repo_id == NodeVersion.repo_id) & (Revision.number == NodeVersion.revision))
        .where(on_chain, NodeVersion.workspace_id == wid, NodeVersion.path == path,
               NodeVersion.deleted.is_(False), by_message)
        .order_by(NodeVersion.revision.desc(), NodeVersion.id.desc())
        .limit(1))
    return found


def put_record(session: Session, ctx: WriteContext, workspace: str, path: str, *, sha256: str, source: str,
               patch: dict[str, Any] | None,
               relations: Sequence[tuple[str, str]] | None = None) -> IngestRecord:
    """Record an ingest of a file at ``workspace:path`` in the write's revision (a record alone is a
    revision: a changed file whose node people deleted); returns the row, flushed.

    ``patch`` is :func:`base_patch` of the value after this write and the file's parse;
    ``relations`` the ``(type, target path)`` the file asserts (None: a stub, not recorded).
    """
    wid = workspace_id(ctx.view, workspace)
    record = IngestRecord(repo_id=ctx.repo.id, branch_id=ctx.branch.id, workspace_id=wid, revision=ctx.revision,
                          path=path, sha256=sha256, source=source, base_patch=patch,
                          relations=None if relations is None else [[rel, target] for rel, target in relations],
                          created_at=utcnow())
    session.add(record)
    session.flush()
    return record


def _visible_record(session: Session, chain: tuple[tuple[int, int], ...], wid: int, path: str) -> IngestRecord | None:
    found: IngestRecord | None = session.scalar(_record_select(chain), {"rec_wid": wid, "rec_path": path})
    return found


def _visible_value(session: Session, chain: tuple[tuple[int, int], ...], wid: int, path: str) -> dict[str, Any] | None:
    stmt, _ = visible_select(NodeVersion, Chain(chain), (NodeVersion.workspace_id, NodeVersion.path),
                             NodeVersion.workspace_id == wid, NodeVersion.path == path, include_deleted=True)
    return version_value(session.scalar(stmt))


def _same_file(a: IngestRecord | None, b: IngestRecord | None) -> bool:
    """Both records are of the same bytes: a record re-written with an older hash is unchanged."""
    return a is not None and b is not None and a.sha256 == b.sha256


def carry_records(session: Session, ctx: WriteContext, source: BranchView, base: BranchView, since: int,
                  taken: Mapping[tuple[int, str], tuple[str, dict[str, Any] | None]]) -> int:
    """Carry the source's ingest records into a merge's revision on the target; how many.

    Per address, three-way like nodes, records being equal when of the same file hash: the
    source's (*theirs*) against the base's and the target's (*ours*).

    - theirs is base's or ours: nothing to carry;
    - the merge writes the node from the source (its version, a property merge, or a value a
      person chose): theirs is carried, its base being the parse the written node derives from;
    - the merge re-asserts the target's node (resolved ``ours``): the target keeps its own;
    - the merge leaves the node alone: theirs is carried unless the target ingested another
      version since the base, whose record stays.

    When both ingested the file differently and the node merged by property, the source's record
    is carried: the target's ingested values count, at its next ingest, as edits over the source's
    parse. A carried record keeps the source's hash, file, relations and parse; its patch is taken
    against the node the target holds after the merge, so :func:`record_base` gives the same parse
    on both. One query for the source's records since ``since``, a few lookups per address.

    ``taken`` maps the ``(workspace id, path)`` of each node the merge writes to ``(how, flat
    value after the merge)``, ``how`` the plan's change source (``theirs``, ``merged``, ``value``,
    ``ours``); ``ctx``'s node versions are flushed.
    """
    rows = session.execute(
        select(IngestRecord.workspace_id, IngestRecord.path)
        .where(IngestRecord.branch_id == source.branch.id, IngestRecord.revision > since,
               IngestRecord.revision <= source.revision)
        .distinct()).all()
    written = 0
    for wid, path in sorted((r[0], r[1]) for r in rows):
        theirs = _visible_record(session, source.chain, wid, path)
        was = _visible_record(session, base.chain, wid, path)
        if theirs is None or _same_file(was, theirs):
            continue
        ours = _visible_record(session, ctx.view.chain, wid, path)
        if _same_file(ours, theirs):
            continue
        how, after = taken.get((wid, path), (None, None))
        if how == "ours":
            continue
        if how is None:
            if ours is not None and not _same_file(ours, was):
                continue  # the target ingested another version of the file since the base
            after = _visible_value(session, ctx.view.chain, wid, path)
        parse = record_base(session, source, theirs)
        record = IngestRecord(repo_id=ctx.repo.id, branch_id=ctx.branch.id, workspace_id=wid,
                              revision=ctx.revision, path=path, sha256=theirs.sha256, source=theirs.source,
                              base_patch=None if parse is None else base_patch(after, parse),
                              relations=theirs.relations, created_at=utcnow())
        session.add(record)
        written += 1
    if written:
        session.flush()
    return written
