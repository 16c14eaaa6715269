"""The Weaviate search index: the :class:`~kg.index.base.SearchIndex` contract over Weaviate.

Selected by ``KG_INDEX=weaviate`` with ``KG_WEAVIATE_URL`` (and ``KG_WEAVIATE_API_KEY``); it
needs the optional extra ``pip install 'kg[weaviate]'`` (the official ``weaviate-client``, v4
API). A missing extra or an unreachable server is a :class:`~kg.errors.BackendUnavailable`
(HTTP 503), never a silent fallback to the embedded index.

Modules
-------
``index``     :class:`WeaviateVectorIndex`: placement, searches, marks, drops
``schema``    collection names, class definitions, descriptions, the state objects' ids,
              the documents' terms property names
``filters``   kg's search filters as one Weaviate filter (:func:`translate_filters`)
``objects``   object ids, property pairs, dimension checks, checked batch inserts
``ranking``   rows of answers ranked, deepened and merged across queries and collections
``client``    URLs, :func:`connect`, :class:`ClientPool`
``errors``    importing weaviate-client, translating its errors and refused batches

Each imports only those below it in this list, :mod:`kg.index.base` and :mod:`kg.errors`.
Everything other modules use is imported from this package.

Layout in Weaviate
------------------
kg's workspaces: one collection per (workspace, branch) and embedding model, filled by
:meth:`WeaviateVectorIndex.place` from SQL's node versions (:meth:`WeaviateVectorIndex.catch_up`)::

    KgChunks_<sha256(repo_key)[:12]>_<sha256(model)[:10]>_w<workspace id>_b<branch id>
        vectorizer "none", HNSW, cosine distance; description = JSON {"kg": "chunks",
        "format": 1, "repo", "model", "dim", "workspace", "branch"}
        content     text    the passage, returned by searches (not indexed)
        terms       text    kg's BM25 analyzer output (kg.index.tokenize), whitespace-tokenized
        contentKey  text    field-tokenized, filterable
        chunkIndex  int
        seq         int     the chunk's row id in SQL
        versionKey  text    "{node_id}:{content_key}", field-tokenized: the visibility filter
        nodeId, path, nodeType  text, field-tokenized, filterable
        props       text[]  one property_pair per scalar property, field-tokenized

Beside each, created with it (lazily, on the first placement there) and deleted with it, the
documents collection of the same suffix, one object per placed node version, for node-level
BM25F (:meth:`WeaviateVectorIndex.bm25_documents`)::

    KgDocs_<sha256(repo_key)[:12]>_<sha256(model)[:10]>_w<workspace id>_b<branch id>
        no vectors; description = JSON {"kg": "docs", "format": 1, "repo", "model", "dim",
        "workspace", "branch"}
        terms_<field>  text  kg's analyzer output of the version's chunks of that field, in chunk
                             order, whitespace-tokenized, BM25-searchable; one property per field,
                             added to the schema when a field first appears (its description
                             JSON {"kg": "terms", "field"}; a field not [a-z][a-z0-9]* is
                             ``terms__<sha256(field)[:16]>``, :func:`terms_property`)
        contentKey, versionKey, nodeId, path, nodeType, props   as in the chunks collection
        seq, chunkIndex  int  the version's first chunk (one content key: one seq)
        fields         text[]  the fields present

Its object ids are :func:`object_id` of the chunk ids' parts with chunk index -1, so a redone
placement overwrites. A search ranks these objects with Weaviate's BM25 over the
``terms_<field>`` properties with ``^boost`` (Weaviate's BM25F), filtered like the chunks, then
finds each top node's best passage with a BM25 query on the chunks collection restricted to
those nodes' version keys. Weaviate's own hybrid query stays passage-level.

(the model is in the names because a Weaviate vector index has one dimension; a workspace embeds
with one model at a time). The SQL ids make the names stable and collision-free (branch ids are
never reused), and a collection is created on its branch's first write: a new branch reads its
ancestors' collections and is searchable at once, with nothing copied. A search passes one
:class:`~kg.index.base.CollectionScope` per (workspace, branch) that provides visible versions, with
the version keys SQL resolved for the searched branch state (so what a branch rewrote or
deleted is hidden, and an ancestor is read as of the fork); the search's path, type and
property filters are sent as well where the objects carry the searched versions' own values.
Rows of several collections are merged: exactly by distance; BM25 and hybrid scores each come
from their own collection's statistics (see :meth:`WeaviateVectorIndex.bm25`).

Collections ``KgChunks_<sha256(repo_key)[:12]>_<sha256(model)[:10]>`` without a workspace and
branch (a shared collection per repository and model, and the ``watermark`` state object, that
kg wrote before workspaces got collections of their own) are never read or written; ``drop``
still deletes them.

The ``terms`` property carries kg's own analysis (NFKC case folding, CJK bigrams, Lucene's stop
words, English stemming), so full-text search matches what the embedded index matches, without
Weaviate's optional GSE tokenizer; the collection's own stop-word list is switched off.

A collection ``KgIndexState`` holds per repository the two placement marks (head revision and
chunk seq placed). A mark advances only after every object up to it was acknowledged, so a batch
that failed half-way leaves no hole below it: the caller redoes the pass from the old mark, and
deterministic object ids (:func:`object_id`) make the retry overwrite instead of duplicate.

Large allowed sets
------------------
Up to :attr:`WeaviateVectorIndex.filter_batch_keys` version keys (default 1,000) go into one
``ContainsAny`` filter. Above that, a search first asks Weaviate for a deeper top list
(``probe_depth``) without the key filter (with the search's translated filters, if any) and
keeps the allowed rows client-side; when that yields
``k`` rows whose last score is strictly above the deepest probed score, they are the exact top
``k`` (every row outside the probe scores lower). Otherwise the keys are split into batches of
``filter_batch_keys``, each batch is one filtered query for the top ``k``, and the batches are
merged: exact, since a chunk's score does not depend on the filter (cosine distance; BM25 uses
collection-wide statistics). The probe makes the common case (a branch that sees most of a
collection) one query; the batches bound the size of any one filter.

:meth:`WeaviateVectorIndex.hybrid` is the exception: a fused score depends on the filtered set
(ranks within each filtered leg for ranked fusion, the legs' minimum and maximum for relative-score
fusion), so neither an unfiltered probe nor merged batches give Weaviate's filtered answer. A
hybrid search is always one query whose filter is an ``Or`` of ``ContainsAny`` batches of at most
``filter_batch_keys`` keys each.
"""

from kg.index.base import HybridResult
from kg.index.weaviate.client import ClientPool, connect, parse_weaviate_url
from kg.index.weaviate.errors import check_batch_result, import_weaviate, vendor_errors
from kg.index.weaviate.filters import translate_filters
from kg.index.weaviate.index import FUSION_TYPES, WeaviateVectorIndex
from kg.index.weaviate.objects import (
    KG_UUID_NAMESPACE,
    check_vector_dimension,
    insert_objects,
    object_id,
    property_pair,
)
from kg.index.weaviate.ranking import MAX_QUERY_RESULTS
from kg.index.weaviate.schema import terms_property

__all__ = [
    "ClientPool",
    "FUSION_TYPES",
    "HybridResult",
    "KG_UUID_NAMESPACE",
    "MAX_QUERY_RESULTS",
    "WeaviateVectorIndex",
    "check_batch_result",
    "check_vector_dimension",
    "connect",
    "import_weaviate",
    "insert_objects",
    "object_id",
    "parse_weaviate_url",
    "property_pair",
    "terms_property",
    "translate_filters",
    "vendor_errors",
]
