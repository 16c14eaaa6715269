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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from sqlalchemy import and_, bindparam, false, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from kg.errors import KGError, ProviderError
from kg.index.base import IndexedChunk, Placement, SearchIndex
from kg.indexing.config import EmbeddingConfig, IndexedProperties
from kg.metrics import EMBEDDED_PASSAGES
from kg.providers.base import Embedder
from kg.store.models import Branch, Chunk, NodeVersion, Repository
from kg.store.repos import TOP_CHUNK_SEQ
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
    return TextPlan(fields, content_key(fields, chunking=_fingerprint(config, embedder), model=embedder.name), config)


def _fingerprint(config: EmbeddingConfig, embedder: Embedder) -> str:
    """The settings' part of a content key: the chunking applied and, when not kg's, the fields."""
    fingerprint = effective_chunking(config.chunking, embedder).fingerprint()
    indexed = config.indexed_properties
    if not indexed.is_default():
        # Which fields are chunked changes the chunks: it is part of the key (the defaults are
        # left out, so the keys of texts written before the setting existed stay valid).
        fingerprint += f"|short={','.join(indexed.short)}|body={','.join(indexed.body)}"
    return fingerprint


def content_keyer(config: EmbeddingConfig, embedder: Embedder) -> Callable[[Mapping[str, object]], str | None]:
    """The content key of :func:`plan_text` (None: no text) as a function of properties, the
    settings' part computed once: what a bulk import computes for each of its nodes.
    """
    fingerprint, model, indexed = _fingerprint(config, embedder), embedder.name, config.indexed_properties

    def key(properties: Mapping[str, object]) -> str | None:
        fields = text_fields(properties, indexed)
        return content_key(fields, chunking=fingerprint, model=model) if fields else None

    return key


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


_STORED_KEYS = select(Chunk.content_key).where(
    Chunk.repo_id == bindparam("c_repo_id"), Chunk.content_key.in_(bindparam("c_keys", expanding=True)),
    Chunk.chunk_index == 0)


def existing_content_keys(session: Session, repo_id: int, keys: Iterable[str]) -> set[str]:
    """Which content keys already have their chunks stored: a statement (built once) per 500 keys."""
    wanted = list(set(keys))
    found: set[str] = set()
    connection = session.connection()
    for start in range(0, len(wanted), 500):
        found.update(connection.scalars(_STORED_KEYS, {"c_repo_id": repo_id, "c_keys": wanted[start:start + 500]}))
    return found


def embed_plans(plans: Sequence[TextPlan], embedder: Embedder, *, batch_size: int = 32,
                progress: Callable[[int], None] | None = None) -> dict[str, list[ChunkRow]]:
    """Chunk and embed the texts of ``plans`` (distinct content keys, chunks not stored yet),
    ``batch_size`` passages a model call across nodes; ``progress`` gets the passages embedded
    after each batch. ``ProviderError`` when the embedder failed or answered something unusable.
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
    """The chunks of a plan's text, in order, not embedded (no model call); empty for a plan
    without text. The embedder's context caps a token chunk size (:func:`effective_chunking`).
    """
    if plan.content_key is None:
        return []
    chunking = effective_chunking(plan.config.chunking, embedder)
    return [Piece(plan.content_key, i, field, text, start, end)
            for i, (field, text, start, end) in enumerate(split_fields(plan.fields, chunking, embedder,
                                                                       plan.config.indexed_properties))]


def embed_pieces(pieces: Sequence[Piece], embedder: Embedder, *, batch_size: int = 32,
                 progress: Callable[[int], None] | None = None) -> list[ChunkRow]:
    """Embed chunks, ``batch_size`` a model call: one row per piece, in order; ``progress`` gets
    the passages embedded after each batch. ``ProviderError`` when the embedder failed or
    answered something unusable.
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
    """Insert chunk rows, skipping any (content key, index) a concurrent writer stored: the rows offered."""
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
"""Chunks read at a time by :meth:`SqlChunkFeed.chunk_pages` (about 40 MB of 384-d rows with
their texts): the embedded index groups a page's BM25 postings in one pass, so fewer, larger
pages cost less (a 10,000-node import's 20,000 chunks: 0.85 s of postings in pages of 5,000,
0.48 s in one)."""

_PLACE_BATCH = 500

_CHUNK_COLUMNS = (Chunk.seq, Chunk.content_key, Chunk.chunk_index, Chunk.text, Chunk.model, Chunk.embedding,
                  Chunk.field)
#: A page of the feed, built once: every search's catch-up runs it (and mostly reads no row), so
#: its compiled form and result columns are reused as they are.
_CHUNK_PAGE = (select(*_CHUNK_COLUMNS).where(Chunk.repo_id == bindparam("repo_id"), Chunk.seq > bindparam("mark"))
               .order_by(Chunk.seq).limit(_SYNC_PAGE))


_VERSION_COLUMNS = (NodeVersion.id, NodeVersion.revision, NodeVersion.workspace_id, NodeVersion.branch_id,
                    NodeVersion.node_id, NodeVersion.path, NodeVersion.node_type, NodeVersion.properties,
                    NodeVersion.content_key)


def _indexed(r: Any) -> IndexedChunk:
    return IndexedChunk(seq=r.seq, content_key=r.content_key, chunk_index=r.chunk_index, text=r.text,
                        model=r.model, vector=np.frombuffer(r.embedding, dtype=np.float32), field=r.field)


class SqlChunkFeed:
    """What SQL holds for one repository, read through ``session``: the
    :class:`~kg.index.base.ChunkFeed` an index catches up from."""

    def __init__(self, session: Session, repo_id: int, *, top_seq: int | None = None) -> None:
        #: The highest chunk ``seq`` the session's snapshot holds, when known (None: ask).
        self.session, self.repo_id, self.top_seq = session, repo_id, top_seq

    def heads(self) -> tuple[int, int]:
        session, repo_id = self.session, self.repo_id
        top_seq = session.scalar(select(func.max(Chunk.seq)).where(Chunk.repo_id == repo_id)) or 0
        top_revision = session.scalar(select(Repository.head_revision).where(Repository.id == repo_id)) or 0
        return top_seq, top_revision

    def chunk_pages(self, after_seq: int) -> Iterator[list[IndexedChunk]]:
        mark = after_seq
        if self.top_seq is not None and mark >= self.top_seq:
            return
        while True:
            rows = self.session.connection().execute(_CHUNK_PAGE, {"repo_id": self.repo_id, "mark": mark}).all()
            if not rows:
                return
            yield [_indexed(r) for r in rows]
            mark = rows[-1].seq

    def versions(self, after_revision: int, upto_revision: int) -> Iterator[list[Placement]]:
        after = (after_revision, 0)
        while True:
            versions = self.session.execute(
                select(*_VERSION_COLUMNS).where(
                    *self._live(), NodeVersion.revision <= upto_revision,
                    or_(NodeVersion.revision > after[0],
                        and_(NodeVersion.revision == after[0], NodeVersion.id > after[1])))
                .order_by(NodeVersion.revision, NodeVersion.id).limit(_PLACE_BATCH)
            ).all()
            if not versions:
                return
            yield self._placements(versions)
            after = (versions[-1].revision, versions[-1].id)

    def versions_of_chunks(self, after_seq: int, upto_seq: int, upto_revision: int) -> Iterator[list[Placement]]:
        keys = self.session.scalars(
            select(Chunk.content_key).where(Chunk.repo_id == self.repo_id, Chunk.seq > after_seq,
                                            Chunk.seq <= upto_seq).distinct()
        ).all()
        for start in range(0, len(keys), _PLACE_BATCH):
            versions = self.session.execute(
                select(*_VERSION_COLUMNS).where(*self._live(), NodeVersion.revision <= upto_revision,
                                                NodeVersion.content_key.in_(keys[start:start + _PLACE_BATCH]))
                .order_by(NodeVersion.revision, NodeVersion.id)
            ).all()
            yield self._placements(versions)

    def deleted_branches(self, branch_ids: set[int]) -> set[int] | None:
        """Read in a session of its own: the feed's may be a snapshot from before the delete."""
        with Session(self.session.get_bind()) as fresh:
            if fresh.get(Repository, self.repo_id) is None:
                return None
            return branch_ids - set(fresh.scalars(select(Branch.id).where(Branch.id.in_(sorted(branch_ids)))))

    def _live(self) -> tuple[Any, ...]:
        return (NodeVersion.repo_id == self.repo_id, NodeVersion.deleted == false(),
                NodeVersion.content_key.is_not(None))

    def _placements(self, versions: Sequence[Any]) -> list[Placement]:
        """These node versions (rows of ``_VERSION_COLUMNS``) whose chunks exist, with them."""
        keys = sorted({v.content_key for v in versions})
        chunks: dict[str, list[IndexedChunk]] = {}
        for start in range(0, len(keys), _PLACE_BATCH):
            for r in self.session.execute(
                select(*_CHUNK_COLUMNS)
                .where(Chunk.repo_id == self.repo_id, Chunk.content_key.in_(keys[start:start + _PLACE_BATCH]))
                .order_by(Chunk.content_key, Chunk.chunk_index)
            ):
                chunks.setdefault(r.content_key, []).append(_indexed(r))
        return [
            Placement(v.workspace_id, v.branch_id, v.node_id, v.path, v.node_type, dict(v.properties or {}),
                      tuple(chunks[v.content_key]))
            for v in versions if v.content_key in chunks
        ]


def sync_index(session: Session, index: SearchIndex, repo_id: int, repo_key: str) -> int:
    """Bring the index up to date with what SQL holds for one repository
    (:meth:`~kg.index.base.SearchIndex.catch_up`): the chunks added or objects placed.

    In a read whose branch view came from :class:`~kg.store.repos.ViewCache`, the session
    already knows the repository's highest chunk ``seq`` (:data:`~kg.store.repos.TOP_CHUNK_SEQ`,
    read with the view's check in the same snapshot): an index at or above it reads nothing.
    """
    top_seq = session.info.get(TOP_CHUNK_SEQ, {}).get(repo_id)
    return index.catch_up(repo_key, SqlChunkFeed(session, repo_id, top_seq=top_seq))


def forget_branch(index: SearchIndex, repo_key: str, branch_id: int) -> None:
    """After SQL deleted or reset a branch: tell the index (:meth:`~kg.index.base.SearchIndex.drop_branch`).

    A failure only logs: SQL is the truth, and a deleted branch's id is never reused, so what
    is left behind is never read (a reset branch's stale objects are never in the version keys
    it sees, and its next writes overwrite or add objects).
    """
    try:
        index.drop_branch(repo_key, branch_id)
    except KGError as exc:
        log.warning("branch %s: its index collections were not deleted: %s", branch_id, exc.message)
