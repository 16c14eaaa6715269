"""The RAG node over a Weaviate instance: ``weaviateUrl`` other than ``"embedded"``.

The collection lives in the Weaviate instance the request names, in exactly the schema of the
RAG node's specification, so a collection the original node wrote is queried without
re-ingestion and one kg wrote is usable by the node:

* chunks class ``{ClassName}`` (``rag_collection`` -> ``Ragcollection``): ``vectorizer:
  "none"``; ``content`` text, ``sourceFile`` text, ``chunkIndex`` int; each object carries
  its vector;
* meta class ``{ClassName}Meta``: one object with ``documentHash`` (a JSON map of file name to
  the sha256 hex of its UTF-8 content), ``embeddingModel`` (as the node's configuration names
  it) and ``originalName`` (the collection name).

The lifecycle of each file of the input:

========================  ======================================================================
file new                  chunked (words), embedded and inserted
file unchanged            skipped: no embedding call
file changed              its chunks deleted, the file re-embedded and inserted
file removed from input   kept
embedding model changed   the chunks class dropped, the current files re-ingested
query only                retrieval over what the collection holds, with the collection's
                          own model (the node locks the model of an existing collection)
========================  ======================================================================

Every embedding is computed before the first write, so a failing model changes nothing. Chunks
are written before the meta object: a crash in between leaves the meta object's hashes stale,
so the next run re-embeds those files, and their chunks are replaced (deterministic ids,
:func:`kg.index.weaviate.object_id`), never duplicated.

Branches (``?branch=`` on ``POST /api/rag``, a branch of the ``settings.rag_repo`` repository):
``main`` uses the spec's names; another branch gets its own pair of classes,
``{ClassName}_b<10 hex of sha256(branch)>`` and that name + ``Meta`` (:func:`rag_class_names`),
created on the branch's first write. Searching a branch reads its own classes and its
ancestors', nearest first; a file the branch wrote hides that file's chunks in every ancestor,
and an ancestor whose model differs from the branch's is not read (the branch dropped it when it
changed the model). So a new branch is searchable at once and nothing is copied. Ancestors are
read as they are now: Weaviate keeps no revisions, so there is no time travel here.

Only the instances the operator lists in ``Settings.rag_weaviate_urls``
(``KG_RAG_WEAVIATE_URLS``) may be named: any other URL is refused (422) before kg connects to it
or sends it the request's API key (:func:`check_weaviate_url_allowed`). An instance that cannot
be used, whatever the reason (refused, timed out, an answer that is not Weaviate's, a failed
write), is one :class:`~kg.errors.UpstreamUnavailable` (HTTP 502) with one message, so the
answer tells nothing about the port's state; the cause goes to the server log. Never a silent
fallback to the embedded index.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kg.errors import Conflict, InvalidInput, KGError, NotFound, UpstreamUnavailable
from kg.index.weaviate import (
    MAX_QUERY_RESULTS,
    check_vector_dimension,
    insert_objects,
    object_id,
    parse_weaviate_url,
    vendor_errors,
)
from kg.indexing.chunks import check_vectors
from kg.ragnode.spec import (
    RagConfig,
    check_chunk_budget,
    class_key,
    class_name,
    classes_collide,
    format_context,
    meta_class_name,
    no_rag_branch,
    normalise_model_name,
    parse_rag_input,
    relevant_results,
)
from kg.store.models import Branch
from kg.store.repos import get_branch, get_repository
from kg.text.chunking import word_split

__all__ = [
    "CHUNKS_PROPERTIES",
    "MAIN",
    "META_PROPERTIES",
    "check_weaviate_url_allowed",
    "chunks_class_schema",
    "meta_class_schema",
    "rag_class_names",
    "run_rag_node_weaviate",
]

log = logging.getLogger(__name__)

MAIN = "main"
MAX_CLASS_NAME = 255
"""Longest class name Weaviate accepts (``^[A-Z][_0-9A-Za-z]{0,254}$``)."""
BRANCH_HASH_DIGITS = 10

#: The chunks class's properties, verbatim from the specification.
CHUNKS_PROPERTIES: list[dict[str, Any]] = [
    {"name": "content", "dataType": ["text"]},
    {"name": "sourceFile", "dataType": ["text"]},
    {"name": "chunkIndex", "dataType": ["int"]},
]
#: The meta class's properties, verbatim from the specification.
META_PROPERTIES: list[dict[str, Any]] = [
    {"name": "documentHash", "dataType": ["text"]},
    {"name": "embeddingModel", "dataType": ["text"]},
    {"name": "originalName", "dataType": ["text"]},
]
_BATCH = 200


def rag_class_names(collection_name: str, branch: str = MAIN) -> tuple[str, str]:
    """The Weaviate chunks and meta classes of a RAG collection on a branch.

    Parameters
    ----------
    collection_name : str
        The node's ``collectionName`` (``rag_collection``).
    branch : str
        A kg branch name; ``"main"`` gives the specification's names.

    Returns
    -------
    (str, str)
        ``main``: ``(class_name(c), meta_class_name(c))``, e.g. ``("Ragcollection",
        "RagcollectionMeta")``. Any other branch: ``class_name(c) + "_b" + h`` and that +
        ``"Meta"``, with ``h`` the first 10 hex digits of sha256 of the branch name.

    Raises
    ------
    kg.errors.InvalidInput
        The collection name gives no valid class (empty, leading digit, non-ASCII letters:
        :func:`kg.ragnode.spec.class_name`), the branch name is empty or not a str, or the
        name would exceed Weaviate's 255 characters.

    Notes
    -----
    Collision-free: :func:`~kg.ragnode.spec.class_name` keeps only ASCII letters and digits, so
    a main class never holds ``_`` and a branch class always does; two branch classes are equal
    (without regard to case, as Weaviate compares them) only for one collection key and one
    branch hash; a chunks class never equals a meta class (the meta name is 4 characters longer
    after the same ``_b`` + 10 hex digits). Two collection names whose classes collide are
    refused by the callers (:func:`kg.ragnode.spec.classes_collide`).

    Examples
    --------
    >>> rag_class_names("rag_collection")
    ('Ragcollection', 'RagcollectionMeta')
    >>> rag_class_names("rag_collection", "agent/1")[0].startswith("Ragcollection_b")
    True
    """
    if not isinstance(branch, str) or not branch.strip():
        raise InvalidInput("a branch name must be a non-empty string", details={"branch": repr(branch)})
    base = class_name(collection_name)
    if branch == MAIN:
        chunks, meta = base, meta_class_name(collection_name)
    else:
        digest = hashlib.sha256(branch.encode("utf-8")).hexdigest()[:BRANCH_HASH_DIGITS]
        chunks = f"{base}_b{digest}"
        meta = chunks + "Meta"
    if len(meta) > MAX_CLASS_NAME:
        raise InvalidInput(
            f"collection name {collection_name!r} gives a Weaviate class of {len(meta)} "
            f"characters; at most {MAX_CLASS_NAME} are allowed",
            details={"collection": collection_name},
        )
    return chunks, meta


def chunks_class_schema(name: str) -> dict[str, Any]:
    """The chunks class definition of the specification, for ``name``.

    Parameters
    ----------
    name : str
        The class name (:func:`rag_class_names`).

    Returns
    -------
    dict
        ``{"class": name, "vectorizer": "none", "properties": CHUNKS_PROPERTIES}``, as
        ``client.collections.create_from_dict`` takes it (Weaviate's REST class JSON).
    """
    return {"class": name, "vectorizer": "none", "properties": [dict(p) for p in CHUNKS_PROPERTIES]}


def meta_class_schema(name: str) -> dict[str, Any]:
    """The meta class definition of the specification, for ``name``.

    Parameters
    ----------
    name : str
        The meta class name (:func:`rag_class_names`).

    Returns
    -------
    dict
        ``{"class": name, "vectorizer": "none", "properties": META_PROPERTIES}``.
    """
    return {"class": name, "vectorizer": "none", "properties": [dict(p) for p in META_PROPERTIES]}


@dataclass
class _Layer:
    """One branch's pair of classes as found in Weaviate."""

    branch: str
    chunks: str
    meta: str
    chunks_exists: bool = False
    meta_exists: bool = False
    meta_uuid: Any = None
    has_meta: bool = False
    hashes: dict[str, str] = field(default_factory=dict)
    model_raw: str | None = None
    original: str | None = None
    dim: int | None = None
    dim_known: bool = False

    @property
    def model(self) -> str | None:
        """The stored model in kg's ``<provider>:<model>`` form, None if absent or invalid."""
        if not self.model_raw:
            return None
        try:
            return normalise_model_name(self.model_raw)
        except InvalidInput:
            return None


def check_weaviate_url_allowed(url: str, allowed: Sequence[str]) -> None:
    """Refuse a ``weaviateUrl`` the operator did not list, before anything connects to it.

    Parameters
    ----------
    url : str
        The request's ``weaviateUrl``.
    allowed : sequence of str
        ``Settings.rag_weaviate_urls`` (``KG_RAG_WEAVIATE_URLS``). URLs are compared as
        endpoints (:func:`kg.index.weaviate.parse_weaviate_url`: scheme, host without regard to
        case, REST port with its default, gRPC host and port), so ``http://Weaviate:80/`` is
        ``http://weaviate``. A listed URL that does not parse matches nothing.

    Raises
    ------
    kg.errors.InvalidInput
        ``url`` is malformed, or is no endpoint of ``allowed`` (422, naming the setting).
    """
    wanted = parse_weaviate_url(url)
    for entry in allowed:
        try:
            if parse_weaviate_url(entry) == wanted:
                return
        except InvalidInput:
            log.warning("KG_RAG_WEAVIATE_URLS holds %r, which is not a Weaviate URL; ignored", entry)
    raise InvalidInput(
        f"weaviateUrl {url!r} is not one of the Weaviate instances this server may use: the "
        "operator lists them in KG_RAG_WEAVIATE_URLS (\"embedded\" is always allowed)",
        details={"weaviateUrl": url, "setting": "KG_RAG_WEAVIATE_URLS"},
    )


def _unusable(url: str) -> UpstreamUnavailable:
    """The one 502 of a Weaviate that cannot be used, whatever the cause (logged, not told)."""
    return UpstreamUnavailable(
        f"the Weaviate instance at {url} cannot be used (unreachable, or it answered something "
        "that is not Weaviate's); the server log has the cause",
        details={"weaviateUrl": url},
    )


def run_rag_node_weaviate(services: Any, config: RagConfig, text: Any, *, branch: str = MAIN) -> dict[str, Any]:
    """Ingest the input's files into a Weaviate collection, then retrieve for its query.

    Parameters
    ----------
    services : kg.services.Services
        Embedders, settings (``embed_batch_size``, ``weaviate_timeout_s``, ``rag_repo``) and,
        for a branch other than ``main``, the database that holds the branch's ancestry.
    config : RagConfig
        The validated node configuration; ``weaviate_url`` names the instance.
    text : str
        The node's markdown input.
    branch : str
        kg branch of ``settings.rag_repo``.

    Returns
    -------
    dict
        ``{"context": str | None, "results": [{"file", "chunk_index", "content", "distance",
        "branch", "class"}], "ingestion": {"inserted", "skipped", "replaced"},
        "collection": {"name", "class", "meta_class", "embedding_model", "model_changed",
        "weaviate_url"}}``; results best first (cosine distance ascending).

    Raises
    ------
    kg.errors.UpstreamUnavailable
        The instance cannot be reached, failed, answered what is not Weaviate's, or refused
        objects of a batch (502): one message for every cause, the cause in the server log.
    kg.errors.BackendUnavailable
        The ``weaviate`` extra is not installed.
    kg.errors.InvalidInput
        Bad input; a ``weaviate_url`` not listed in ``settings.rag_weaviate_urls``
        (:func:`check_weaviate_url_allowed`, never contacted); vectors whose dimension differs
        from the collection's (before any write).
    kg.errors.TooLarge
        The input's files make more chunks than ``settings.max_chunks_per_request`` (413),
        refused before Weaviate is contacted.
    kg.errors.Conflict
        The class belongs to another collection name (``rag-collection`` vs
        ``rag_collection``, compared without regard to case), or a class of that name exists
        with another schema.
    kg.errors.NotFound
        An unknown branch.
    kg.errors.ProviderError
        The embedding model failed; nothing was written.
    """
    if not isinstance(text, str):
        raise InvalidInput("input must be a string")
    settings = services.settings
    check_weaviate_url_allowed(config.weaviate_url, settings.rag_weaviate_urls)
    query, files = parse_rag_input(text)
    if config.top_k > 1000:
        raise InvalidInput("topK must be at most 1000", details={"topK": config.top_k})
    check_chunk_budget(files, config, settings.max_chunks_per_request)
    chain = _branch_chain(services, branch)
    timeout_s = float(settings.weaviate_timeout_s)
    url = config.weaviate_url
    try:
        with services.weaviate_clients.lease(url, api_key=config.weaviate_api_key or None,
                                             timeout_s=timeout_s, init_timeout_s=min(timeout_s, 5.0),
                                             error=UpstreamUnavailable) as client:
            try:
                with vendor_errors(f"serve RAG collection {config.collection_name!r}", UpstreamUnavailable):
                    layers = _layers(client, config, chain)
                    ingestion: dict[str, list[str]] = {"inserted": [], "skipped": [], "replaced": []}
                    model_changed = False
                    if files:
                        model_changed = _ingest(services, client, config, layers, files, ingestion)
                    model = config.model if files else (_visible_model(layers) or config.model)
                    results = _retrieve(services, client, config, layers, query, model) if query.strip() else []
                    results = relevant_results(results, services.settings.rag_max_distance)
            except KGError:
                raise
            except Exception as exc:  # the client met an answer it did not expect (KeyError, ...)
                raise UpstreamUnavailable(f"Weaviate at {url}: {type(exc).__name__}: {exc}") from exc
    except UpstreamUnavailable as exc:
        log.warning("RAG node: Weaviate at %s cannot be used: %s", url, exc.message, exc_info=exc.__cause__)
        raise _unusable(url) from exc
    except KGError:
        raise
    except Exception as exc:  # connecting met an answer the client did not expect
        log.warning("RAG node: Weaviate at %s cannot be used", url, exc_info=exc)
        raise _unusable(url) from exc
    own = layers[0]
    return {
        "context": format_context([(r["file"], r["content"]) for r in results]),
        "results": results,
        "ingestion": ingestion,
        "collection": {"name": config.collection_name, "class": own.chunks, "meta_class": own.meta,
                       "embedding_model": model, "model_changed": model_changed,
                       "weaviate_url": config.weaviate_url},
    }


# -- reading the collection ---------------------------------------------------------------------


def _branch_chain(services: Any, branch: str) -> list[str]:
    """The branch and its ancestors, nearest first (``["main"]`` needs no database)."""
    if branch == MAIN:
        return [MAIN]
    with services.db.read() as session:
        try:
            repo = get_repository(session, services.settings.rag_repo)
        except NotFound as exc:
            raise no_rag_branch(services, branch, exc) from exc
        node = get_branch(session, repo, branch)
        chain = [node.name]
        while node.parent_id is not None:
            node = session.get(Branch, node.parent_id)
            chain.append(node.name)
    return chain


def _layers(client: Any, config: RagConfig, chain: list[str]) -> list[_Layer]:
    """The classes of each branch of the chain, checked against collisions and the schema."""
    schema = client.collections.list_all(simple=True)
    by_lower = {name.lower(): (name, cfg) for name, cfg in schema.items()}
    layers = []
    for branch in chain:
        chunks, meta = rag_class_names(config.collection_name, branch)
        layer = _Layer(branch, chunks, meta)
        for attr, wanted, required in (("chunks", chunks, CHUNKS_PROPERTIES),
                                       ("meta", meta, META_PROPERTIES)):
            found = by_lower.get(wanted.lower())
            if found is None:
                continue
            actual, cfg = found
            have = {p.name for p in (getattr(cfg, "properties", None) or [])}
            missing = [p["name"] for p in required if p["name"] not in have]
            if missing:
                raise Conflict(
                    f"Weaviate class {actual!r} exists but is not a RAG {attr} class (it lacks "
                    f"{', '.join(missing)}); collection {config.collection_name!r} cannot use it",
                    details={"class": actual, "missing": missing},
                )
            setattr(layer, attr, actual)  # Weaviate's own spelling of the name
            setattr(layer, f"{attr}_exists", True)
        if layer.meta_exists:
            _read_meta(client, layer)
        if layer.original is not None and layer.original != config.collection_name:
            try:
                collide = classes_collide(layer.original, config.collection_name)
            except InvalidInput:
                collide = False
            if collide:
                raise Conflict(
                    f"collection {config.collection_name!r} maps to class {layer.chunks!r}, which "
                    f"already holds collection {layer.original!r}; use another name",
                    details={"collection": config.collection_name, "class": layer.chunks,
                             "existing": layer.original},
                )
        layers.append(layer)
    return layers


def _read_meta(client: Any, layer: _Layer) -> None:
    """Load the layer's meta object (the first by uuid if there are several)."""
    answer = client.collections.get(layer.meta).query.fetch_objects(limit=10)
    objects = sorted(answer.objects, key=lambda o: str(o.uuid))
    if not objects:
        return
    if len(objects) > 1:
        log.warning("meta class %s holds %d objects; the spec wants one, using %s",
                    layer.meta, len(objects), objects[0].uuid)
    meta = objects[0]
    props = meta.properties or {}
    layer.has_meta = True
    layer.meta_uuid = meta.uuid
    layer.model_raw = props.get("embeddingModel") or None
    layer.original = props.get("originalName") or None
    layer.hashes = _parse_hashes(props.get("documentHash"), layer.meta)


def _parse_hashes(raw: Any, where: str) -> dict[str, str]:
    """documentHash as a dict of file -> sha256 hex; {} (and a warning) when unreadable."""
    if raw in (None, ""):
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        log.warning("documentHash of %s is not a JSON map of strings; its files count as new", where)
        return {}
    return value


def _layer_dim(client: Any, layer: _Layer) -> int | None:
    """The dimension of the vectors a chunks class holds (None when it holds none)."""
    if not layer.dim_known:
        layer.dim_known = True
        if layer.chunks_exists:
            answer = client.collections.get(layer.chunks).query.fetch_objects(limit=1, include_vector=True)
            for obj in answer.objects:
                vector = (obj.vector or {}).get("default")
                if vector is not None:
                    layer.dim = len(vector)
    return layer.dim


def _visible_model(layers: list[_Layer]) -> str | None:
    """The model of the nearest layer with a meta object (the collection's locked model)."""
    for layer in layers:
        if layer.has_meta:
            return layer.model or ""
    return None


def _readable(layers: list[_Layer], model: str) -> list[tuple[_Layer, set[str]]]:
    """The layers a search reads for ``model``, each with the files nearer layers hide."""
    out = []
    hidden: set[str] = set()
    for layer in layers:
        if layer.has_meta and layer.model != model:
            continue  # another model: dropped by the branch that changed it
        if layer.chunks_exists:
            out.append((layer, set(hidden)))
        hidden |= set(layer.hashes)
    return out


# -- ingestion -------------------------------------------------------------------------------------


def _sha256(content: str) -> str:
    """sha256 hex of a file's UTF-8 content."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def _ingest(services: Any, client: Any, config: RagConfig, layers: list[_Layer],
            files: Sequence[tuple[str, str]], ingestion: dict[str, list[str]]) -> bool:
    """The lifecycle table for the input's files; returns whether the model changed."""
    own = layers[0]
    locked = _visible_model(layers)
    model_changed = locked is not None and locked != config.model
    visible: dict[str, str] = {}  # file -> hash, from the nearest layer that wrote it
    if not model_changed:
        for layer in layers:
            if layer.has_meta and layer.model == config.model:
                for f, h in layer.hashes.items():
                    visible.setdefault(f, h)
    todo: list[tuple[str, str, str]] = []  # (file, content, sha)
    for name, content in files:
        sha = _sha256(content)
        old = visible.get(name)
        if old == sha:
            ingestion["skipped"].append(name)
            continue
        todo.append((name, content, sha))
        ingestion["replaced" if old is not None else "inserted"].append(name)

    # Embed everything first: a failing model leaves the collection as it was.
    embedder = services.embedder(config.model)
    pieces: list[tuple[str, int, str]] = []
    for name, content, _ in todo:
        for chunk in word_split(content, chunk_size=config.chunk_size, overlap=config.chunk_overlap):
            pieces.append((name, chunk.index, chunk.text))
    batch_size = int(getattr(services.settings, "embed_batch_size", 32))
    vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    if pieces:
        parts = []
        for start in range(0, len(pieces), batch_size):
            texts = [p[2] for p in pieces[start : start + batch_size]]
            parts.append(check_vectors(embedder.embed(texts), len(texts), embedder.dim, texts))
        vectors = np.concatenate(parts)
    if not todo and not model_changed:
        return False  # nothing to write: a branch's classes are created on its first write
    if not model_changed:
        check_vector_dimension(vectors if len(vectors) else np.zeros(embedder.dim),
                               _layer_dim(client, own), what=f"Weaviate class {own.chunks}")

    # Writes: chunks first, then the meta object.
    hashes = {} if model_changed else dict(own.hashes)
    if model_changed and own.chunks_exists:
        client.collections.delete(own.chunks)  # "entire chunks class dropped"
        own.chunks_exists = False
    _ensure_class(client, own, "chunks")
    _ensure_class(client, own, "meta")
    chunks = client.collections.get(own.chunks)
    for name, _, _sha in todo:
        _delete_file_chunks(chunks, name)
    key = class_key(config.collection_name)
    from weaviate.classes.data import DataObject

    for start in range(0, len(pieces), _BATCH):
        batch = pieces[start : start + _BATCH]
        objects = [
            DataObject(
                properties={"content": text, "sourceFile": name, "chunkIndex": index},
                uuid=object_id(key, own.branch, name, index, config.model),
                vector=vectors[start + i].tolist(),
            )
            for i, (name, index, text) in enumerate(batch)
        ]
        insert_objects(chunks, objects, [f"file {n!r} chunk {i}" for n, i, _ in batch],
                       error=UpstreamUnavailable)
    for name, _, sha in todo:
        hashes[name] = sha
    properties = {"documentHash": json.dumps(hashes, ensure_ascii=False),
                  "embeddingModel": config.embedding_model, "originalName": config.collection_name}
    meta = client.collections.get(own.meta)
    if own.meta_uuid is not None:
        meta.data.replace(uuid=own.meta_uuid, properties=properties)
    else:
        own.meta_uuid = meta.data.insert(properties=properties,
                                         uuid=object_id(key, own.branch, "", -1, "meta"))
    own.has_meta, own.hashes, own.model_raw = True, hashes, config.embedding_model
    own.original = config.collection_name
    if len(vectors):
        own.dim, own.dim_known = int(vectors.shape[1]), True
    return model_changed


def _ensure_class(client: Any, layer: _Layer, kind: str) -> None:
    """Create the layer's chunks or meta class (spec schema) unless it exists."""
    if getattr(layer, f"{kind}_exists"):
        return
    name = getattr(layer, kind)
    schema = chunks_class_schema(name) if kind == "chunks" else meta_class_schema(name)
    from weaviate.exceptions import UnexpectedStatusCodeError

    try:
        client.collections.create_from_dict(schema)
    except UnexpectedStatusCodeError:
        if not client.collections.exists(name):  # not a lost race: a real refusal
            raise
    setattr(layer, f"{kind}_exists", True)


#: Weaviate's "en" stop words, the default of the spec's classes (``invertedIndexConfig``).
_EN_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
_WORD_TOKEN = re.compile(r"[^\W_]+")


def _filters_by_token(name: str) -> bool:
    """Whether an ``Equal`` filter on the word-tokenized ``sourceFile`` can select ``name``:
    Weaviate drops stop words from the value and refuses one left without terms ("invalid search
    term, only stopwords provided"), so the name needs a letter-or-digit run that is no stop word."""
    return any(token.lower() not in _EN_STOPWORDS for token in _WORD_TOKEN.findall(name))


def _delete_file_chunks(chunks: Any, name: str) -> None:
    """Delete the chunks of exactly the file ``name``.

    ``sourceFile`` is a word-tokenized text property (the spec's schema), so a Weaviate
    ``Equal`` filter matches by tokens and may return other files too: the ids are selected by
    an exact comparison here and deleted by id. A name without a token the filter can use
    (``"a"``, ``"it.is"``, ``"--"``) pages through the whole class instead.
    """
    from weaviate.classes.query import Filter

    filters = Filter.by_property("sourceFile").equal(name) if _filters_by_token(name) else None
    ids: list[Any] = []  # object uuids
    offset = 0
    while offset < MAX_QUERY_RESULTS:
        limit = min(1000, MAX_QUERY_RESULTS - offset)
        page = chunks.query.fetch_objects(filters=filters, limit=limit, offset=offset,
                                          return_properties=["sourceFile"])
        ids.extend(o.uuid for o in page.objects if (o.properties or {}).get("sourceFile") == name)
        if len(page.objects) < limit:
            break
        offset += limit
    for start in range(0, len(ids), 1000):
        chunks.data.delete_many(where=Filter.by_id().contains_any(ids[start : start + 1000]))


# -- retrieval -------------------------------------------------------------------------------------


def _retrieve(services: Any, client: Any, config: RagConfig, layers: list[_Layer], query: str,
              model: str) -> list[dict[str, Any]]:
    """The ``topK`` chunks nearest the query over the branch's layers readable with ``model``."""
    readable = _readable(layers, model)
    if not readable:
        return []
    embedder = services.embedder(model)
    vector = check_vectors(embedder.embed([query]), 1, embedder.dim, [query])[0]
    from weaviate.classes.query import MetadataQuery

    found: list[tuple[float, int, str, int, dict[str, Any]]] = []
    for depth, (layer, hidden) in enumerate(readable):
        check_vector_dimension(vector, _layer_dim(client, layer), what=f"Weaviate class {layer.chunks}")
        collection = client.collections.get(layer.chunks)
        limit = min(MAX_QUERY_RESULTS, config.top_k if not hidden else 2 * config.top_k + 10)
        while True:
            answer = collection.query.near_vector(
                near_vector=vector.tolist(), limit=limit, return_metadata=MetadataQuery(distance=True),
                return_properties=["content", "sourceFile", "chunkIndex"])
            kept = [o for o in answer.objects if (o.properties or {}).get("sourceFile") not in hidden]
            if len(kept) >= config.top_k or len(answer.objects) < limit or limit >= MAX_QUERY_RESULTS:
                break
            limit = min(MAX_QUERY_RESULTS, 2 * limit)
        for obj in kept:
            p = obj.properties or {}
            distance = max(0.0, float(obj.metadata.distance))
            found.append((distance, depth, str(p.get("sourceFile") or ""), int(p.get("chunkIndex") or 0),
                          {"file": str(p.get("sourceFile") or ""), "chunk_index": int(p.get("chunkIndex") or 0),
                           "content": str(p.get("content") or ""), "distance": distance,
                           "branch": layer.branch, "class": layer.chunks}))
    found.sort(key=lambda row: row[:4])
    return [row[4] for row in found[: config.top_k]]
