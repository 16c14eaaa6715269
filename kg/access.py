"""Who may do what: the caller's identity, its grants, and the one function that decides.

Every use case receives an :class:`Actor` (through :class:`kg.context.UnitOfWork` or a read's
``caller``); :func:`authorize` is the only place that says yes or no. It is called by the
use-case layer (:mod:`kg.context` for every branch write and read, :mod:`kg.ops` for branch,
merge, repository, workspace and key administration), never by an adapter.

The rules:

- :data:`OPERATOR` (the CLI at the machine) and :data:`SYSTEM` (kg's own work) may do
  anything. ``anonymous`` may do anything too, and exists only while ``KG_AUTH`` is off: with
  auth on, a request without a valid key is refused before any use case runs
  (:class:`kg.errors.Unauthenticated`), and :mod:`kg.context` refuses an anonymous caller.
- A key (``kind="key"``) may do what one of its :class:`Grant` s allows, nothing else. A key
  with ``admin`` on repository ``*`` is an administrator: it may do anything, and manage keys.
- What a key cannot see at all answers :class:`kg.errors.NotFound`, as an unknown name would,
  so that existence does not leak: a repository no grant names, a branch no grant's globs
  match, a workspace no grant's workspace globs match. An action on something it can see but
  that no grant allows answers :class:`kg.errors.Forbidden`.
- Protected branches (``KG_PROTECTED_BRANCHES``, default ``main``): ``write``, ``merge`` and
  ``branch:delete`` (also reset) there need a grant that names the branch literally (``main``,
  not ``*`` nor ``m*``); reading needs nothing more than any other branch.
- Reserved repositories (:func:`reserved_repositories`: the RAG node's, ``KG_RAG_REPO``,
  default ``rag``): only a grant that names one literally (``repo=rag``, not ``*`` nor ``r*``)
  reaches it, on every route; to any other key it does not exist. Nobody creates one through
  the repository use case (:func:`authorize_new_repository`): the RAG node makes its own on its
  first call. Each collection of the RAG node is a workspace of that repository named by its
  class name (``rag_collection`` -> ``Ragcollection``), so a grant's workspace globs say whose
  collections are whose: ``repo=rag,branches=main,workspaces=Teama*,actions=read+write`` owns
  every collection whose class name starts with ``Teama``, and no other.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any, Literal

from sqlalchemy.orm import Session

from kg.errors import Forbidden, InvalidInput, NotFound, Unauthenticated
from kg.settings import Settings
from kg.store import keys as key_store
from kg.store.db import Database
from kg.store.keys import KeyRecord
from kg.store.models import ApiKey, utcnow

log = logging.getLogger("kg.access")

ActorKind = Literal["anonymous", "operator", "system", "key"]
Action = Literal["read", "write", "branch:create", "branch:delete", "merge", "admin"]

#: Every action a grant may hold.
ACTIONS: tuple[str, ...] = ("read", "write", "branch:create", "branch:delete", "merge", "admin")
#: Actions that a protected branch allows only to a grant naming it literally.
PROTECTED_ACTIONS = frozenset({"write", "merge", "branch:delete"})
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class Grant:
    """What a key may do where.

    Attributes
    ----------
    repo : str
        A repository name, or a glob (``*``: every repository).
    branches : tuple of str
        Branch globs (``agent/*``; ``*`` matches ``/`` too).
    workspaces : tuple of str
        Workspace names or globs.
    actions : frozenset of str
        A subset of :data:`ACTIONS`.
    """

    repo: str
    branches: tuple[str, ...] = ("*",)
    workspaces: tuple[str, ...] = ("*",)
    actions: frozenset[str] = field(default_factory=lambda: frozenset({"read"}))

    def covers_repo(self, repo: str, *, literal: bool = False) -> bool:
        """Whether this grant names ``repo``.

        Parameters
        ----------
        repo : str
            A repository name.
        literal : bool
            Only a grant whose repository is ``repo`` itself counts (reserved repositories).

        Returns
        -------
        bool
        """
        if literal:
            return self.repo == repo
        return fnmatchcase(repo, self.repo)

    def covers_branch(self, branch: str, *, literal: bool = False) -> bool:
        """Whether one of the branch globs matches ``branch``.

        Parameters
        ----------
        branch : str
            A branch name.
        literal : bool
            Only a glob that is the branch's own name counts (protected branches).

        Returns
        -------
        bool
        """
        if literal:
            return branch in self.branches
        return any(fnmatchcase(branch, glob) for glob in self.branches)

    def covers_workspace(self, workspace: str) -> bool:
        """Whether one of the workspace globs matches ``workspace``.

        Parameters
        ----------
        workspace : str
            A workspace name.

        Returns
        -------
        bool
        """
        return any(fnmatchcase(workspace, glob) for glob in self.workspaces)

    @property
    def everywhere(self) -> bool:
        """``*`` for the repository, the branches and the workspaces (worth a warning)."""
        return self.repo == "*" and "*" in self.branches and "*" in self.workspaces

    def as_dict(self) -> dict[str, object]:
        """The stored and answered shape.

        Returns
        -------
        dict
            ``{"repo", "branches", "workspaces", "actions"}`` (actions in :data:`ACTIONS` order).
        """
        return {"repo": self.repo, "branches": list(self.branches), "workspaces": list(self.workspaces),
                "actions": [a for a in ACTIONS if a in self.actions]}


def make_grant(repo: str, branches: Iterable[str] = ("*",), workspaces: Iterable[str] = ("*",),
               actions: Iterable[str] = ("read",)) -> Grant:
    """A checked :class:`Grant`.

    Parameters
    ----------
    repo : str
        Repository name or glob.
    branches, workspaces : iterable of str
        Globs; at least one each.
    actions : iterable of str
        At least one of :data:`ACTIONS`.

    Returns
    -------
    Grant

    Raises
    ------
    kg.errors.InvalidInput
        An empty or over-long pattern, no action, or an unknown one.
    """
    branch_globs, workspace_globs, wanted = tuple(branches), tuple(workspaces), frozenset(actions)
    for what, values in (("repo", (repo,)), ("branches", branch_globs), ("workspaces", workspace_globs)):
        if not values or any(not isinstance(v, str) or not v.strip() or len(v) > 255 for v in values):
            raise InvalidInput(f"grant {what}: give one or more non-empty names or globs (255 characters at most)",
                               details={"field": what})
    unknown = sorted(wanted - set(ACTIONS))
    if not wanted or unknown:
        raise InvalidInput(f"grant actions: {', '.join(unknown) or 'none given'}; known: {', '.join(ACTIONS)}",
                           details={"field": "actions", "known": list(ACTIONS)})
    return Grant(repo, branch_globs, workspace_globs, wanted)


def parse_grant(text: str) -> Grant:
    """A grant written as the CLI takes it: ``repo=*,branches=agent/*,actions=read+write``.

    ``branches`` and ``workspaces`` list several globs with ``+`` (default ``*``); ``actions``
    too (default ``read``).

    Parameters
    ----------
    text : str
        ``key=value`` pairs separated by ``,``; keys ``repo`` (required), ``branches``,
        ``workspaces``, ``actions``.

    Returns
    -------
    Grant

    Raises
    ------
    kg.errors.InvalidInput
        An unknown key, a missing ``repo``, or what :func:`make_grant` refuses.
    """
    fields: dict[str, list[str]] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("repo", "branches", "workspaces", "actions"):
            raise InvalidInput(f"grant {text!r}: expected repo=...,branches=...,workspaces=...,actions=a+b")
        fields[key] = [v.strip() for v in value.split("+")]
    if "repo" not in fields or len(fields["repo"]) != 1:
        raise InvalidInput(f"grant {text!r}: name one repository (repo=NAME or repo=*)")
    return make_grant(fields["repo"][0], fields.get("branches", ["*"]), fields.get("workspaces", ["*"]),
                      fields.get("actions", ["read"]))


def warn_if_everywhere(grants: Sequence[Grant], key_name: str) -> list[str]:
    """Log (and return) a warning for each grant that is ``*`` everywhere.

    Parameters
    ----------
    grants : sequence of Grant
        A key's grants.
    key_name : str
        The key, for the message.

    Returns
    -------
    list of str
        One warning per such grant (empty: none).
    """
    warnings = [f"key {key_name!r}: a grant on repo=* with branches=* and workspaces=* "
                f"({'+'.join(a for a in ACTIONS if a in g.actions)}) reaches everything, present and future"
                + ("" if "admin" in g.actions else " (but the reserved repositories, which need a grant naming them)")
                for g in grants if g.everywhere]
    for warning in warnings:
        log.warning("%s", warning)
    return warnings


@dataclass(frozen=True)
class Actor:
    """Who calls a use case.

    Attributes
    ----------
    kind : {"anonymous", "operator", "system", "key"}
        ``anonymous``: an HTTP caller while ``KG_AUTH`` is off; ``operator``: the person at the
        machine, through the CLI; ``system``: kg's own background work (the indexer,
        re-embedding, the function-job runner); ``key``: the holder of an API key.
    name : str or None
        Recorded as a revision's ``actor`` (a key's name, forced for a non-admin key).
    key_id : str or None
        The API key's id (``kind="key"`` only).
    grants : tuple of Grant
        What the key may do (``kind="key"`` only; the other kinds may do anything).
    protected : tuple of str
        Protected branch names or globs (``KG_PROTECTED_BRANCHES``), for a key.
    reserved : tuple of str
        Reserved repository names (:func:`reserved_repositories`), for a key: only a grant
        naming one literally reaches it.
    """

    kind: ActorKind
    name: str | None = None
    key_id: str | None = None
    grants: tuple[Grant, ...] = ()
    protected: tuple[str, ...] = ("main",)
    reserved: tuple[str, ...] = ("rag",)

    @property
    def unrestricted(self) -> bool:
        """The operator, kg's own work, an anonymous caller (auth off) or an admin key."""
        return self.kind != "key" or self.is_admin

    @property
    def is_admin(self) -> bool:
        """A key with ``admin`` on repository ``*``, or any caller that is not a key."""
        return self.kind != "key" or any(g.repo == "*" and "admin" in g.actions for g in self.grants)

    def grants_on(self, repo: str) -> list[Grant]:
        """The grants that reach ``repo``: the one place the reserved-repository rule is applied.

        Parameters
        ----------
        repo : str
            A repository name.

        Returns
        -------
        list of Grant
            Those whose repository glob matches ``repo``; for a reserved repository (``reserved``),
            only those that name it literally (``repo=rag``, not ``*`` nor ``r*``).
        """
        literal = repo in self.reserved
        return [g for g in self.grants if g.covers_repo(repo, literal=literal)]


#: An HTTP caller while ``KG_AUTH`` is off.
ANONYMOUS = Actor("anonymous")
#: The person running the CLI on the machine that holds the data.
OPERATOR = Actor("operator")
#: kg's own background work.
SYSTEM = Actor("system")


def is_protected(actor: Actor, branch: str) -> bool:
    """Whether ``branch`` is protected for ``actor``.

    Parameters
    ----------
    actor : Actor
        The caller (its ``protected`` globs).
    branch : str
        A branch name.

    Returns
    -------
    bool
    """
    return any(fnmatchcase(branch, glob) for glob in actor.protected)


def reserved_repositories(settings: Settings) -> tuple[str, ...]:
    """The repositories kg keeps for its own use: the RAG node's (``KG_RAG_REPO``).

    Parameters
    ----------
    settings : Settings
        The process's settings.

    Returns
    -------
    tuple of str
        Repository names; a key reaches one only through a grant naming it literally, and
        nobody creates one through :func:`authorize_new_repository`.
    """
    return (settings.rag_repo,)


def can_see(actor: Actor, repo: str, branch: str | None = None, workspace: str | None = None) -> bool:
    """Whether ``actor`` may know that ``repo`` (its ``branch``, its ``workspace``) exists.

    Parameters
    ----------
    actor : Actor
        The caller.
    repo : str
        The repository.
    branch, workspace : str or None
        Also the branch, the workspace (None: not asked).

    Returns
    -------
    bool
        True when one grant covers all that was asked (with any action); for a reserved
        repository, only a grant naming it literally counts.
    """
    if actor.unrestricted:
        return True
    return any((branch is None or g.covers_branch(branch)) and (workspace is None or g.covers_workspace(workspace))
               for g in actor.grants_on(repo))


def may_somewhere(actor: Actor, action: Action, repo: str) -> bool:
    """Whether one of ``actor``'s grants allows ``action`` on some branch of ``repo``.

    What an adapter offers a caller (the MCP server lists write tools only to a key that may
    write somewhere in the repository); it decides nothing: every use case still asks
    :func:`authorize` for the branch and workspace it acts on.

    Parameters
    ----------
    actor : Actor
        The caller.
    action : str
        One of :data:`ACTIONS`.
    repo : str
        The repository.

    Returns
    -------
    bool
        True for an unrestricted caller, or when a grant covering ``repo`` holds ``action``.

    Examples
    --------
    >>> agent = Actor("key", "a", "0" * 16, (make_grant("r", ["agent/*"], ["*"], ["read", "write"]),))
    >>> may_somewhere(agent, "write", "r"), may_somewhere(agent, "merge", "r")
    (True, False)
    """
    return actor.unrestricted or any(action in g.actions and g.covers_repo(repo) for g in actor.grants)


def readable_workspaces(actor: Actor, repo: str, branch: str, workspaces: Iterable[str]) -> frozenset[str] | None:
    """The workspaces of ``repo`` that ``actor`` may read on ``branch``.

    Retrieval is scoped to them inside its queries (:attr:`kg.store.repos.BranchView.readable`):
    a search, a walk or a log on the branch never reads the others, so nothing about them
    (content, counts, scores, ``truncated``) reaches the caller.

    Parameters
    ----------
    actor : Actor
        The caller.
    repo, branch : str
        The repository and the branch read.
    workspaces : iterable of str
        Every workspace of the repository.

    Returns
    -------
    frozenset of str or None
        The names among ``workspaces`` a grant with ``read`` covers (with the repository and
        the branch); None for an unrestricted caller, or when every workspace is readable.

    Examples
    --------
    >>> agent = Actor("key", "a", "0" * 16, (make_grant("r", ["agent/*"], ["notes"], ["read"]),))
    >>> sorted(readable_workspaces(agent, "r", "agent/x", ["docs", "notes"]))
    ['notes']
    """
    if actor.unrestricted:
        return None
    names = list(workspaces)
    covering = [g for g in actor.grants_on(repo) if "read" in g.actions and g.covers_branch(branch)]
    readable = frozenset(n for n in names if any(g.covers_workspace(n) for g in covering))
    return None if len(readable) == len(set(names)) else readable


def authorize_monitoring(actor: Actor, *, auth: bool, client_host: str | None) -> None:
    """Decide whether ``actor``, calling from ``client_host``, may read the process's metrics.

    With ``KG_AUTH`` on (``auth``): an admin key (admin on repository ``*``) only. With it off:
    a client on a loopback address only (the server listens on loopback then; a proxy in front
    of it, or a test client with no address, is refused), whoever it says it is.

    Parameters
    ----------
    actor : Actor
        The caller.
    auth : bool
        ``Settings.auth``.
    client_host : str or None
        The client's address as the transport saw it (None: unknown).

    Raises
    ------
    kg.errors.Unauthenticated
        An anonymous caller while ``auth`` is on.
    kg.errors.Forbidden
        A key that is not an admin (auth on); a client not on loopback (auth off).
    """
    if auth:
        if actor.kind == "anonymous":
            raise Unauthenticated("the metrics need an admin key (Authorization: Bearer kg_...)")
        if not actor.is_admin:
            raise Forbidden("only an admin key (admin on repo=*) may read the metrics", details={"action": "admin"})
        return
    try:
        loopback = client_host is not None and ipaddress.ip_address(client_host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Forbidden("the metrics are served to loopback clients only while KG_AUTH is off",
                        details={"client": client_host})


def authorize(actor: Actor, action: Action, repo: str, branch: str | None = None,
              workspace: str | None = None) -> None:
    """Decide whether ``actor`` may do ``action`` on ``repo`` (its ``branch``, its ``workspace``).

    Parameters
    ----------
    actor : Actor
        The caller.
    action : {"read", "write", "branch:create", "branch:delete", "merge", "admin"}
        What it wants to do. ``branch:create`` is asked with the *new* branch's name.
    repo : str
        The repository.
    branch : str or None
        The branch acted on (None: the repository as a whole).
    workspace : str or None
        The workspace acted on (None: not one in particular).

    Raises
    ------
    kg.errors.NotFound
        ``actor`` cannot see the repository, the branch or the workspace at all (the answer an
        unknown name gets). Never for ``branch:create``, whose branch does not exist yet. A
        reserved repository (:func:`reserved_repositories`) is seen only through a grant
        naming it literally: ``repo=*`` does not reach it.
    kg.errors.Forbidden
        It can see them, but no grant allows ``action`` there (for a protected branch and
        ``write``, ``merge`` or ``branch:delete``: no grant naming the branch literally).

    Notes
    -----
    O(number of grants x globs); no I/O.
    """
    if actor.unrestricted:
        return
    if not can_see(actor, repo):
        raise NotFound(f"repository {repo!r} not found", details={"repo": repo})
    if branch is not None and action != "branch:create" and not can_see(actor, repo, branch):
        raise NotFound(f"branch {branch!r} not found in {repo!r}", details={"repo": repo, "branch": branch})
    if workspace is not None and not can_see(actor, repo, branch if action != "branch:create" else None, workspace):
        raise NotFound(f"workspace {workspace!r} not found in {repo!r}",
                       details={"repo": repo, "workspace": workspace})
    literal = branch is not None and action in PROTECTED_ACTIONS and is_protected(actor, branch)
    for g in actor.grants_on(repo):
        if (action in g.actions
                and (branch is None or g.covers_branch(branch, literal=literal))
                and (workspace is None or g.covers_workspace(workspace))):
            return
    where = f"{repo!r}" + (f" branch {branch!r}" if branch is not None else "") + \
        (f" workspace {workspace!r}" if workspace is not None else "")
    reason = " (a protected branch: it needs a grant naming it)" if literal else ""
    raise Forbidden(f"key {actor.name!r} may not {action} on {where}{reason}",
                    details={"action": action, "repo": repo, "branch": branch, "workspace": workspace})


def refuse_reserved_workspace(repo: str, name: str, reserved: Sequence[str]) -> None:
    """Refuse to make workspace ``name`` in a reserved repository: the RAG node's collections
    are its workspaces, made by the node (``POST /api/rag``) alone.

    Parameters
    ----------
    repo, name : str
        The repository and the new workspace's name.
    reserved : sequence of str
        The reserved names (:func:`reserved_repositories`).

    Raises
    ------
    kg.errors.InvalidInput
        ``repo`` is reserved: refused to every caller (operator and administrators too), as
        the repository itself is (:func:`authorize_new_repository`).
    """
    if repo in reserved:
        raise InvalidInput(f"repository {repo!r} is reserved for the RAG node (KG_RAG_REPO): its workspaces are "
                           f"the node's collections, made by POST /api/rag (not workspace {name!r})",
                           details={"repo": repo, "workspace": name})


def authorize_new_repository(actor: Actor, name: str, reserved: Sequence[str]) -> None:
    """Decide whether ``actor`` may create the repository ``name`` through the repository use case.

    Parameters
    ----------
    actor : Actor
        The caller.
    name : str
        The new repository's name.
    reserved : sequence of str
        The reserved names (:func:`reserved_repositories`); the RAG node makes its own
        repository itself, never through this use case.

    Raises
    ------
    kg.errors.InvalidInput
        ``name`` is reserved: refused to every caller (operator and administrators too), so
        that nobody squats the RAG node's repository before its first call.
    kg.errors.Forbidden
        A key without ``admin`` on a repository glob matching ``name`` (never NotFound: there
        is nothing to hide about a name the key may not create).
    """
    if name in reserved:
        raise InvalidInput(f"repository name {name!r} is reserved for the RAG node (KG_RAG_REPO): "
                           f"its collections are made by POST /api/rag", details={"repo": name})
    try:
        authorize(actor, "admin", name)
    except NotFound as exc:
        raise Forbidden(f"key {actor.name!r} may not create repository {name!r}",
                        details={"action": "admin", "repo": name}) from exc


def authorize_new_workspace(actor: Actor, repo: str, name: str) -> None:
    """Decide whether ``actor`` may create the workspace ``name`` in ``repo``.

    Decided from the grants alone, before the store is asked whether ``name`` exists: a name
    outside every ``admin`` grant's workspace globs is refused the same way whether it is free
    or taken by a workspace the key cannot see, so the answer tells them apart no more than it
    tells anything else (a 403, never the 409 an existing name would earn).

    Parameters
    ----------
    actor : Actor
        The caller.
    repo : str
        The repository.
    name : str
        The new workspace's name.

    Raises
    ------
    kg.errors.NotFound
        ``actor`` cannot see ``repo``.
    kg.errors.Forbidden
        No grant holding ``admin`` on ``repo`` has a workspace glob matching ``name``.

    Examples
    --------
    >>> team = Actor("key", "t", "0" * 16, (make_grant("r", ["*"], ["team-*"], ["read", "admin"]),))
    >>> authorize_new_workspace(team, "r", "team-notes")
    >>> authorize_new_workspace(team, "r", "finance")
    Traceback (most recent call last):
    ...
    kg.errors.Forbidden: key 't' may not create workspace 'finance' in 'r': outside its grants' workspaces
    """
    authorize(actor, "admin", repo)
    if actor.unrestricted or any("admin" in g.actions and g.covers_workspace(name) for g in actor.grants_on(repo)):
        return
    raise Forbidden(f"key {actor.name!r} may not create workspace {name!r} in {repo!r}: outside its grants' "
                    "workspaces", details={"action": "admin", "repo": repo, "workspace": name})


def authorize_whole_repository(actor: Actor, action: Action, repo: str, workspaces: Iterable[str],
                               branches: Iterable[str]) -> None:
    """Decide whether ``actor`` may do ``action`` on ``repo`` as a whole (delete it): every one of
    its workspaces and branches must be covered by a grant holding ``action``.

    A grant scoped to some workspaces (or branches) administers those, not the repository that
    also holds others it cannot see.

    Parameters
    ----------
    actor : Actor
        The caller.
    action : str
        One of :data:`ACTIONS` (``admin`` to delete the repository).
    repo : str
        The repository.
    workspaces, branches : iterable of str
        Every workspace and every branch of ``repo``.

    Raises
    ------
    kg.errors.NotFound
        ``actor`` cannot see ``repo``.
    kg.errors.Forbidden
        No grant allows ``action`` on ``repo``, or some workspace or branch is outside the globs
        of every grant that does (the message names none of them).
    """
    authorize(actor, action, repo)
    if actor.unrestricted:
        return
    holding = [g for g in actor.grants_on(repo) if action in g.actions]
    uncovered_ws = any(not any(g.covers_workspace(w) for g in holding) for w in workspaces)
    uncovered_br = any(not any(g.covers_branch(b) for g in holding) for b in branches)
    if uncovered_ws or uncovered_br:
        raise Forbidden(f"key {actor.name!r} may not {action} repository {repo!r} as a whole: it holds "
                        f"{'workspaces' if uncovered_ws else 'branches'} outside this key's grants",
                        details={"action": action, "repo": repo})


def authorize_actor_name(actor: Actor, repo: str, stated: str | None) -> str | None:
    """The ``actor`` a revision records: what the caller stated, if it may state it.

    Parameters
    ----------
    actor : Actor
        The caller.
    repo : str
        The repository written.
    stated : str or None
        The ``actor`` the request named.

    Returns
    -------
    str or None
        ``stated`` (or the caller's name when it stated none); a non-admin key's own name.

    Raises
    ------
    kg.errors.Forbidden
        A key without ``admin`` on ``repo`` named another actor than itself.
    """
    if stated is None or stated == actor.name or actor.unrestricted:
        return stated if stated is not None else actor.name
    if any("admin" in g.actions for g in actor.grants_on(repo)):
        return stated
    raise Forbidden(f"key {actor.name!r} may not record another actor ({stated!r}); only admins may",
                    details={"actor": stated})


# -- keys: tokens, hashes, authentication -----------------------------------------------------

_TOKEN = re.compile(r"^kg_([0-9a-f]{16})_([A-Za-z0-9_-]{20,128})$")


def new_token() -> tuple[str, str, str]:
    """A fresh key: its id, its secret and the token ``kg_<id>_<secret>`` shown once.

    Returns
    -------
    (str, str, str)
        The id (16 hexadecimal digits), the secret (``secrets.token_urlsafe(32)``, 43
        characters) and the token.
    """
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    return key_id, secret, f"kg_{key_id}_{secret}"


def pepper_of(settings: Settings) -> bytes:
    """The server's pepper (``KG_KEY_PEPPER``).

    Parameters
    ----------
    settings : Settings
        The process's settings.

    Returns
    -------
    bytes
        The pepper, UTF-8.

    Raises
    ------
    kg.errors.InvalidInput
        No pepper is configured.
    """
    if settings.key_pepper is None or not settings.key_pepper.get_secret_value().strip():
        raise InvalidInput("API keys need KG_KEY_PEPPER (a long random secret kept by the server)",
                           details={"setting": "KG_KEY_PEPPER"})
    return settings.key_pepper.get_secret_value().encode()


def hash_secret(pepper: bytes, key_id: str, secret: str) -> str:
    """The stored form of a key's secret: HMAC-SHA256 under the pepper, of ``<id>:<secret>``.

    Parameters
    ----------
    pepper : bytes
        The server's pepper (:func:`pepper_of`).
    key_id, secret : str
        The two parts of the token.

    Returns
    -------
    str
        64 hexadecimal digits.
    """
    return hmac.new(pepper, f"{key_id}:{secret}".encode(), hashlib.sha256).hexdigest()


def grants_of(rows: Sequence[dict[str, Any]]) -> tuple[Grant, ...]:
    """Grants from their stored dicts.

    Parameters
    ----------
    rows : sequence of dict
        ``{"repo", "branches", "workspaces", "actions"}`` each.

    Returns
    -------
    tuple of Grant
    """
    return tuple(Grant(r["repo"], tuple(r["branches"]), tuple(r["workspaces"]), frozenset(r["actions"]))
                 for r in rows)


def key_state(key: ApiKey | KeyRecord, now: datetime) -> str:
    """``active``, ``revoked`` or ``expired``.

    Parameters
    ----------
    key : ApiKey or kg.store.keys.KeyRecord
        The stored key.
    now : datetime
        The time to judge at, UTC.

    Returns
    -------
    str
    """
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "active"


def key_actor(session: Session, settings: Settings, key_id: str) -> Actor:
    """The caller a stored key is, as of now (a function job runs as the key that submitted it).

    Parameters
    ----------
    session : Session
        An open session.
    settings : Settings
        For the protected branches.
    key_id : str
        The key's id.

    Returns
    -------
    Actor
        ``kind="key"`` with its grants; a revoked, expired or deleted key has none (it can do
        nothing, see nothing).
    """
    key = key_store.read_key(session, key_id)
    if key is None:
        return Actor("key", None, key_id, (), settings.protected(), reserved_repositories(settings))
    grants = grants_of(key.grants) if key_state(key, utcnow()) == "active" else ()
    return Actor("key", key.name, key_id, grants, settings.protected(), reserved_repositories(settings))


class KeyCache:
    """Keys authenticated in the last ``ttl_s`` seconds, so that a request does not read its key.

    An entry holds the key's stored hash and its caller; a hit still compares the presented
    secret's hash with it in constant time. It lives until ``ttl_s`` has passed or the key
    expires, whichever is first; :meth:`forget` drops a key at once (a revocation in this
    process). Another process sees a revocation within ``ttl_s`` (``KG_KEY_CACHE_S``).

    Parameters
    ----------
    ttl_s : float
        Seconds an entry is trusted (0: nothing is kept; every request reads its key).
    max_keys : int
        Most keys held; the oldest entry goes first.
    clock : callable() -> float
        A monotonic clock in seconds (tests inject one).
    """

    def __init__(self, ttl_s: float, *, max_keys: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self._clock = clock
        self._entries: dict[str, tuple[str, Actor, float]] = {}
        self._lock = threading.Lock()

    def get(self, key_id: str, presented_hash: str) -> Actor | None:
        """The cached caller of ``key_id`` if the presented secret's hash matches and the entry
        is still trusted.

        Parameters
        ----------
        key_id : str
        presented_hash : str
            :func:`hash_secret` of the presented secret.

        Returns
        -------
        Actor or None
            None: not cached, stale, or a different secret (the caller then reads the key).
        """
        with self._lock:
            entry = self._entries.get(key_id)
            if entry is not None and self._clock() >= entry[2]:
                del self._entries[key_id]
                entry = None
        if entry is None or not hmac.compare_digest(entry[0], presented_hash):
            return None
        return entry[1]

    def put(self, key_id: str, secret_hash: str, actor: Actor, expires_at: datetime | None, now: datetime) -> None:
        """Trust ``actor`` for ``key_id`` for ``ttl_s`` seconds, or until the key expires.

        Parameters
        ----------
        key_id, secret_hash : str
            The key and its stored hash.
        actor : Actor
            Its caller.
        expires_at : datetime or None
            When the key expires (UTC).
        now : datetime
            The present (UTC), to turn ``expires_at`` into monotonic time.
        """
        if self.ttl_s <= 0:
            return
        lifetime = self.ttl_s if expires_at is None else min(self.ttl_s, (expires_at - now).total_seconds())
        if lifetime <= 0:
            return
        with self._lock:
            self._entries.pop(key_id, None)
            while len(self._entries) >= self.max_keys:
                del self._entries[next(iter(self._entries))]
            self._entries[key_id] = (secret_hash, actor, self._clock() + lifetime)

    def forget(self, key_id: str) -> None:
        """Drop ``key_id`` (revoked in this process: refused from the next request).

        Parameters
        ----------
        key_id : str
        """
        with self._lock:
            self._entries.pop(key_id, None)


def authenticate(db: Database, settings: Settings, token: str, cache: KeyCache | None = None) -> Actor:
    """The caller a bearer token identifies, checked in constant time against the stored hash.

    Writes ``last_used_at`` when the one stored is older than ``KG_KEY_TOUCH_S``. Reads the key
    and its grants (one query on a plain connection, :func:`kg.store.keys.read_key`) unless
    ``cache`` trusts it still: a revocation holds from the key's next request in the process
    that revoked it, and within the cache's ``ttl_s`` (``KG_KEY_CACHE_S``) in every other
    process that shares the database (``tests/e2e/test_revocation.py``); an expiry holds on
    time everywhere.

    Parameters
    ----------
    db : Database
        The store.
    settings : Settings
        The pepper, the protected branches and how often ``last_used_at`` is written.
    token : str
        ``kg_<id>_<secret>``.
    cache : KeyCache or None
        Recently authenticated keys (None: read the key every time).

    Returns
    -------
    Actor
        ``kind="key"``, named after the key, with its grants.

    Raises
    ------
    kg.errors.Unauthenticated
        A token that is malformed, unknown, wrong, revoked or expired (one message for all but
        the last two, so that a guess learns nothing), or no pepper configured.
    """
    match = _TOKEN.match(token.strip())
    if settings.key_pepper is None or not settings.key_pepper.get_secret_value().strip():
        raise Unauthenticated("API keys are not set up on this server (KG_KEY_PEPPER is unset)")
    pepper = pepper_of(settings)
    key_id, secret = match.groups() if match else ("0" * 16, "x" * 43)
    presented = hash_secret(pepper, key_id, secret)
    if cache is not None and match:
        cached = cache.get(key_id, presented)
        if cached is not None:
            return cached
    with db.read_connection() as connection:
        key = key_store.read_key(connection, key_id) if match else None
    expected = key.secret_hash if key is not None else hash_secret(pepper, key_id, "-" + secret)
    if not hmac.compare_digest(expected, presented) or key is None:
        raise Unauthenticated("invalid API key")
    now = utcnow()
    state = key_state(key, now)
    if state != "active":
        raise Unauthenticated(f"API key {key.name!r} is {state}", details={"state": state})
    stale = key.last_used_at is None or key.last_used_at < now - timedelta(seconds=settings.key_touch_s)
    actor = Actor("key", key.name, key.id, grants_of(key.grants), settings.protected(),
                  reserved_repositories(settings))
    if cache is not None:
        cache.put(key.id, key.secret_hash, actor, key.expires_at, now)
    if stale:
        with db.write() as session:
            key_store.touch_key(session, key_id, at=now, before=now - timedelta(seconds=settings.key_touch_s))
    return actor


def _session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_console_session(db: Database, settings: Settings, token: str,
                         cache: KeyCache | None = None) -> tuple[str, Actor]:
    """Sign in to the review console with an API key: a new session, its random id for the
    cookie, and the caller. The token is checked as :func:`authenticate` does and is not kept:
    the session stores the SHA-256 of its id and the key's id, never the secret.

    Parameters
    ----------
    db : Database
        The store.
    settings : Settings
        The pepper, and ``ui_session_s`` (how long the session lasts).
    token : str
        ``kg_<id>_<secret>``.
    cache : KeyCache or None
        As :func:`authenticate`.

    Returns
    -------
    tuple of (str, Actor)
        The session id (32 random bytes, URL-safe) and the key's caller.

    Raises
    ------
    kg.errors.Unauthenticated
        As :func:`authenticate`.
    """
    actor = authenticate(db, settings, token, cache)
    session_id = secrets.token_urlsafe(32)
    now = utcnow()
    assert actor.key_id is not None
    with db.write() as session:
        key_store.add_console_session(session, _session_hash(session_id), actor.key_id, at=now,
                                      expires_at=now + timedelta(seconds=settings.ui_session_s))
    return session_id, actor


def console_session_actor(db: Database, settings: Settings, session_id: str) -> Actor:
    """The caller of an open console session, as its key is now (one read: the session joined
    to nothing, then the key as :func:`key_actor` reads it).

    Parameters
    ----------
    db : Database
        The store.
    settings : Settings
        For the protected branches and reserved repositories.
    session_id : str
        The id the cookie carries.

    Returns
    -------
    Actor

    Raises
    ------
    kg.errors.Unauthenticated
        An unknown, expired or ended session (signed out), or one whose key is revoked,
        expired or deleted.
    """
    now = utcnow()
    with db.read_connection() as connection:
        key_id = key_store.console_session_key(connection, _session_hash(session_id), now)
        key = key_store.read_key(connection, key_id) if key_id is not None else None
    if key_id is None:
        raise Unauthenticated("the console session has ended (signed out or expired)")
    if key is None:
        raise Unauthenticated("the key of this console session no longer exists")
    state = key_state(key, now)
    if state != "active":
        raise Unauthenticated(f"API key {key.name!r} is {state}", details={"state": state})
    return Actor("key", key.name, key.id, grants_of(key.grants), settings.protected(),
                 reserved_repositories(settings))


def end_console_session(db: Database, session_id: str) -> bool:
    """Sign out: end the console session, for every copy of its cookie.

    Parameters
    ----------
    db : Database
        The store.
    session_id : str
        The id the cookie carries.

    Returns
    -------
    bool
        Whether an open session was ended.
    """
    with db.write() as session:
        return key_store.end_console_session(session, _session_hash(session_id), at=utcnow())
