"""kg's search filters translated into one Weaviate filter.

A (workspace, branch) collection is searched with its version keys (the exact visibility filter
SQL decided) and, where its objects carry the searched versions' own values, the search's path,
type and property filters; each only ever narrows what SQL allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from kg.errors import InvalidInput
from kg.index.weaviate.errors import import_weaviate
from kg.index.weaviate.objects import property_pair
from kg.store.paths import validate_prefix_mode


def translate_filters(
    *,
    version_keys: Collection[str] | None = None,
    path_prefix: str | None = None,
    path_prefix_mode: str = "segments",
    node_type: str | None = None,
    where: Mapping[str, Any] | None = None,
) -> Any:
    """kg's search filters as one Weaviate filter (``weaviate.classes.query.Filter``).

    Parameters
    ----------
    version_keys : collection of str, optional
        ``versionKey`` ``ContainsAny`` the keys (``"{node_id}:{content_key}"``: the visibility
        filter of a (workspace, branch) collection).
    path_prefix : str, optional
        On the field-tokenized ``path`` property, whole segments: ``path`` ``Equal`` the prefix
        or ``Like`` ``prefix/*`` (``/answers`` never matches ``/answers-old``); a prefix ending
        in ``/`` is ``Like`` ``prefix*``; ``"/"`` is no filter.
    path_prefix_mode : {"segments", "raw"}, default "segments"
        ``raw``: ``path`` ``Like`` ``prefix*``, a plain string prefix.
    node_type : str, optional
        ``nodeType`` ``Equal``.
    where : mapping of str to value, optional
        Node property equality, on the ``props`` array of a (workspace, branch) collection,
        which holds one :func:`property_pair` per scalar property: a str (up to 256
        characters), int, float or bool value becomes ``props`` ``ContainsAll`` its pair. Other
        values (None, lists, objects, longer strings) add no condition: SQL compares them,
        and a translated filter only ever narrows what SQL already allowed.

    Returns
    -------
    weaviate filter or None
        The conditions joined with ``Filter.all_of`` (one condition alone as itself); ``None``
        when nothing filters.

    Raises
    ------
    kg.errors.InvalidInput
        ``version_keys`` given but empty or a single ``str``; an unknown prefix mode; a path prefix
        holding Like's wildcards ``*`` or ``?`` (they cannot be escaped); a property name that
        is not a str.
    kg.errors.BackendUnavailable
        The weaviate extra is not installed.

    Notes
    -----
    Pure: builds filter objects, talks to no server. O(len(version_keys) + len(where)).
    """
    import_weaviate()
    from weaviate.classes.query import Filter

    parts = []
    if version_keys is not None:
        if isinstance(version_keys, str):
            raise InvalidInput("version_keys must be a collection of keys, not one str")
        keys = list(dict.fromkeys(version_keys))
        if not keys:
            raise InvalidInput("version_keys is empty: a search over no key has no filter",
                               details={"version_keys": []})
        parts.append(Filter.by_property("versionKey").contains_any(keys))
    if path_prefix is not None and path_prefix != "/":
        if not isinstance(path_prefix, str) or not path_prefix.startswith("/"):
            raise InvalidInput(f"path prefix {path_prefix!r} must start with /",
                               details={"path_prefix": path_prefix})
        if "*" in path_prefix or "?" in path_prefix:
            raise InvalidInput(
                f"path prefix {path_prefix!r} holds * or ?, which Weaviate's Like filter reads "
                "as wildcards and cannot escape",
                details={"path_prefix": path_prefix},
            )
        validate_prefix_mode(path_prefix_mode)
        if path_prefix_mode == "raw" or path_prefix.endswith("/"):
            parts.append(Filter.by_property("path").like(path_prefix + "*"))
        else:
            parts.append(Filter.any_of([Filter.by_property("path").equal(path_prefix),
                                        Filter.by_property("path").like(path_prefix + "/*")]))
    if node_type is not None:
        if not isinstance(node_type, str):
            raise InvalidInput("node_type must be a string", details={"node_type": repr(node_type)})
        parts.append(Filter.by_property("nodeType").equal(node_type))
    pairs = []
    for name, value in (where or {}).items():
        if not isinstance(name, str):
            raise InvalidInput(f"property name {name!r} must be a str", details={"property": repr(name)})
        pair = property_pair(name, value)
        if pair is not None:
            pairs.append(pair)
    if pairs:
        parts.append(Filter.by_property("props").contains_all(pairs))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Filter.all_of(parts)
