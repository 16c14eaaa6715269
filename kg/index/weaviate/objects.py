"""What kg writes into Weaviate objects: deterministic ids, property pairs, checked batches.

Object ids are uuid5 of their parts (:func:`object_id`), so a retried batch overwrites instead
of duplicating; scalar node properties are stored as :func:`property_pair` strings that a
filter can match exactly; a batch is inserted and every object's outcome checked
(:func:`insert_objects`). Shared by the kg index and the RAG node (:mod:`kg.ragnode.weaviate`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from kg.errors import BackendUnavailable, InvalidInput, KGError
from kg.index.weaviate.errors import _one_line, check_batch_result, import_weaviate, vendor_errors

KG_UUID_NAMESPACE = uuid.UUID("5f1c0a52-8a4e-5d0b-9a57-3c6a1e0d4b21")
"""Namespace of kg's uuid5 object ids (fixed: changing it would orphan every stored object)."""

_MAX_PAIR_TEXT = 256


def object_id(collection: str, branch: str, source: str, chunk_index: int, model: str) -> uuid.UUID:
    """The deterministic Weaviate id of one chunk, so a retried batch overwrites, never duplicates.

    Parameters
    ----------
    collection : str
        ``"{repo_key}/w{workspace id}"`` for kg's index, or the RAG collection's class key
        (lower-case class name); the repository key for kg's placement marks.
    branch : str
        The branch the object belongs to (``"b{branch id}"`` for kg's index); ``""`` for the
        placement marks.
    source : str
        The node version's key (``"{node_id}:{content_key}"``), the RAG file name, or the
        name of a placement mark.
    chunk_index : int
        Position of the chunk in its source, from 0; ``-1`` for a collection's meta object and
        for a node version's document object (kg's documents collections).
    model : str
        Embedding model name.

    Returns
    -------
    uuid.UUID
        ``uuid5(KG_UUID_NAMESPACE, json.dumps([collection, branch, source, chunk_index, model]))``:
        the JSON array keeps the parts apart (no two tuples give one string).

    Raises
    ------
    kg.errors.InvalidInput
        A part of the wrong type.

    References
    ----------
    .. [1] P. Leach, M. Mealling and R. Salz, "A Universally Unique IDentifier (UUID) URN
       Namespace", RFC 4122, 2005, section 4.3 (name-based UUIDs, version 5).
    """
    if not all(isinstance(p, str) for p in (collection, branch, source, model)) or isinstance(
        chunk_index, bool
    ) or not isinstance(chunk_index, int):
        raise InvalidInput(
            "object ids need str collection, branch, source, model and an int chunk index",
            details={"chunk_index": repr(chunk_index)},
        )
    name = json.dumps([collection, branch, source, chunk_index, model], ensure_ascii=False)
    return uuid.uuid5(KG_UUID_NAMESPACE, name)


def property_pair(name: str, value: Any) -> str | None:
    """One scalar node property as the string a (workspace, branch) collection stores in its
    ``props`` array, or None for a value that is not stored (and so never filtered on).

    Parameters
    ----------
    value : Any
        A str of at most 256 characters, an int, float or bool; anything else gives None.

    Returns
    -------
    str or None
        ``"{name}=s:{value}"`` for a str; ``"{name}=n:{repr(float(value))}"`` for a number or
        bool. Two equal numbers (``1``, ``1.0``) give one pair, so the translated filter never
        excludes what kg's comparison admits; ``True`` shares ``1``'s pair, which only widens
        (kg's own comparison, :func:`kg.rag.where.json_equal`, already left out a ``1`` for
        ``True`` from the version keys searched); ints too large for a float, NaN and
        infinities give None.
    """
    if isinstance(value, str):
        return f"{name}=s:{value}" if len(value) <= _MAX_PAIR_TEXT else None
    if isinstance(value, (bool, int, float)):
        try:
            number = float(value)
        except OverflowError:
            return None
        # + 0.0 makes -0.0 into 0.0: equal in Python, one pair here
        return f"{name}=n:{number + 0.0!r}" if math.isfinite(number) else None
    return None


def check_vector_dimension(vectors: np.ndarray, dim: int | None, *, what: str) -> None:
    """Refuse vectors (``(n, d)`` or ``(d,)``) whose dimension differs from a collection's ``dim``
    (None: it holds no vector yet, anything goes) with ``InvalidInput`` naming ``what``, before
    any write.
    """
    array = np.asarray(vectors)
    if array.ndim not in (1, 2):
        raise InvalidInput(f"vectors for {what} must be 1-D or 2-D, got shape {array.shape}")
    got = array.shape[-1]
    if dim is not None and got != dim:
        raise InvalidInput(
            f"vectors of dimension {got} do not fit {what}, which holds dimension {dim}",
            details={"dim": dim, "got": got, "collection": what},
        )


def insert_objects(
    collection: Any,
    objects: Sequence[Any],
    labels: Sequence[str],
    *,
    error: type[BackendUnavailable] = BackendUnavailable,
) -> None:
    """Insert one batch with ``collection.data.insert_many`` and check every object's outcome:
    ``error`` (``BackendUnavailable``) names each refused object by its label (see
    :func:`check_batch_result`), also when all were refused (the client then raises
    ``WeaviateInsertManyAllFailedError`` with the distinct messages) or the call failed.
    """
    weaviate = import_weaviate()
    name = getattr(collection, "name", "?")
    try:
        with vendor_errors(f"insert {len(objects)} objects into {name}", error):
            try:
                result = collection.data.insert_many(list(objects))
            except weaviate.exceptions.WeaviateInsertManyAllFailedError as exc:
                message = _one_line(exc, 300)
                failed = [{"index": i, "object": label, "uuid": None, "message": message}
                          for i, label in enumerate(labels)]
                shown = ", ".join(labels[:5]) + (f" and {len(labels) - 5} more" if len(labels) > 5 else "")
                raise error(
                    f"Weaviate refused all {len(labels)} objects in {name} ({shown}): {message}",
                    details={"collection": name, "failed": failed},
                ) from exc
    except KGError:
        raise
    check_batch_result(result, labels, collection=name, error=error)
