"""Node paths and names: validation and splitting. Pure functions."""

from __future__ import annotations

import re
import unicodedata

from kg.errors import InvalidInput

MAX_PATH_CHARS = 1024
MAX_SEGMENT_CHARS = 255
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/\-]{0,254}$")

#: The longest name of each kind (the store's columns: 128 for a repository or workspace).
MAX_NAME_CHARS = {"repository": 128, "workspace": 128, "branch": 255}

# JSON-schema patterns (ECMA-262 and Python alike, no look-around) of what the validators below
# accept, for the HTTP API's OpenAPI document. Each describes a subset of what its validator
# accepts (every string a pattern matches is accepted), the part a client should produce.
#: A repository or workspace name (:func:`validate_name`), with ``maxLength`` 128.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]*$"
_BRANCH_SEGMENT = r"[A-Za-z0-9](?:[A-Za-z0-9._\-]*[A-Za-z0-9_\-])?"
#: A branch name (:func:`validate_name`): segments joined by ``/``, none ``.``/``..``, none ending
#: with ``.``, with ``maxLength`` 255 (a last segment ``diff``, ``merge`` or ``reset`` after a ``/``
#: is refused as well: a pattern without look-around cannot say it).
BRANCH_PATTERN = rf"^{_BRANCH_SEGMENT}(?:/{_BRANCH_SEGMENT})*$"
_PATH_CHAR = r"[A-Za-z0-9._~!$&'()*+,;=:@\-]"
_PATH_SEGMENT = rf"[A-Za-z0-9_~!$&'()*+,;=:@\-]{_PATH_CHAR}{{0,{MAX_SEGMENT_CHARS - 1}}}"
#: A node path without its leading ``/`` (the ``{path}`` of a URL; :func:`validate_path`):
#: printable ASCII segments of at most 255 characters, none empty or starting with ``.``, with
#: ``maxLength`` 1023.
PATH_TAIL_PATTERN = rf"^{_PATH_SEGMENT}(?:/{_PATH_SEGMENT})*$"
#: A node path (:func:`validate_path`), with ``maxLength`` :data:`MAX_PATH_CHARS`.
PATH_PATTERN = rf"^/{_PATH_SEGMENT}(?:/{_PATH_SEGMENT})*$"
#: A node address ``workspace:/path`` (:func:`parse_address`).
ADDRESS_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._\-]*:/{_PATH_SEGMENT}(?:/{_PATH_SEGMENT})*$"
#: A path prefix (:func:`validate_prefix`): ``/``, a node path, or a node path and ``/``, with
#: ``maxLength`` :data:`MAX_PATH_CHARS`.
PREFIX_PATTERN = rf"^/$|^/{_PATH_SEGMENT}(?:/{_PATH_SEGMENT})*/?$"
#: A character that is not blank: not one :meth:`str.strip` removes (:meth:`str.isspace`), and no NUL.
_VISIBLE = r"[^\x00\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
#: Text the store can hold that is not blank (``value.strip()`` leaves something).
NON_BLANK_PATTERN = rf"^[^\x00]*{_VISIBLE}[^\x00]*$"
#: Text the store can hold (no NUL: :func:`kg.text.storable.check_text`).
TEXT_PATTERN = r"^[^\x00]*$"
#: Text the store can hold that neither starts nor ends with a blank (``value == value.strip()``,
#: not empty).
TRIMMED_PATTERN = rf"^{_VISIBLE}(?:[^\x00]*{_VISIBLE})?$"


def validate_path(path: str) -> str:
    """Check a node path; return it in Unicode normal form C.

    A path starts with ``/`` and has no empty, ``.`` or ``..`` segment, no trailing ``/``, no
    control character, at most 1024 characters and 255 a segment; ``/`` is not a node path. Nodes
    are keyed by the NFC path, so NFC and NFD spellings of a name (``é``, or ``e`` and a combining
    accent) address one node.

    Raises
    ------
    kg.errors.InvalidInput
        With the reason and ``details={"path": path}``.

    Examples
    --------
    >>> validate_path("/entities/acme")
    '/entities/acme'
    >>> validate_path("/entities/acme\u0301") == "/entities/acm\u00e9"
    True
    >>> validate_path("/entities//acme")
    Traceback (most recent call last):
    ...
    kg.errors.InvalidInput: invalid path '/entities//acme': empty segment ('//')
    """
    def bad(reason: str) -> InvalidInput:
        return InvalidInput(f"invalid path {path!r}: {reason}", details={"path": path})

    if not isinstance(path, str) or not path:
        raise bad("a path is required")
    path = unicodedata.normalize("NFC", path)
    if not path.startswith("/"):
        raise bad("it must start with '/'")
    if path == "/":
        raise bad("the root '/' is not a node")
    if len(path) > MAX_PATH_CHARS:
        raise bad(f"longer than {MAX_PATH_CHARS} characters")
    if path.endswith("/"):
        raise bad("no trailing '/'")
    for segment in path[1:].split("/"):
        if segment == "":
            raise bad("empty segment ('//')")
        if segment in (".", ".."):
            raise bad("'.' and '..' segments are not allowed")
        if segment != segment.strip():
            raise bad("a segment may not start or end with whitespace")
        if len(segment) > MAX_SEGMENT_CHARS:
            raise bad(f"a segment is longer than {MAX_SEGMENT_CHARS} characters")
        # A printable segment has no character of the "Other" categories (str.isprintable):
        # only another one needs the check per character.
        if not segment.isprintable() and any(unicodedata.category(ch)[0] == "C" for ch in segment):
            raise bad("control characters are not allowed")
    return path


def validate_prefix(prefix: str) -> str:
    """Check a listing prefix: ``/``, or a valid path with or without a trailing ``/``; NFC.

    >>> validate_prefix("/entities/")
    '/entities/'

    Raises
    ------
    kg.errors.InvalidInput
        The prefix without its trailing ``/`` is not a valid path.
    """
    if prefix == "/":
        return prefix
    trailing = prefix.endswith("/") and len(prefix) > 1 if isinstance(prefix, str) else False
    return validate_path(prefix[:-1] if trailing else prefix) + ("/" if trailing else "")


#: How a path prefix matches: whole segments (the default) or as a plain string prefix.
PREFIX_MODES = ("segments", "raw")


def validate_prefix_mode(mode: str) -> str:
    """Check a prefix mode: ``"segments"`` (``/a`` is ``/a`` and what is under it, never ``/ab``) or
    ``"raw"`` (any path starting with the string).

    Raises
    ------
    kg.errors.InvalidInput
        Another value.
    """
    if mode not in PREFIX_MODES:
        raise InvalidInput("path prefix mode must be 'segments' or 'raw'", details={"path_prefix_mode": mode})
    return mode


def path_has_prefix(path: str, prefix: str, mode: str = "segments") -> bool:
    """Whether ``path`` is under ``prefix``: ``/`` (everything), a path (itself and its
    descendants, in ``segments`` mode) or a path with a trailing ``/`` (its descendants).

    >>> path_has_prefix("/answers/x", "/answers"), path_has_prefix("/answers-old", "/answers")
    (True, False)
    >>> path_has_prefix("/answers-old", "/answers", "raw")
    True
    """
    if prefix == "/" or mode == "raw" or prefix.endswith("/"):
        return path.startswith(prefix)
    return path == prefix or path.startswith(prefix + "/")


def parent_of(path: str) -> str:
    """The parent path (``/`` for a top-level node); ``path`` is not checked.

    >>> parent_of("/entities/acme"), parent_of("/entities")
    ('/entities', '/')
    """
    head = path.rsplit("/", 1)[0]
    return head or "/"


def name_of(path: str) -> str:
    """The last segment of a path: the node's name.

    >>> name_of("/entities/acme")
    'acme'
    """
    return path.rsplit("/", 1)[1]


def ancestors_of(path: str) -> list[str]:
    """The ancestor paths, shortest first, without ``/`` and ``path``.

    >>> ancestors_of("/a/b/c"), ancestors_of("/a")
    (['/a', '/a/b'], [])
    """
    parts = path[1:].split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def validate_name(kind: str, name: str) -> str:
    """Check a repository, workspace or branch name (``kind``): a letter or digit, then letters,
    digits, ``.``, ``_``, ``-`` and, in a branch, ``/``; at most :data:`MAX_NAME_CHARS` (128, 255
    for a branch).

    >>> validate_name("branch", "agent/rag-session-001")
    'agent/rag-session-001'
    >>> validate_name("workspace", "a/b")
    Traceback (most recent call last):
    ...
    kg.errors.InvalidInput: invalid workspace name 'a/b': '/' is not allowed

    Raises
    ------
    kg.errors.InvalidInput
        With the reason and ``details={kind: name}``.
    """
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS[kind]:
        raise InvalidInput(f"invalid {kind} name: longer than {MAX_NAME_CHARS[kind]} characters",
                           details={kind: name})
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidInput(
            f"invalid {kind} name {name!r}: use letters, digits, '.', '_', '-'"
            + (" and '/'" if kind == "branch" else ""),
            details={kind: name},
        )
    if kind != "branch" and "/" in name:
        raise InvalidInput(f"invalid {kind} name {name!r}: '/' is not allowed", details={kind: name})
    if kind == "branch" and name.rsplit("/", 1)[-1] in ("diff", "merge", "reset") and "/" in name:
        raise InvalidInput(f"invalid branch name {name!r}: a last segment 'diff', 'merge' or 'reset' "
                           "would clash with the branch routes", details={kind: name})
    if kind == "branch" and ("//" in name or name.endswith("/") or name.endswith(".")
                             or any(p in (".", "..") for p in name.split("/"))):
        raise InvalidInput(f"invalid branch name {name!r}", details={kind: name})
    return name


def parse_address(address: str, *, default_workspace: str | None = None) -> tuple[str, str]:
    """Split ``workspace:/path`` (a bare ``/path`` is in ``default_workspace``) into the workspace
    name (not checked to exist) and the valid NFC path.

    Raises
    ------
    kg.errors.InvalidInput
        No workspace given and no default, or a bad path.

    Examples
    --------
    >>> parse_address("knowledge:/entities/acme")
    ('knowledge', '/entities/acme')
    >>> parse_address("/entities/acme", default_workspace="knowledge")
    ('knowledge', '/entities/acme')
    """
    if not isinstance(address, str):
        raise InvalidInput("a node address is a string 'workspace:/path'")
    workspace, sep, path = address.partition(":")
    if not sep:
        if default_workspace is None:
            raise InvalidInput(
                f"invalid node address {address!r}: write it as 'workspace:/path'",
                details={"address": address},
            )
        workspace, path = default_workspace, address
    if not workspace:
        raise InvalidInput(f"invalid node address {address!r}: empty workspace")
    return workspace, validate_path(path)
