"""The boundary with weaviate-client: importing it, and translating what it raises or refuses.

A missing extra (``pip install 'kg[weaviate]'``) and every ``WeaviateBaseError`` become a
:class:`~kg.errors.BackendUnavailable` (or a subclass the caller names), ``raise ... from exc``;
a batch some of whose objects Weaviate refused is an error naming each of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kg.errors import BackendUnavailable, KGError


def import_weaviate() -> Any:
    """The ``weaviate`` package (weaviate-client v4), imported on first use;
    ``BackendUnavailable`` saying how to install the extra when it is missing.
    """
    try:
        import weaviate
        import weaviate.classes  # noqa: F401  (Filter, DataObject, MetadataQuery, ...)
    except ImportError as exc:
        raise BackendUnavailable(
            "the Weaviate backend needs the optional extra: pip install 'kg[weaviate]' "
            f"(weaviate-client v4); import failed: {exc}",
            details={"extra": "weaviate"},
        ) from exc
    return weaviate


@contextmanager
def vendor_errors(action: str, error: type[BackendUnavailable] = BackendUnavailable) -> Iterator[None]:
    """Translate weaviate-client errors raised inside the block into ``error`` (``from exc``).

    Parameters
    ----------
    action : str
        What was being done, for the message (``"query collection KgChunks_..."``).
    error : type
        :class:`~kg.errors.BackendUnavailable` or a subclass.
    """
    weaviate = import_weaviate()
    try:
        yield
    except KGError:
        raise
    except weaviate.exceptions.WeaviateBaseError as exc:
        raise error(f"Weaviate failed to {action}: {_one_line(exc)}",
                    details={"action": action}) from exc


def _one_line(exc: object, limit: int = 500) -> str:
    """An exception's (or a message's) text on one line, at most ``limit`` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_batch_result(
    result: Any,
    labels: Sequence[str],
    *,
    collection: str,
    error: type[BackendUnavailable] = BackendUnavailable,
) -> None:
    """Raise ``error`` (``BackendUnavailable``) for every object a Weaviate batch refused; return
    quietly when all were stored.

    ``result`` is what ``collection.data.insert_many`` answered (``errors`` maps a failed
    object's index in the batch to its ``ErrorObject``); ``labels`` name the objects in batch
    order (``"seq 12"``, ``"file a.txt chunk 3"``). The error names each failed object, its
    uuid and Weaviate's message; ``details["failed"]`` lists ``[{"index", "object", "uuid",
    "message"}]``.
    """
    errors = dict(getattr(result, "errors", None) or {})
    if not errors and not getattr(result, "has_errors", False):
        return
    failed = []
    for index, err in sorted(errors.items()):
        label = labels[index] if 0 <= index < len(labels) else f"object #{index}"
        uid = getattr(err, "original_uuid", None)
        failed.append({"index": index, "object": label, "uuid": None if uid is None else str(uid),
                       "message": _one_line(getattr(err, "message", err), 300)})
    if not failed:
        raise error(f"Weaviate reported errors for a batch of {len(labels)} objects in "
                    f"{collection} without naming them", details={"collection": collection})
    shown = "; ".join(f"{f['object']} ({f['uuid']}): {f['message']}" for f in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    raise error(
        f"Weaviate refused {len(failed)} of {len(labels)} objects in {collection}: {shown}{more}",
        details={"collection": collection, "failed": failed},
    )
