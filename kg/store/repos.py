"""Repositories, workspaces, branches, revisions and branch views."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, event, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased, object_session
from sqlalchemy.orm.attributes import set_committed_value

from kg.errors import Conflict, InvalidInput, NotFound
from kg.lru import LRUCache
from kg.store.driver import DriverStatement
from kg.store.models import (
    Branch,
    Chunk,
    IngestRecord,
    Merge,
    NodeVersion,
    RelationVersion,
    Repository,
    Revision,
    Workspace,
    utcnow,
)
from kg.store.paths import validate_name

MAIN = "main"
#: ``session.info`` key: repository id -> the highest chunk ``seq`` the session's read of its
#: view found (:meth:`ViewCache.view`), so an index catch-up in the same read knows there is
#: nothing above its watermark without asking (:func:`kg.indexing.chunks.sync_index`).
TOP_CHUNK_SEQ = "kg.top_chunk_seq"
#: Longest ``actor`` of a revision (its column is 255 characters).
MAX_ACTOR = 255


@dataclass(frozen=True)
class BranchView:
    """What one branch sees at one revision: ``chain``, the branch then its ancestors, nearest first,
    each ``(branch_id, max_revision)`` (an ancestor read as of the fork, docs/concepts/branches.md); ``workspaces``
    by id; ``readable``, the workspaces its reader may read (None: all), set from the caller's
    grants by :func:`kg.context.reading`: a node, chunk, endpoint or log entry elsewhere is not
    there for it.
    """

    repo: Repository
    branch: Branch
    revision: int
    chain: tuple[tuple[int, int], ...]
    workspaces: dict[int, str] = field(default_factory=dict, compare=False)
    readable: frozenset[int] | None = field(default=None, compare=False)
    #: Each workspace's ``config`` by id, when the view came from :class:`ViewCache` (which keys
    #: it on the layout: a config change bumps it, :func:`count_config_changes`); None: read
    #: them from the session.
    workspace_configs: dict[int, dict[str, Any]] | None = field(default=None, compare=False)

    def can_read(self, workspace_id: int) -> bool:
        """Whether this view's reader may read workspace ``workspace_id``."""
        return self.readable is None or workspace_id in self.readable

    def readable_ids(self) -> list[int]:
        """The workspace ids this view's reader may read, ascending."""
        return sorted(w for w in self.workspaces if self.can_read(w))

    def scoped(self, readable: frozenset[int] | None) -> BranchView:
        """This state for a reader of the workspace ids ``readable`` only (None: all)."""
        return replace(self, readable=readable)

    @property
    def cache_key(self) -> tuple[int, int | None, int]:
        """(branch id, base revision, effective revision): equal keys see equal content (a reset changes
        the base; ids never repeat).
        """
        return (self.branch.id, self.branch.base_revision, self.revision)


class WriteContext:
    """A write transaction's place on one branch; its revision is allocated by the first write.

    :func:`begin_write` holds the repository's row lock, so ``pending_revision`` (the number the
    revision will carry) is stable, and reads through ``view`` see this transaction's writes. The
    first access to :attr:`revision`, by a store function stamping a row, allocates the revision
    (counter, branch head, log entry): a transaction that writes nothing (an UNRELATE of no edge,
    a merge with nothing to apply) commits nothing and needs no rollback.
    """

    def __init__(self, session: Session, view: BranchView, pending_revision: int, *,
                 message: str | None = None, actor: str | None = None) -> None:
        self._session = session
        self.view = view
        self.pending_revision = pending_revision
        self._message = message
        self._actor = actor
        self._allocated: int | None = None

    @property
    def repo(self) -> Repository:
        """The repository written to."""
        return self.view.repo

    @property
    def branch(self) -> Branch:
        """The branch written to."""
        return self.view.branch

    @property
    def written(self) -> bool:
        return self._allocated is not None

    def retitle(self, message: str | None) -> None:
        """Set the revision's message, before anything is written.

        Raises
        ------
        RuntimeError
            The revision is allocated already.
        """
        if self._allocated is not None:
            raise RuntimeError("the revision is written: its message cannot change")
        self._message = message

    @property
    def revision(self) -> int:
        """The revision this transaction writes, allocated on first access (see the class); read
        :attr:`pending_revision` or :attr:`revision_if_written` not to allocate it.
        """
        if self._allocated is None:
            self._allocated = _allocate_revision(self._session, self.view, self.pending_revision,
                                                 message=self._message, actor=self._actor)
        return self._allocated

    @property
    def revision_if_written(self) -> int | None:
        return self._allocated


#: A revision's statements, built once (a small write's cost is its statements' making too).
_BUMP_HEAD = (update(Repository).where(Repository.id == bindparam("repo_id"))
              .values(head_revision=Repository.head_revision + 1).returning(Repository.head_revision))
_LOG_REVISION = insert(Revision.__table__)  # type: ignore[arg-type]
_MOVE_BRANCH = (update(Branch.__table__).where(Branch.__table__.c.id == bindparam("branch_id"))  # type: ignore[arg-type]
                .values(head_revision=bindparam("head")))


def _allocate_revision(session: Session, view: BranchView, expected: int, *, message: str | None,
                       actor: str | None) -> int:
    """Three Core statements: the counter, the log entry, the branch head (the ORM rows of the
    repository and branch set to what they wrote, as committed values: nothing left to flush)."""
    repo, branch = view.repo, view.branch
    connection = session.connection()
    number = connection.execute(_BUMP_HEAD, {"repo_id": repo.id}).scalar_one()
    if number != expected:  # the row lock of begin_write makes this impossible
        raise RuntimeError(f"revision {number} allocated where {expected} was locked for")
    connection.execute(_LOG_REVISION, {"repo_id": repo.id, "number": number, "branch_id": branch.id,
                                       "message": message, "actor": actor, "created_at": utcnow()})
    connection.execute(_MOVE_BRANCH, {"branch_id": branch.id, "head": number})
    set_committed_value(repo, "head_revision", number)
    set_committed_value(branch, "head_revision", number)
    return number


# -- repositories ---------------------------------------------------------------------------


def create_repository(session: Session, *, name: str) -> Repository:
    """Create a repository with its ``main`` branch, flushed (it has its id and uid).

    Raises
    ------
    kg.errors.Conflict
        A repository of that name exists.
    """
    validate_name("repository", name)
    if session.scalar(select(Repository.id).where(Repository.name == name)) is not None:
        raise Conflict(f"repository {name!r} exists already", details={"repo": name})
    repo = Repository(uid=str(uuid.uuid4()), name=name, head_revision=0, created_at=utcnow())
    session.add(repo)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"repository {name!r} exists already", details={"repo": name}) from exc
    session.add(Branch(repo_id=repo.id, name=MAIN, parent_id=None, base_revision=None,
                       head_revision=0, created_at=utcnow()))
    session.flush()
    return repo


def get_repository(session: Session, name: str, *, lock: bool = False) -> Repository:
    """The repository called ``name``; ``lock``: ``SELECT ... FOR UPDATE`` (writers serialise on it),
    the row read as of the lock even if this session loaded it before (``populate_existing``).

    Raises
    ------
    kg.errors.NotFound
        No repository of that name.
    """
    repo = session.scalar(_LOCK_REPO if lock else _REPO, {"repo_name": name})
    if repo is None:
        raise NotFound(f"repository {name!r} not found", details={"repo": name})
    return repo


_REPO = select(Repository).where(Repository.name == bindparam("repo_name"))
_LOCK_REPO = _REPO.with_for_update().execution_options(populate_existing=True)


def list_repositories(session: Session, *, after: str | None = None, limit: int | None = None) -> list[Repository]:
    """Repositories by name (code point), all or the ``limit`` after ``after``: O(limit), on the
    unique index of ``repositories.name``.
    """
    stmt = select(Repository).order_by(Repository.name)
    if after is not None:
        stmt = stmt.where(Repository.name > after)
    if limit is not None:
        stmt = stmt.limit(limit)
    return list(session.scalars(stmt))


def delete_repository(session: Session, name: str) -> None:
    """Delete a repository and everything in it."""
    repo = get_repository(session, name, lock=True)
    # Children before parents: branch rows reference each other.
    for model in (RelationVersion, NodeVersion, IngestRecord, Revision, Merge, Chunk):
        session.execute(cast(Table, model.__table__).delete().where(model.repo_id == repo.id))
    branches = list(session.scalars(select(Branch).where(Branch.repo_id == repo.id)))
    for branch in sorted(branches, key=lambda b: -_depth(b, {x.id: x for x in branches})):
        session.delete(branch)
        session.flush()
    session.execute(cast(Table, Workspace.__table__).delete().where(Workspace.repo_id == repo.id))
    session.delete(repo)
    session.flush()


def _depth(branch: Branch, by_id: dict[int, Branch]) -> int:
    depth = 0
    while branch.parent_id is not None:
        branch = by_id[branch.parent_id]
        depth += 1
    return depth


# -- workspaces -----------------------------------------------------------------------------


def create_workspace(
    session: Session, repo: Repository, *, name: str, config: dict[str, Any] | None = None
) -> Workspace:
    """Create a workspace with ``config`` (``{"embedding": {...}}``), flushed.

    Raises
    ------
    kg.errors.Conflict
        A workspace of that name exists.
    """
    validate_name("workspace", name)
    exists = session.scalar(
        select(Workspace.id).where(Workspace.repo_id == repo.id, Workspace.name == name)
    )
    if exists is not None:
        raise Conflict(f"workspace {name!r} exists already", details={"workspace": name})
    workspace = Workspace(repo_id=repo.id, name=name, config=config or {}, created_at=utcnow())
    session.add(workspace)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"workspace {name!r} exists already", details={"workspace": name}) from exc
    bump_layout(session, repo)
    return workspace


def get_workspace(session: Session, repo: Repository, name: str) -> Workspace:
    """The workspace ``name`` of ``repo``.

    Raises
    ------
    kg.errors.NotFound
        No workspace of that name.
    """
    workspace = session.scalar(
        select(Workspace).where(Workspace.repo_id == repo.id, Workspace.name == name)
    )
    if workspace is None:
        raise NotFound(
            f"workspace {name!r} not found in repository {repo.name!r}",
            details={"workspace": name},
        )
    return workspace


def workspace_configs(session: Session, repo: Repository) -> dict[str, dict[str, Any]]:
    """The configs of ``repo``'s workspaces by name: one Core statement, no ORM object (a small
    import reads them on every call)."""
    return {name: config or {} for _, name, config in session.execute(_WORKSPACE_ROWS, {"repo_id": repo.id})}


def list_workspaces(session: Session, repo: Repository) -> list[Workspace]:
    """The workspaces of ``repo``, by name."""
    return list(
        session.scalars(select(Workspace).where(Workspace.repo_id == repo.id).order_by(Workspace.name))
    )


# -- branches -------------------------------------------------------------------------------


def _branches(session: Session, repo: Repository) -> dict[str, Branch]:
    rows = session.scalars(select(Branch).where(Branch.repo_id == repo.id))
    return {b.name: b for b in rows}


def get_branch(session: Session, repo: Repository, name: str) -> Branch:
    """The branch ``name`` of ``repo``.

    Raises
    ------
    kg.errors.NotFound
        No branch of that name.
    """
    branch = session.scalar(select(Branch).where(Branch.repo_id == repo.id, Branch.name == name))
    if branch is None:
        raise NotFound(
            f"branch {name!r} not found in repository {repo.name!r}", details={"branch": name}
        )
    return branch


def list_branches(session: Session, repo: Repository) -> list[Branch]:
    """The branches of ``repo``, by name."""
    return sorted(_branches(session, repo).values(), key=lambda b: b.name)


def create_branch(
    session: Session,
    repo: Repository,
    *,
    name: str,
    from_branch: str = MAIN,
    at_revision: int | None = None,
) -> Branch:
    """Create a branch forked from ``from_branch`` at ``at_revision`` (default now): one row, nothing
    copied (copy-on-write by revision, docs/concepts/branches.md). ``repo`` must be locked
    (``get_repository(..., lock=True)``) so two creations of one name serialise.

    Raises
    ------
    kg.errors.InvalidInput
        Bad name, or a revision below 0.
    kg.errors.NotFound
        Unknown parent, or a revision above the repository's head.
    kg.errors.Conflict
        The name exists.
    """
    validate_name("branch", name)
    parent = get_branch(session, repo, from_branch)
    if session.scalar(
        select(Branch.id).where(Branch.repo_id == repo.id, Branch.name == name)
    ) is not None:
        raise Conflict(f"branch {name!r} exists already", details={"branch": name})
    head = repo.head_revision
    if at_revision is None:
        base = head
    else:
        if isinstance(at_revision, bool) or not isinstance(at_revision, int) or at_revision < 0:
            raise InvalidInput(
                f"at_revision must be between 0 and the head revision {head}",
                details={"at_revision": at_revision},
            )
        if at_revision > head:  # a revision not written yet: nothing to branch from
            raise NotFound(f"at_revision must be between 0 and the head revision {head}",
                           details={"at_revision": at_revision, "head_revision": head})
        base = at_revision
    branch = Branch(repo_id=repo.id, name=name, parent_id=parent.id, base_revision=base,
                    head_revision=base, created_at=utcnow())
    session.add(branch)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"branch {name!r} exists already", details={"branch": name}) from exc
    bump_layout(session, repo)
    return branch


def delete_branch(session: Session, repo: Repository, name: str) -> None:
    """Delete a branch and the versions written on it.

    Raises
    ------
    kg.errors.Conflict
        ``main``, or a branch that other branches were created from.
    """
    branch = get_branch(session, repo, name)
    if branch.parent_id is None:
        raise Conflict(f"branch {name!r} cannot be deleted", details={"branch": name})
    children = session.scalars(select(Branch.name).where(Branch.parent_id == branch.id)).all()
    if children:
        raise Conflict(
            f"branch {name!r} has child branches: {', '.join(sorted(children))}",
            details={"branch": name, "children": sorted(children)},
        )
    for model in (RelationVersion, NodeVersion, IngestRecord, Revision):
        session.execute(cast(Table, model.__table__).delete().where(model.branch_id == branch.id))
    session.execute(cast(Table, Merge.__table__).delete().where(
        (Merge.source_branch_id == branch.id) | (Merge.target_branch_id == branch.id)))
    session.delete(branch)
    session.flush()
    bump_layout(session, repo)


def parent_name(session: Session, branch: Branch) -> str | None:
    """Name of the branch's parent, or None for ``main``."""
    if branch.parent_id is None:
        return None
    return session.scalar(select(Branch.name).where(Branch.id == branch.parent_id))


# -- views and revisions --------------------------------------------------------------------


def branch_view(
    session: Session, repo_name: str, branch_name: str = MAIN, *, at_revision: int | None = None
) -> BranchView:
    """What ``branch_name`` sees as of ``at_revision``: the branch and its ancestors, each capped.

    Raises
    ------
    kg.errors.NotFound
        An ``at_revision`` above the repository's head (not written yet).
    kg.errors.InvalidInput
        An ``at_revision`` below 0.
    """
    repo = get_repository(session, repo_name)
    return _view(session, repo, branch_name, at_revision)


def _view(session: Session, repo: Repository, branch_name: str, at_revision: int | None, *,
          own_cap: int | None = None) -> BranchView:
    _check_revision(repo, at_revision)
    branches = {b.name: b for b in _chain_of(session, repo, branch_name)}
    workspaces = dict(
        session.execute(select(Workspace.id, Workspace.name).where(Workspace.repo_id == repo.id)).all()
    )
    return _chained(repo, branches, {b.id: b for b in branches.values()}, workspaces, branch_name, at_revision,
                    own_cap=own_cap)


def _chain_of(session: Session, repo: Repository, branch_name: str) -> list[Branch]:
    """The branch ``branch_name`` and its ancestors (none if there is no such branch): one
    recursive statement, O(depth), not a read of every branch of the repository (an agent's
    write in a repository of thousands of branches reads its own chain).
    """
    return list(session.scalars(_CHAIN, {"chain_repo": repo.id, "chain_name": branch_name}))


def _chain_select() -> Select[Any]:
    chain = (select(Branch.id, Branch.parent_id)
             .where(Branch.repo_id == bindparam("chain_repo"), Branch.name == bindparam("chain_name"))
             .cte("branch_chain", recursive=True))
    up = aliased(Branch)
    chain = chain.union_all(select(up.id, up.parent_id).join(chain, up.id == chain.c.parent_id))
    return select(Branch).join(chain, Branch.id == chain.c.id)


_CHAIN = _chain_select()  # built once: its compiled form is reused as it is


def _check_revision(repo: Repository, at_revision: int | None) -> None:
    if at_revision is not None and (isinstance(at_revision, bool) or not 0 <= at_revision <= repo.head_revision):
        # A revision not written yet would read the present now and something else later: it
        # is not found (404), as a branch or a node that does not exist; a bool is no revision.
        kind = InvalidInput if isinstance(at_revision, bool) or at_revision < 0 else NotFound
        raise kind(f"at_revision must be between 0 and the head revision {repo.head_revision}",
                   details={"at_revision": at_revision, "head_revision": repo.head_revision})


def _chained(repo: Repository, branches: dict[str, Branch], by_id: dict[int, Branch], workspaces: dict[int, str],
             branch_name: str, at_revision: int | None, *, own_cap: int | None = None,
             configs: dict[int, dict[str, Any]] | None = None) -> BranchView:
    """The view of ``branch_name`` from the repository's branches and workspaces: its chain, each
    ancestor capped at the fork (O(depth))."""
    branch = branches.get(branch_name)
    if branch is None:
        raise NotFound(
            f"branch {branch_name!r} not found in repository {repo.name!r}",
            details={"branch": branch_name},
        )
    if own_cap is not None:  # a write transaction: it sees the revision it is writing
        cap = own_cap
    else:
        cap = branch.head_revision if at_revision is None else min(at_revision, branch.head_revision)
    chain = [(branch.id, cap)]
    current = branch
    while current.parent_id is not None:
        cap = min(cap, current.base_revision or 0)
        current = by_id[current.parent_id]
        chain.append((current.id, cap))
    return BranchView(repo=repo, branch=branch, revision=chain[0][1], chain=tuple(chain),
                      workspaces=workspaces, workspace_configs=configs)


def bump_layout(session: Session, repo: Repository) -> None:
    """Count a change to ``repo``'s branches or workspaces made without a revision (a branch created,
    deleted or reset, a workspace created), in the writing transaction: the cached branch views of
    every process see it at their next read (:class:`ViewCache`). Every such write calls it; a
    workspace's changed ``config`` is counted at flush (:func:`count_config_changes`).
    """
    version = session.execute(_bump(repo.id)).scalar_one()
    set_committed_value(repo, "layout_version", version)


def _bump(repo_id: int) -> Any:
    return (update(Repository).where(Repository.id == repo_id)
            .values(layout_version=Repository.layout_version + 1).returning(Repository.layout_version)
            .execution_options(synchronize_session=False))


def count_config_changes(session: Session, _context: Any, _instances: Any) -> None:
    """A session's ``before_flush`` hook (:class:`kg.store.db.Database` installs it): a workspace
    whose ``config`` was set (embedding model, relation types, a re-embed's progress: noted by
    :func:`_config_set`) bumps its repository's ``layout_version`` in the same transaction, as
    :func:`bump_layout`. The branch views keep the configs (:attr:`BranchView.workspace_configs`),
    so no writer of a config can forget to count it.
    """
    repos = session.info.pop(_CONFIG_SET, None)
    for repo_id in sorted(repos or ()):
        session.execute(_bump(repo_id))


#: ``session.info`` key: the repositories whose workspace configs the session set.
_CONFIG_SET = "kg.workspace_config_set"


@event.listens_for(Workspace.config, "set")
def _config_set(target: Workspace, value: Any, _old: Any, _initiator: Any) -> None:
    """Note a workspace's new ``config`` in its session, for :func:`count_config_changes` (a
    workspace not in a session yet is being created: :func:`create_workspace` bumps)."""
    session = object_session(target)
    if session is not None and target.repo_id is not None:
        session.info.setdefault(_CONFIG_SET, set()).add(target.repo_id)


#: The repository columns a branch view keeps (its row, as a detached copy) and keys on.
_REPO_COLUMNS = (Repository.id, Repository.uid, Repository.name, Repository.head_revision, Repository.created_at,
                 Repository.layout_version)
#: Built once (their compiled forms and result columns reused as they are): a read's one check.
_REPO_ROW = select(*_REPO_COLUMNS).where(Repository.id == bindparam("id"))
#: A read's one statement when its layout is cached, on the driver's cursor: the repository's id,
#: its layout key, and its highest chunk seq (the ``(repo_id, seq)`` index's last entry).
_REPO_CHECK = DriverStatement(select(
    Repository.id, Repository.head_revision, Repository.layout_version,
    select(func.max(Chunk.seq)).where(Chunk.repo_id == Repository.id).correlate(Repository).scalar_subquery(),
).where(Repository.name == bindparam("name")))
_WORKSPACE_ROWS = (select(Workspace.id, Workspace.name, Workspace.config)
                   .where(Workspace.repo_id == bindparam("repo_id")))
_REPO_KEY = select(Repository.head_revision, Repository.layout_version).where(Repository.id == bindparam("id"))
_BRANCH_COLUMNS = (Branch.id, Branch.repo_id, Branch.name, Branch.parent_id, Branch.base_revision,
                   Branch.head_revision, Branch.created_at)


@dataclass
class _Layout:
    """One repository's branches and workspaces as of one ``(head_revision, layout_version)``, and the
    head views made of them (by branch name)."""

    key: tuple[int, int]
    repo: Repository
    branches: dict[str, Branch]
    by_id: dict[int, Branch]
    workspaces: dict[int, str]
    configs: dict[int, dict[str, Any]]
    heads: dict[str, BranchView] = field(default_factory=dict)

    def view(self, branch_name: str, at_revision: int | None) -> BranchView:
        if at_revision is None:
            held = self.heads.get(branch_name)
            if held is not None:
                return held
        _check_revision(self.repo, at_revision)
        made = _chained(self.repo, self.branches, self.by_id, self.workspaces, branch_name, at_revision,
                        configs=self.configs)
        if at_revision is None:
            self.heads[branch_name] = made
        return made


class ViewCache:
    """Branch views of the repositories read lately, checked against the database on every read.

    A view (:func:`branch_view`) is made of the repository's row, its branches and its workspaces
    (names and configs): three reads, ~2 ms of a search's 7 at 100,000 nodes. It changes only when
    a write commits a revision (``repositories.head_revision``, which moves a branch's head) or
    changes the repository's layout without one (``repositories.layout_version``,
    :func:`bump_layout`: a branch created, deleted or reset, a workspace created or its config
    changed). :meth:`view` reads those two columns in one indexed single-row read (the unique
    index on ``repositories.name``, with the repository's highest chunk ``seq`` from the
    ``(repo_id, seq)`` index in the same statement: :data:`TOP_CHUNK_SEQ`) and answers from
    the cache when they equal the cached layout's; otherwise it reads the layout again. The
    check is a read of the database, in the caller's session, so a write committed by another
    process (another server on one PostgreSQL database or SQLite file) is seen at the next read
    after its commit, as without the cache. A layout is stored only if the key read again after
    its reads is unchanged (on PostgreSQL, READ COMMITTED, each statement sees the commits made
    before it: a write committed between the reads would otherwise be kept under the older key).

    What the caller may read (:attr:`BranchView.readable`) is not cached: the views are the whole
    state, scoped per call by :func:`kg.context.scoped_view`. The cached rows are detached
    copies (no session holds them): read their columns, never add them to a session. Write
    transactions do not use the cache (:func:`begin_write` reads under the repository's lock).

    Parameters
    ----------
    max_repos : int
        Repositories held (least recently read dropped first).
    """

    def __init__(self, max_repos: int = 256) -> None:
        self._layouts: LRUCache[_Layout] = LRUCache(max_repos)
        #: Repository name -> (its layout, the change counter when the layout was found current,
        #: the highest chunk seq then): SQLite's reads with an unmoved counter ask nothing.
        self._checked: LRUCache[tuple[_Layout, int, int]] = LRUCache(max_repos)
        #: Reads answered from the cache, and not, since start.
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """Repositories held."""
        return len(self._layouts)

    def view(self, session: Session, repo_name: str, branch_name: str = MAIN, *,
             at_revision: int | None = None, data_version: Callable[[], int | None] | None = None) -> BranchView:
        """:func:`branch_view`, from the cache when the repository's revision and layout are the cached
        ones.

        Parameters
        ----------
        session : Session
            A read session (its transaction, on SQLite, is the snapshot the view is of).
        repo_name : str
            The repository.
        branch_name : str
            The branch.
        at_revision : int or None
            Read as of this revision (None: the branch's head).
        data_version : callable or None
            The database's change counter (:meth:`kg.store.db.Database.data_version`): when it
            has not moved since the repository's layout was last checked, the read is answered
            without a statement (the session opens no connection for it).

        Returns
        -------
        BranchView
            Shared by the readers of the same state: never change it (:meth:`BranchView.scoped`
            makes a reader's copy).

        Raises
        ------
        kg.errors.NotFound
            An unknown repository or branch, or an ``at_revision`` above the repository's head.
        kg.errors.InvalidInput
            An ``at_revision`` below 0.
        """
        version = data_version() if data_version is not None else None
        if version is not None:
            held = self._checked.peek(repo_name)
            if held is not None and held[1] == version:
                self.hits += 1
                session.info.setdefault(TOP_CHUNK_SEQ, {})[held[0].repo.id] = held[2]
                return held[0].view(branch_name, at_revision)
        connection = session.connection()
        found = _REPO_CHECK.rows(connection, {"name": repo_name})
        if not found:
            raise NotFound(f"repository {repo_name!r} not found", details={"repo": repo_name})
        repo_id, head_revision, layout_version, top_chunk_seq = found[0]
        session.info.setdefault(TOP_CHUNK_SEQ, {})[repo_id] = top_chunk_seq or 0
        key = (head_revision, layout_version)
        layout = self._layouts.peek(repo_id)
        if layout is not None and layout.key == key:
            self.hits += 1
            if version is not None:  # read before the check: a commit since moves it again
                self._checked.put(repo_name, (layout, version, top_chunk_seq or 0))
        else:
            self.misses += 1
            row = connection.execute(_REPO_ROW, {"id": repo_id}).first()
            if row is None:  # deleted since the check (PostgreSQL: each statement sees new commits)
                raise NotFound(f"repository {repo_name!r} not found", details={"repo": repo_name})
            layout = _load_layout(connection, row)
            again = connection.execute(_REPO_KEY, {"id": row.id}).first()
            if again is not None and tuple(again) == layout.key:
                self._layouts.put(row.id, layout)
        return layout.view(branch_name, at_revision)

    def clear(self) -> None:
        """Forget every layout (a test's reset; never needed for correctness)."""
        self._layouts.clear()
        self._checked.clear()


def _load_layout(connection: Any, row: Any) -> _Layout:
    repo = Repository(id=row.id, uid=row.uid, name=row.name, head_revision=row.head_revision,
                      created_at=row.created_at, layout_version=row.layout_version)
    branches = {
        b.name: Branch(id=b.id, repo_id=b.repo_id, name=b.name, parent_id=b.parent_id, base_revision=b.base_revision,
                       head_revision=b.head_revision, created_at=b.created_at)
        for b in connection.execute(select(*_BRANCH_COLUMNS).where(Branch.repo_id == row.id))
    }
    workspaces: dict[int, str] = {}
    configs: dict[int, dict[str, Any]] = {}
    for wid, name, config in connection.execute(_WORKSPACE_ROWS, {"repo_id": row.id}):
        workspaces[wid] = name
        configs[wid] = config or {}
    return _Layout((row.head_revision, row.layout_version), repo, branches, {b.id: b for b in branches.values()},
                   workspaces, configs)


def begin_write(
    session: Session,
    repo_name: str,
    branch_name: str = MAIN,
    *,
    message: str | None = None,
    actor: str | None = None,
) -> WriteContext:
    """Open a write on a branch: the first statement of every write transaction. Takes the
    repository's row lock (its revision counter): writers of a repository serialise and the
    counter never repeats; on SQLite the transaction began IMMEDIATE.

    Raises
    ------
    kg.errors.InvalidInput
        An ``actor`` longer than the 255 characters the revision log keeps.
    """
    if actor is not None and len(actor) > MAX_ACTOR:
        raise InvalidInput(f"actor is longer than {MAX_ACTOR} characters", details={"length": len(actor)})
    repo = get_repository(session, repo_name, lock=True)  # the head as of the lock
    pending = repo.head_revision + 1
    view = _view(session, repo, branch_name, None, own_cap=pending)
    return WriteContext(session, view, pending, message=message, actor=actor)


def count_branch_children(session: Session, branch: Branch) -> int:
    """How many branches were created from ``branch``."""
    return session.scalar(select(func.count()).where(Branch.parent_id == branch.id)) or 0


def workspace_id(view: BranchView, workspace: str) -> int:
    """The id of ``workspace`` in the view's repository.

    Raises
    ------
    kg.errors.NotFound
        No workspace of that name.
    """
    for wid, name in view.workspaces.items():
        if name == workspace and view.can_read(wid):
            return wid
    raise NotFound(
        f"workspace {workspace!r} not found in repository {view.repo.name!r}",
        details={"workspace": workspace},
    )
