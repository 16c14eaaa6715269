"""The ingestion lifecycle of node text: chunk, embed, store, index.

A node version's indexed text is keyed by a *content key*: sha256 over its text fields, the
chunking settings and the embedding model (``kg.text.hashing.content_key``). Chunks are stored
once per key, so an unchanged text is never embedded again (by any branch), a changed text gets
a new key and new chunks, and a branch sees exactly the chunks of the node versions it sees.

Embedding happens before the write transaction (it is the slow part); the transaction then
inserts the chunks if no concurrent writer did, and the node version pointing at them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import and_, bindparam, false, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from kg.errors import KGError, ProviderError
from kg.index.base import IndexedChunk, Placement, ScopedIndex, VectorIndex
from kg.indexing.config import EmbeddingConfig, IndexedProperties
from kg.metrics import EMBEDDED_PASSAGES
from kg.providers.base import Embedder
from kg.store.models import Branch, Chunk, NodeVersion, Repository
from kg.text.chunking import ChunkingConfig, recursive_split
from kg.text.hashing import content_key
from kg.tracing import span

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A chunk ready to store: its place in the source field and its vector."""

    content_key: str
    chunk_index: int
    field: str
    text: str
    start: int
    end: int
    model: str
    vector: np.ndarray


@dataclass(frozen=True, slots=True)
class TextPlan:
    """The indexed text of one node version: its fields and content key (None: no text)."""

    fields: dict[str, str]
    content_key: str | None
    config: EmbeddingConfig


def text_fields(properties: Mapping[str, object], indexed: IndexedProperties | None = None) -> dict[str, str]:
    """The indexed text properties of a node (strings with a non-space character), of the
    workspace's ``indexed`` properties (default: kg's)."""
    names = (indexed or IndexedProperties()).fields
    return {
        name: value
        for name in names
        if isinstance(value := properties.get(name), str) and value.strip()
    }


def effective_chunking(config: ChunkingConfig, embedder: Embedder) -> ChunkingConfig:
    """The chunking actually applied: a token size never exceeds the model's context.

    A chunk longer than the model's context would be silently truncated by the model, so in
    token units the size is capped at ``max_tokens - 2`` (the model's [CLS] and [SEP]), and the
    overlap at half of that.
    """
    if config.unit != "tokens":
        return config
    return config.capped(max(1, embedder.max_tokens - 2))


def plan_text(properties: Mapping[str, object], config: EmbeddingConfig, embedder: Embedder) -> TextPlan:
    """Compute the fields and content key of a node's text (no model call)."""
    fields = text_fields(properties, config.indexed_properties)
    if not fields:
        return TextPlan({}, None, config)
    chunking = effective_chunking(config.chunking, embedder)
    fingerprint = chunking.fingerprint()
    indexed = config.indexed_properties
    if not indexed.is_default():
        # Which fields are chunked changes the chunks: it is part of the key (the defaults are
        # left out, so the keys of texts written before the setting existed stay valid).
        fingerprint += f"|short={','.join(indexed.short)}|body={','.join(indexed.body)}"
    key = content_key(fields, chunking=fingerprint, model=embedder.name)
    return TextPlan(fields, key, config)


def split_fields(fields: Mapping[str, str], chunking: ChunkingConfig,
                 embedder: Embedder, indexed: IndexedProperties | None = None) -> list[tuple[str, str, int, int]]:
    """Split text fields into passages ``(field, text, start, end)`` in chunk-index order.

    Short fields are one passage; body fields go through the configured splitter. Any passage
    still longer than the model's context is split again in model tokens (never truncated).
    """
    counter = embedder.count_tokens
    limit = max(1, embedder.max_tokens - 2)
    passages: list[tuple[str, str, int, int]] = []
    indexed = indexed or IndexedProperties()
    for name in indexed.fields:
        text = fields.get(name)
        if not text:
            continue
        if name in indexed.short:
            lead = len(text) - len(text.lstrip())
            pieces = [(text.strip(), lead, lead + len(text.strip()))]
        else:
            pieces = [(c.text, c.start, c.end) for c in chunking.chunk(text, counter)]
        for piece, start, end in pieces:
            if counter(piece) <= limit:
                passages.append((name, piece, start, end))
                continue
            for sub in recursive_split(piece, chunk_size=limit, overlap=0, length=counter):
                passages.append((name, sub.text, start + sub.start, start + sub.end))
    return passages


def check_vectors(vectors: object, n: int, dim: int, texts: Sequence[str]) -> np.ndarray:
    """Refuse an embedder answer that is not ``n`` finite, non-zero vectors of length ``dim``.

    Raises
    ------
    kg.errors.ProviderError
        Naming the first bad chunk.
    """
    if vectors is None:
        raise ProviderError("the embedder returned nothing")
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ProviderError(
            f"the embedder returned {arr.shape[0] if arr.ndim else 0} vectors for {n} texts",
            details={"expected": n},
        )
    if arr.shape[1] != dim:
        raise ProviderError(f"the embedder returned vectors of length {arr.shape[1]}, expected {dim}")
    finite = np.asarray(np.isfinite(arr).all(axis=1))
    norms = np.linalg.norm(np.where(np.isfinite(arr), arr, 0.0), axis=1)
    bad = np.flatnonzero(~finite | (norms == 0))
    if bad.size:
        i = int(bad[0])
        reason = "non-finite values (NaN or inf)" if not finite[i] else "an all-zero vector"
        raise ProviderError(
            f"the embedder returned {reason} for chunk {i}: {texts[i][:60]!r}",
            details={"chunk": i},
        )
    normalised: np.ndarray = arr / norms[:, None]
    return normalised


_HAS_CHUNKS = (select(Chunk.seq).where(Chunk.repo_id == bindparam("c_repo_id"),
                                      Chunk.content_key == bindparam("c_key"), Chunk.chunk_index == 0)
               .limit(1))


def has_chunks(session: Session, repo_id: int, key: str) -> bool:
    """Whether one content key has its chunks stored (a statement built once: writes ask this
    for every node they write)."""
    return session.scalar(_HAS_CHUNKS, {"c_repo_id": repo_id, "c_key": key}) is not None


def existing_content_keys(session: Session, repo_id: int, keys: Iterable[str]) -> set[str]:
    """Which content keys already have their chunks stored."""
    wanted = list(set(keys))
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        part = wanted[start:start + 500]
        found.update(session.scalars(
            select(Chunk.content_key).where(Chunk.repo_id == repo_id, Chunk.content_key.in_(part),
                                            Chunk.chunk_index == 0)
        ))
    return found


def embed_plans(plans: Sequence[TextPlan], embedder: Embedder, *, batch_size: int = 32,
                progress: Callable[[int], None] | None = None) -> dict[str, list[ChunkRow]]:
    """Chunk and embed the texts of ``plans`` (distinct content keys), batched across nodes.

    Parameters
    ----------
    plans : sequence of TextPlan
        Plans whose chunks are not stored yet.
    embedder : Embedder
    batch_size : int
        Passages per embedder call.
    progress : callable(int), optional
        Called with the number of passages embedded after each batch.

    Returns
    -------
    dict of content key -> list of ChunkRow

    Raises
    ------
    kg.errors.ProviderError
        The embedder failed or answered something unusable.
    """
    todo: list[Piece] = []
    seen: set[str] = set()
    for plan in plans:
        if plan.content_key is None or plan.content_key in seen:
            continue
        seen.add(plan.content_key)
        todo += plan_pieces(plan, embedder)
    rows: dict[str, list[ChunkRow]] = {key: [] for key in seen}
    for row in embed_pieces(todo, embedder, batch_size=batch_size, progress=progress):
        rows[row.content_key].append(row)
    return rows


class Piece(NamedTuple):
    """One chunk of a text to embed: its content key, index and place in its field."""

    content_key: str
    chunk_index: int
    field: str
    text: str
    start: int
    end: int


def plan_pieces(plan: TextPlan, embedder: Embedder) -> list[Piece]:
    """The chunks of a plan's text, in order, not embedded (no model call).

    Parameters
    ----------
    plan : TextPlan
        A plan with a content key.
    embedder : Embedder
        The model: its context caps a token chunk size (:func:`effective_chunking`).

    Returns
    -------
    list of Piece
        Empty for a plan without text.
    """
    if plan.content_key is None:
        return []
    chunking = effective_chunking(plan.config.chunking, embedder)
    return [Piece(plan.content_key, i, field, text, start, end)
            for i, (field, text, start, end) in enumerate(split_fields(plan.fields, chunking, embedder,
                                                                       plan.config.indexed_properties))]


def embed_pieces(pieces: Sequence[Piece], embedder: Embedder, *, batch_size: int = 32,
                 progress: Callable[[int], None] | None = None) -> list[ChunkRow]:
    """Embed chunks, ``batch_size`` a model call.

    Parameters
    ----------
    pieces : sequence of Piece
    embedder : Embedder
    batch_size : int
        Passages per embedder call.
    progress : callable(int), optional
        Called with the number of passages embedded after each batch.

    Returns
    -------
    list of ChunkRow
        One per piece, in order.

    Raises
    ------
    kg.errors.ProviderError
        The embedder failed or answered something unusable.
    """
    rows: list[ChunkRow] = []
    for offset in range(0, len(pieces), batch_size):
        batch = pieces[offset:offset + batch_size]
        texts = [item.text for item in batch]
        with span("kg.embed.batch", model=embedder.name, count=len(texts)):
            vectors = check_vectors(embedder.embed(texts), len(texts), embedder.dim, texts)
        EMBEDDED_PASSAGES.inc(len(texts))
        for item, vector in zip(batch, vectors, strict=True):
            rows.append(ChunkRow(item.content_key, item.chunk_index, item.field, item.text, item.start, item.end,
                                 embedder.name, vector))
        if progress is not None:
            progress(len(batch))
    return rows


def store_chunks(session: Session, repo_id: int, rows: Iterable[ChunkRow]) -> int:
    """Insert chunk rows, skipping any (content key, index) a concurrent writer stored.

    Returns
    -------
    int
        Rows offered.
    """
    values = [
        {
            "repo_id": repo_id, "content_key": r.content_key, "chunk_index": r.chunk_index,
            "field": r.field, "text": r.text, "char_start": r.start, "char_end": r.end,
            "model": r.model, "dim": int(r.vector.shape[0]),
            "embedding": np.ascontiguousarray(r.vector, dtype=np.float32).tobytes(),
        }
        for r in rows
    ]
    if not values:
        return 0
    # One compiled statement, executed for many rows (the driver batches them): rows keep
    # their order, so seqs follow it.
    session.execute(_store_stmt(session.get_bind().dialect.name), values)
    return len(values)


@functools.lru_cache(maxsize=4)
def _store_stmt(dialect: str) -> Any:
    """The chunk insert of one dialect, built once: Core table, conflicts skipped."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    return insert(Chunk.__table__).on_conflict_do_nothing(  # type: ignore[arg-type]
        index_elements=["repo_id", "content_key", "chunk_index"])


_SYNC_PAGE = 20_000
"""Chunks read and placed at a time by :func:`sync_index` (about 40 MB of 384-d rows with their
texts): the BM25 postings of a page are grouped in one pass, so fewer, larger pages cost less
(a 10,000-node import's 20,000 chunks: 0.85 s of postings in pages of 5,000, 0.48 s in one)."""


def sync_index(session: Session, index: VectorIndex, repo_id: int, repo_key: str) -> int:
    """Bring the index up to date with the chunks stored in SQL for one repository.

    A scoped index (``index.layout == "scoped"``: a collection per workspace and branch) is
    brought up to date by :func:`sync_placements` instead.

    Parameters
    ----------
    session : Session
    index : VectorIndex
        Either layout (:mod:`kg.index.base`).
    repo_id : int
    repo_key : str

    Returns
    -------
    int
        Chunks added to the index (objects placed, for a scoped index).

    Notes
    -----
    Chunks are append-only and their ``seq`` grows in commit order per repository (writers
    hold the repository's revision lock), so reading ``seq > watermark`` is complete.
    """
    if index.layout == "scoped":
        return sync_placements(session, index, repo_id, repo_key)
    mark = index.watermark(repo_key)
    added = 0
    while True:
        rows = session.execute(
            select(Chunk.seq, Chunk.content_key, Chunk.chunk_index, Chunk.text, Chunk.model,
                   Chunk.embedding, Chunk.field)
            .where(Chunk.repo_id == repo_id, Chunk.seq > mark)
            .order_by(Chunk.seq)
            .limit(_SYNC_PAGE)
        ).all()
        if not rows:
            return added
        index.sync(repo_key, [
            IndexedChunk(seq=r.seq, content_key=r.content_key, chunk_index=r.chunk_index,
                         text=r.text, model=r.model,
                         vector=np.frombuffer(r.embedding, dtype=np.float32), field=r.field)
            for r in rows
        ])
        added += len(rows)
        mark = rows[-1].seq


_PLACE_BATCH = 500


def sync_placements(session: Session, index: ScopedIndex, repo_id: int, repo_key: str) -> int:
    """Bring a scoped index up to date: every live node version's chunks in the collection of
    its (workspace, branch).

    Parameters
    ----------
    session : Session
    index : ScopedIndex
        The Weaviate index.
    repo_id : int
    repo_key : str

    Returns
    -------
    int
        Objects written.

    Raises
    ------
    kg.errors.BackendUnavailable
        The index failed; the marks stay where they were and the next pass redoes the work
        (placement is idempotent).

    Notes
    -----
    Two feeds, both complete because a repository's revisions and chunks are written under its
    revision lock, so revision numbers and chunk seqs grow in commit order:

    1. node versions of revisions above the revision mark (writes, merges) whose chunks exist;
    2. chunks with ``seq`` above the seq mark (embedded by the queue after their version was
       written, or by a re-embed that re-pointed versions in place): every version of a
       revision at or below the revision mark that points at their content keys.

    The marks advance to the repository's head revision and highest seq read at the start of
    the pass, once all of it is placed; a pass with nothing new reads two numbers. Tombstones
    and versions without text place nothing: the version keys of the searched branch state,
    decided in SQL, hide whatever they replaced.
    """
    placed_in: set[int] = set()
    seq_mark, revision_mark = index.placement_marks(repo_key)
    top_seq = session.scalar(select(func.max(Chunk.seq)).where(Chunk.repo_id == repo_id)) or 0
    top_revision = session.scalar(select(Repository.head_revision).where(Repository.id == repo_id)) or 0
    if (top_seq, top_revision) == (seq_mark, revision_mark):
        return 0
    live = (NodeVersion.repo_id == repo_id, NodeVersion.deleted == false(),
            NodeVersion.content_key.is_not(None))
    columns = (NodeVersion.id, NodeVersion.revision, NodeVersion.workspace_id, NodeVersion.branch_id,
               NodeVersion.node_id, NodeVersion.path, NodeVersion.node_type, NodeVersion.properties,
               NodeVersion.content_key)
    placed = 0
    after = (revision_mark, 0)
    while True:
        versions = session.execute(
            select(*columns).where(
                *live, NodeVersion.revision <= top_revision,
                or_(NodeVersion.revision > after[0],
                    and_(NodeVersion.revision == after[0], NodeVersion.id > after[1])))
            .order_by(NodeVersion.revision, NodeVersion.id).limit(_PLACE_BATCH)
        ).all()
        if not versions:
            break
        placed += _place(session, index, repo_id, repo_key, versions, placed_in)
        after = (versions[-1].revision, versions[-1].id)
    if top_seq > seq_mark and revision_mark > 0:
        keys = session.scalars(
            select(Chunk.content_key).where(Chunk.repo_id == repo_id, Chunk.seq > seq_mark,
                                            Chunk.seq <= top_seq).distinct()
        ).all()
        for start in range(0, len(keys), _PLACE_BATCH):
            versions = session.execute(
                select(*columns).where(*live, NodeVersion.revision <= revision_mark,
                                       NodeVersion.content_key.in_(keys[start:start + _PLACE_BATCH]))
                .order_by(NodeVersion.revision, NodeVersion.id)
            ).all()
            placed += _place(session, index, repo_id, repo_key, versions, placed_in)
    if placed_in and _forget_deleted(session, index, repo_id, repo_key, placed_in):
        return placed
    index.advance_placement_marks(repo_key, max(top_seq, seq_mark), max(top_revision, revision_mark))
    return placed


def _forget_deleted(session: Session, index: ScopedIndex, repo_id: int, repo_key: str, branch_ids: set[int]) -> bool:
    """After placing: drop the collections of branches (or the whole repository) deleted in SQL
    meanwhile, whose own drop may have run before this pass created them. Read in a session of
    its own (this pass's may be a snapshot from before the delete). True when the repository
    is gone."""
    with Session(session.get_bind()) as fresh:
        if fresh.get(Repository, repo_id) is None:
            gone, repo_gone = branch_ids, True
        else:
            gone = branch_ids - set(fresh.scalars(select(Branch.id).where(Branch.id.in_(sorted(branch_ids)))))
            repo_gone = False
    if repo_gone:
        index.drop(repo_key)
        return True
    for branch_id in sorted(gone):
        index.drop_branch(repo_key, branch_id)
    return False


def _place(session: Session, index: ScopedIndex, repo_id: int, repo_key: str, versions: Sequence[Any],
           placed_in: set[int]) -> int:
    """Place these node versions (rows of ``sync_placements``' columns) whose chunks exist;
    add the branches placed in to ``placed_in``."""
    keys = sorted({v.content_key for v in versions})
    chunks: dict[str, list[IndexedChunk]] = {}
    for start in range(0, len(keys), _PLACE_BATCH):
        for r in session.execute(
            select(Chunk.seq, Chunk.content_key, Chunk.chunk_index, Chunk.text, Chunk.model,
                   Chunk.embedding, Chunk.field)
            .where(Chunk.repo_id == repo_id, Chunk.content_key.in_(keys[start:start + _PLACE_BATCH]))
            .order_by(Chunk.content_key, Chunk.chunk_index)
        ):
            chunks.setdefault(r.content_key, []).append(IndexedChunk(
                seq=r.seq, content_key=r.content_key, chunk_index=r.chunk_index, text=r.text,
                model=r.model, vector=np.frombuffer(r.embedding, dtype=np.float32), field=r.field))
    placements = [
        Placement(v.workspace_id, v.branch_id, v.node_id, v.path, v.node_type, dict(v.properties or {}),
                  tuple(chunks[v.content_key]))
        for v in versions if v.content_key in chunks
    ]
    placed_in.update(p.branch_id for p in placements)
    return index.place(repo_key, placements) if placements else 0


def forget_branch(index: VectorIndex, repo_key: str, branch_id: int) -> None:
    """After SQL deleted or reset a branch: delete its collections in a scoped index.

    A failure only logs: SQL is the truth, and a deleted branch's id is never reused, so a
    collection left behind is never read (a reset branch's stale objects are never in the
    version keys it sees, and its next writes overwrite or add objects).

    Parameters
    ----------
    index : VectorIndex
        A content-addressed index (the embedded one) has no branch collections: left alone.
    repo_key : str
    branch_id : int
    """
    if index.layout != "scoped":
        return
    try:
        index.drop_branch(repo_key, branch_id)
    except KGError as exc:
        log.warning("branch %s: its index collections were not deleted: %s", branch_id, exc.message)
