"""The RAG node's pure parts: its input format, configuration, class names, output and errors.

Both backends use them: :mod:`kg.ragnode.service` (collections in kg's own store, and the entry
point) and :mod:`kg.ragnode.weaviate` (a named Weaviate instance), which the service dispatches
to; what both need lives here, below both, so the arrows point service -> weaviate -> spec.

The RAG node (``POST /api/rag``) receives the markdown text an AI Data Processing Node
forwards: a query, then optional file blocks::

    Using the attached document, answer:

    What are the main topics covered?

    ### File name "my-document.txt"
    <file content here>

and a configuration object validated exactly as the node's JSON Schema says (plus
``chunkOverlap < chunkSize``). Each collection lives in a chunks class and a meta class whose
names derive from the collection name (``rag_collection`` -> ``Ragcollection`` and
``RagcollectionMeta``). The node answers with the retrieved chunks as one context string::

    [1] (my-document.txt)
    ...chunk content...

    [2] (my-document.txt)
    ...chunk content...

or ``None`` when nothing was found. This module parses, validates, names and formats; the
ingestion lifecycle and retrieval live elsewhere.

Pure code: no I/O, no session.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kg.errors import InvalidInput, NotFound, TooLarge
from kg.providers.registry import PROVIDERS, canonical_model_name
from kg.text.chunking import ChunkingConfig, word_chunk_count

__all__ = [
    "KNOWN_PROVIDERS",
    "RAG_CONFIG_SCHEMA",
    "RagConfig",
    "check_chunk_budget",
    "class_key",
    "class_name",
    "classes_collide",
    "format_context",
    "meta_class_name",
    "normalise_model_name",
    "parse_rag_input",
    "validate_rag_config",
]

#: The RAG node's configuration schema, verbatim from its specification (generated there from
#: the Zod schema that validates the node at runtime). :func:`validate_rag_config` applies it.
RAG_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "embeddingModel": {
            "type": "string",
            "description": "Ollama model name to use for generating embeddings",
        },
        "collectionName": {
            "type": "string",
            "description": "Weaviate collection name to store/query vectors",
        },
        "chunkSize": {
            "type": "integer",
            "exclusiveMinimum": 0,
            "description": "Number of tokens per text chunk when splitting documents",
        },
        "chunkOverlap": {
            "type": "integer",
            "minimum": 0,
            "description": "Number of overlapping tokens between consecutive chunks",
        },
        "topK": {
            "type": "integer",
            "exclusiveMinimum": 0,
            "description": "Number of top matching chunks to retrieve",
        },
        "weaviateUrl": {
            "type": "string",
            "description": "URL of the Weaviate vector database instance",
        },
        "weaviateApiKey": {
            "type": "string",
            "description": "API key for Weaviate (leave empty for local instances)",
        },
    },
    "required": [
        "embeddingModel",
        "collectionName",
        "chunkSize",
        "chunkOverlap",
        "topK",
        "weaviateUrl",
    ],
    "additionalProperties": False,
}

#: Model-name providers kg knows; any other first part is part of an Ollama model name.
KNOWN_PROVIDERS: tuple[str, ...] = PROVIDERS

# A file block header: at the start of a line, the name between the first and the last
# double quote of the line (so a name may hold quotes), nothing but blanks after it.
_FILE_HEADER = re.compile(r'^###[ \t]+File name[ \t]+"(?P<name>.*)"[ \t]*\r?$', re.MULTILINE)
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\r?\n)+")


@dataclass(frozen=True, slots=True)
class RagConfig:
    """A validated RAG-node configuration.

    Attributes
    ----------
    embedding_model : str
        ``embeddingModel`` as given (``nomic-embed-text:latest``), as the meta class stores it.
    collection_name : str
        ``collectionName`` as given (``rag_collection``), the human-readable name.
    chunk_size : int
        ``chunkSize``: words per chunk, > 0.
    chunk_overlap : int
        ``chunkOverlap``: words shared by consecutive chunks, ``0 <= overlap < size``.
    top_k : int
        ``topK``: chunks to retrieve, > 0.
    weaviate_url : str
        ``weaviateUrl``: ``"embedded"`` for kg's embedded index, else a Weaviate URL.
    weaviate_api_key : str
        ``weaviateApiKey``; ``""`` (also when absent) for an unauthenticated instance.
    class_name : str
        The chunks class of the collection (:func:`class_name`).
    model : str
        ``embedding_model`` in kg's ``<provider>:<model>`` form (:func:`normalise_model_name`),
        the name the model lock compares.
    """

    embedding_model: str
    collection_name: str
    chunk_size: int
    chunk_overlap: int
    top_k: int
    weaviate_url: str
    weaviate_api_key: str
    class_name: str
    model: str

    @property
    def chunking(self) -> ChunkingConfig:
        """The node's chunking: word mode, ``chunk_size`` words overlapping by ``chunk_overlap``."""
        return ChunkingConfig(
            splitter="words", unit="words", chunk_size=self.chunk_size, overlap=self.chunk_overlap
        )


def parse_rag_input(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Split the node's input into its query and its file blocks.

    A file block starts at a line ``### File name "<name>"`` (at the start of the line; the
    name is everything between the first and the last double quote of the line, so it may
    hold spaces, quotes and any Unicode) and runs to the next such line or the end of the
    text. The query is the text before the first block.

    Parameters
    ----------
    text : str
        The markdown the AI Data Processing Node forwards.

    Returns
    -------
    query : str
        The text before the first file block, stripped of surrounding whitespace; ``""``
        when there is none (ingestion only).
    files : list of (str, str)
        ``(file name, content)`` in input order; ``[]`` for a query-only input. The content
        is the block's text without the blank lines that open it and without trailing
        whitespace, so the blank lines that separate blocks are not part of a file (and do
        not change its hash). A block with no content is kept with content ``""``: the file
        exists in the input, it simply has no chunks.

    Raises
    ------
    kg.errors.InvalidInput
        ``text`` is not a string; a block names no file (``"   "`` or ``""``); or two blocks
        name the same file (compared exactly): the input is ambiguous, so it is refused
        rather than letting one silently win.

    Notes
    -----
    The format has no escaping: a line of a file's own content that looks exactly like a
    block header starts a new block. O(n) in the length of the text.

    Examples
    --------
    >>> parse_rag_input('What is kg?\\n\\n### File name "a.txt"\\nkg is a service.\\n')
    ('What is kg?', [('a.txt', 'kg is a service.')])
    """
    if not isinstance(text, str):
        raise InvalidInput(
            "the RAG input must be a string", details={"type": type(text).__name__}
        )
    headers = list(_FILE_HEADER.finditer(text))
    query_end = headers[0].start() if headers else len(text)
    query = text[:query_end].strip()
    files: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for i, header in enumerate(headers):
        name = header.group("name")
        if not name.strip():
            raise InvalidInput(
                f"file block {i + 1} of the RAG input names no file",
                details={"field": "input", "block": i + 1, "name": name},
            )
        if name in seen:
            raise InvalidInput(
                f"the RAG input has two file blocks named {name!r} (blocks {seen[name]} "
                f"and {i + 1}); file names must be unique",
                details={"field": "input", "name": name, "blocks": [seen[name], i + 1]},
            )
        seen[name] = i + 1
        body_start = header.end() + 1 if header.end() < len(text) else header.end()
        body_end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        body = text[body_start:body_end]
        content = _LEADING_BLANK_LINES.sub("", body).rstrip()
        files.append((name, content))
    return query, files


def check_chunk_budget(files: Sequence[tuple[str, str]], config: RagConfig, max_chunks: int) -> int:
    """Refuse an input whose files make more chunks than one request may (before any work).

    Parameters
    ----------
    files : sequence of (name, content)
        The input's file blocks (:func:`parse_rag_input`).
    config : RagConfig
        The node's configuration: ``chunk_size`` and ``chunk_overlap``, in words.
    max_chunks : int
        ``Settings.max_chunks_per_request`` (``KG_MAX_CHUNKS_PER_REQUEST``).

    Returns
    -------
    int
        The chunks the files make, all of them counted (unchanged files too, so the answer
        does not depend on what the collection holds).

    Raises
    ------
    kg.errors.TooLarge
        More than ``max_chunks`` chunks (413): the request is well-formed but asks for more
        work than the server does per request; fewer files or a larger ``chunkSize`` pass.

    Notes
    -----
    O(total length of the files), O(1) memory (:func:`kg.text.chunking.word_chunk_count`).
    """
    total = 0
    for _, content in files:
        total += word_chunk_count(content, chunk_size=config.chunk_size, overlap=config.chunk_overlap)
    if total > max_chunks:
        raise TooLarge(
            f"the input's files make {total} chunks with chunkSize {config.chunk_size}, more than "
            f"the {max_chunks} one request may make (KG_MAX_CHUNKS_PER_REQUEST); send fewer files "
            "per request or use a larger chunkSize",
            details={"chunks": total, "max_chunks_per_request": max_chunks},
        )
    return total


def validate_rag_config(config: Mapping[str, Any]) -> RagConfig:
    """Validate a RAG-node configuration exactly as its JSON Schema says, plus overlap < size.

    The rules of :data:`RAG_CONFIG_SCHEMA`: an object; no key but the seven it lists
    (``additionalProperties: false``); ``embeddingModel``, ``collectionName``,
    ``chunkSize``, ``chunkOverlap``, ``topK`` and ``weaviateUrl`` present; the strings
    strings; ``chunkSize`` and ``topK`` integers > 0; ``chunkOverlap`` an integer >= 0. As
    in JSON Schema, a boolean is not an integer and a number with a zero fractional part
    (``200.0``) is one. Then kg's own rules, checked before any work: ``chunkOverlap <
    chunkSize`` (a word split would never end otherwise), a non-blank ``weaviateUrl``, a
    valid model name in ``embeddingModel`` (:func:`normalise_model_name`) and a
    ``collectionName`` with a valid class name (:func:`class_name`).

    Parameters
    ----------
    config : mapping
        The ``config`` object of a ``POST /api/rag`` body, as decoded from JSON.

    Returns
    -------
    RagConfig

    Raises
    ------
    kg.errors.InvalidInput
        Every rule broken, at once: the message names each offending field (and both
        ``chunkOverlap`` and ``chunkSize`` for the overlap rule); ``details["errors"]`` holds
        ``[{"field": ..., "message": ...}]``.

    Notes
    -----
    The schema is applied by hand: the ``jsonschema`` package is not a dependency of kg, and
    the seven fields need no more than this.
    """
    if not isinstance(config, Mapping):
        raise InvalidInput(
            "the RAG config must be a JSON object",
            details={"errors": [{"field": "", "message": "must be an object"}]},
        )
    errors: list[tuple[str, str]] = []
    properties: dict[str, Any] = RAG_CONFIG_SCHEMA["properties"]
    for key in config:
        if key not in properties:
            errors.append(
                (str(key), f"unknown field (allowed: {', '.join(properties)})")
            )
    missing = [key for key in RAG_CONFIG_SCHEMA["required"] if key not in config]
    for key in missing:
        errors.append((key, "is required"))
    values: dict[str, Any] = {}
    for key, rule in properties.items():
        if key not in config:
            continue
        value = config[key]
        if rule["type"] == "string":
            if not isinstance(value, str):
                errors.append((key, f"must be a string, got {_json_type(value)}"))
                continue
        else:
            number = _as_integer(value)
            if number is None:
                errors.append((key, f"must be an integer, got {_json_type(value)} {value!r}"))
                continue
            if "exclusiveMinimum" in rule and not number > rule["exclusiveMinimum"]:
                bound = rule["exclusiveMinimum"]
                errors.append((key, f"must be greater than {bound}, got {number}"))
                continue
            if "minimum" in rule and not number >= rule["minimum"]:
                errors.append((key, f"must be at least {rule['minimum']}, got {number}"))
                continue
            value = number
        values[key] = value
    size, overlap = values.get("chunkSize"), values.get("chunkOverlap")
    if size is not None and overlap is not None and overlap >= size:
        errors.append(
            ("chunkOverlap", f"({overlap}) must be smaller than chunkSize ({size})")
        )
    for key in ("embeddingModel", "weaviateUrl"):
        if key in values and not values[key].strip():
            errors.append((key, "must not be empty"))
    model: str | None = None
    if "embeddingModel" in values and values["embeddingModel"].strip():
        try:
            model = normalise_model_name(values["embeddingModel"])
        except InvalidInput as exc:
            errors.append(("embeddingModel", exc.message))
    name: str | None = None
    if "collectionName" in values:
        try:
            name = class_name(values["collectionName"])
        except InvalidInput as exc:
            errors.append(("collectionName", exc.message))
    if errors:
        message = "invalid RAG config: " + "; ".join(f"{field} {text}" for field, text in errors)
        raise InvalidInput(
            message,
            details={"field": f"config.{errors[0][0]}",
                     "errors": [{"field": field, "message": text} for field, text in errors]},
        )
    assert name is not None and model is not None
    return RagConfig(
        embedding_model=values["embeddingModel"],
        collection_name=values["collectionName"],
        chunk_size=values["chunkSize"],
        chunk_overlap=values["chunkOverlap"],
        top_k=values["topK"],
        weaviate_url=values["weaviateUrl"],
        weaviate_api_key=values.get("weaviateApiKey", ""),
        class_name=name,
        model=model,
    )


def class_name(collection_name: str) -> str:
    """The Weaviate class of a collection: its ASCII letters and digits, first letter upper.

    As the RAG node's specification says: strip every character that is not alphanumeric
    and uppercase the first letter (``rag_collection`` -> ``Ragcollection``); the other
    letters keep their case (``RAG_collection`` -> ``RAGcollection``).

    Parameters
    ----------
    collection_name : str
        The human-readable collection name.

    Returns
    -------
    str
        A valid Weaviate class name: ``[A-Z][A-Za-z0-9]*``.

    Raises
    ------
    kg.errors.InvalidInput
        The name is not a string; it holds a non-ASCII letter or digit (``données``), which is
        refused rather than silently dropped; or what is left is empty (``"__"``) or starts
        with a digit (``2024_docs``), which is no valid class name.

    Examples
    --------
    >>> class_name("rag_collection")
    'Ragcollection'
    """
    if not isinstance(collection_name, str):
        raise InvalidInput(
            "a collection name must be a string",
            details={"collection": repr(collection_name)},
        )
    foreign = sorted({char for char in collection_name if char.isalnum() and not char.isascii()})
    if foreign:
        raise InvalidInput(
            f"collection name {collection_name!r} holds non-ASCII letters or digits "
            f"({''.join(foreign)}); a Weaviate class name can only keep A-Z, a-z and 0-9",
            details={"collection": collection_name, "characters": foreign},
        )
    kept = "".join(char for char in collection_name if char.isascii() and char.isalnum())
    if not kept:
        raise InvalidInput(
            f"collection name {collection_name!r} has no letter or digit to make a class name",
            details={"collection": collection_name},
        )
    if kept[0].isdigit():
        raise InvalidInput(
            f"collection name {collection_name!r} maps to class {kept!r}, which starts with a "
            "digit; a Weaviate class name must start with a letter",
            details={"collection": collection_name, "class": kept},
        )
    return kept[0].upper() + kept[1:]


def meta_class_name(collection_name: str) -> str:
    """The meta class of a collection: :func:`class_name` + ``"Meta"`` (``RagcollectionMeta``).

    Raises
    ------
    kg.errors.InvalidInput
        As :func:`class_name`.
    """
    return class_name(collection_name) + "Meta"


def class_key(collection_name: str) -> str:
    """The key two collections share exactly when their chunks classes are one class.

    Weaviate compares class names without regard to case, so ``rag_collection``,
    ``rag-collection`` and ``RAG_collection`` (classes ``Ragcollection``, ``Ragcollection``,
    ``RAGcollection``) all have the key ``ragcollection``. A caller keeps the key of every
    collection it knows and refuses a new name whose key is taken by another name.

    Returns
    -------
    str
        ``class_name(collection_name).lower()``.

    Raises
    ------
    kg.errors.InvalidInput
        As :func:`class_name`.
    """
    return class_name(collection_name).lower()


def classes_collide(first: str, second: str) -> bool:
    """True when two different collection names would share a Weaviate class.

    Compares both classes of each (chunks and meta) without regard to case, so it also
    catches ``docs_meta`` (class ``Docsmeta``) against the meta class ``DocsMeta`` of
    ``docs``. The same name twice does not collide.

    Raises
    ------
    kg.errors.InvalidInput
        Either name is refused by :func:`class_name`.
    """
    if first == second:
        return False
    keys_first = {class_key(first), meta_class_name(first).lower()}
    keys_second = {class_key(second), meta_class_name(second).lower()}
    return bool(keys_first & keys_second)


def relevant_results(results: list[dict[str, Any]], max_distance: float | None) -> list[dict[str, Any]]:
    """The retrieved chunks relevant enough to inject: cosine distance at most ``max_distance``.

    The contract: "If no relevant chunks are found, the output is empty (null context)". A vector
    search always answers its top k, however far; this cut is what "relevant" means.

    Parameters
    ----------
    results : list of dict
        With ``distance`` (cosine distance, 0..2), best first.
    max_distance : float or None
        ``KG_RAG_MAX_DISTANCE``; None keeps everything. Its default was measured on held data
        (``bench/rag_null_context.py``: off-topic questions against the shared datasets'
        collections answered null, on-topic ones still answered).

    Returns
    -------
    list of dict
        The results within the distance, in their order.
    """
    if max_distance is None:
        return results
    return [r for r in results if r.get("distance") is not None and r["distance"] <= max_distance]


def format_context(results: Sequence[tuple[str, str]]) -> str | None:
    """The context string the node injects: numbered chunks with their file names.

    Parameters
    ----------
    results : sequence of (str, str)
        ``(file name, chunk text)``, best first.

    Returns
    -------
    str or None
        ``"[i] (file)\\n<chunk>"`` for i from 1, joined by one blank line; ``None`` when
        ``results`` is empty (the AI node then proceeds without context).

    Examples
    --------
    >>> print(format_context([("a.txt", "first"), ("b.txt", "second")]))
    [1] (a.txt)
    first
    <BLANKLINE>
    [2] (b.txt)
    second
    """
    if not results:
        return None
    return "\n\n".join(
        f"[{i}] ({file})\n{chunk}" for i, (file, chunk) in enumerate(results, start=1)
    )


def normalise_model_name(name: str) -> str:
    """A model name in kg's ``<provider>:<model>`` form, as the model lock compares them.

    A name whose part before the first ``:`` is a known provider (:data:`KNOWN_PROVIDERS`)
    keeps it; any other name is an Ollama model name, as the RAG node writes them
    (``nomic-embed-text:latest`` -> ``ollama:nomic-embed-text:latest``). An Ollama name
    without a tag gets Ollama's own default, ``:latest``, so that both spellings name one
    model. This is :func:`kg.providers.registry.canonical_model_name`, the one rule kg uses.

    Parameters
    ----------
    name : str
        A model name, as typed in the node's ``embeddingModel``.

    Returns
    -------
    str

    Raises
    ------
    kg.errors.InvalidInput
        The name is not a string, is blank, or is no valid Ollama model name (whitespace
        inside, an empty tag).

    Examples
    --------
    >>> normalise_model_name("nomic-embed-text:latest")
    'ollama:nomic-embed-text:latest'
    >>> normalise_model_name("local:all-MiniLM-L6-v2")
    'local:all-MiniLM-L6-v2'
    """
    return canonical_model_name(name)


def _as_integer(value: object) -> int | None:
    """``value`` as a JSON Schema integer (no bool; a float only if whole), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _json_type(value: object) -> str:
    """The JSON type name of a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def no_rag_branch(services, branch: str, error: NotFound) -> NotFound:
    """The error for a RAG-node call on a branch that does not exist: when the node's
    repository does not exist yet either, say how it comes to be (the first call on main)."""
    repo = services.settings.rag_repo
    if (error.details or {}).get("branch") == branch:
        return error
    return NotFound(
        f"branch {branch!r} not found: the RAG node's repository {repo!r} does not exist yet "
        f"(a first call on main creates it; then create the branch with POST /api/repos/{repo}/branches)",
        details={"branch": branch, "repository": repo})
