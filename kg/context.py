"""Who calls, with what, in which transaction: the arguments every use case receives.

Every write is one use case (:mod:`kg.ops`, and the writes of :mod:`kg.indexing.reembed`,
:mod:`kg.rag` and :mod:`kg.ragnode`): a function whose first argument is a
:class:`UnitOfWork`. The unit of work is the write transaction with the caller's identity
(:class:`Actor`) and the hooks to run once it has committed (waking the indexer, dropping
what the search index holds for a deleted branch). Use cases never open a transaction nor
commit; an adapter (an HTTP route, a CLI command, later an MCP tool or a console page) parses
its input and makes one call::

    result = run(services, caller, relations.relate, repo, branch, source, target, "cites")

:func:`run` opens the transaction, calls the use case, commits, then runs the hooks. Reads
take ``(services, caller)`` and open a read session of their own. Access control (who may
write where) is decided here, in this one layer, from the actor every call carries:
:meth:`UnitOfWork.begin` asks :func:`kg.access.authorize` for ``write`` on the branch (or the
action a use case names: ``merge``), :func:`reading` for ``read``, and :func:`permit` (or
:meth:`UnitOfWork.authorize`) serves the use cases that act on something else (a branch to
create or delete, a repository, a workspace). An ``anonymous`` caller is refused while
``KG_AUTH`` is on.

The resources a use case may use are declared by :class:`Resources`; :class:`kg.services.Services`
(the composition root, above every use case) implements it.

Common parameters
-----------------
The use cases (:mod:`kg.ops`) and the store (:mod:`kg.store`) share these; their docstrings do
not describe them again.

- ``uow`` (:class:`UnitOfWork`): the write transaction, its caller and its after-commit hooks;
  the first argument of a write use case, which never commits.
- ``services`` (:class:`Resources`): the process's resources (database, search index,
  embedders, settings); with ``caller``, the first arguments of a read use case.
- ``caller`` (:class:`Actor`): who calls; access is decided for it (:func:`reading`,
  :func:`permit`, :meth:`UnitOfWork.begin`).
- ``actor`` (a string, on a write): who, as the caller states it, kept in the revision log;
  default the caller's name; a key that is not an admin of the repository may state only its
  own name; at most 255 characters.
- ``message``: why, kept in the revision log with the write's revision.
- ``session``: a SQLAlchemy ``Session`` the caller owns, a read session or the write
  transaction (:meth:`kg.store.db.Database.write`); store functions flush, never commit.
- ``view`` (:class:`kg.store.repos.BranchView`): the branch state read, restricted to the
  workspaces its reader may read; ``ctx`` (:class:`kg.store.repos.WriteContext`): a write's
  place on a branch, whose revision its first write allocates.
- ``repo``, ``branch``, ``workspace``: names (``branch`` defaults to ``main``); ``repo`` is the
  :class:`kg.store.models.Repository` row in the store; ``path`` a node path
  (:func:`kg.store.paths.validate_path`); an *address* is ``workspace:/path``.
- ``at_revision``: read the branch as of this revision (None: its head).
- ``limit`` and ``cursor``: a page's size and the previous page's ``next_cursor`` (None: the
  first page); a paged read answers ``(items, next_cursor)``, the cursor None on the last page.

Common errors
-------------
Not listed again in each Raises section, which names the other errors and the cases particular
to its function (and any class its own body raises):

- :class:`kg.errors.NotFound`: a repository, branch or workspace named does not exist, or the
  caller may not see it (the answer does not say which); an ``at_revision`` not written yet;
- :class:`kg.errors.Forbidden`: the caller sees it but no grant allows the action (a docstring
  says which grant a use case needs when it is not ``read`` or ``write`` on the branch);
- :class:`kg.errors.Unauthenticated`: an anonymous caller while ``KG_AUTH`` is on;
- :class:`kg.errors.InvalidInput`: a malformed name, path or address
  (:mod:`kg.store.paths`), an ``actor`` longer than 255 characters, a negative
  ``at_revision``, a ``limit`` out of its range, a ``cursor`` not made by the same listing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy.orm import Session

from kg.access import ANONYMOUS as ANONYMOUS
from kg.access import OPERATOR as OPERATOR
from kg.access import SYSTEM as SYSTEM
from kg.access import Action, KeyCache, authorize, authorize_actor_name, readable_workspaces
from kg.access import Actor as Actor
from kg.errors import NotFound, RateLimited, Unauthenticated
from kg.graph.cache import GraphCache
from kg.index.base import SearchIndex
from kg.index.weaviate import ClientPool
from kg.lru import LRUCache
from kg.metrics import RATE_LIMITED, observe_use_case
from kg.providers.base import Embedder, Reranker
from kg.providers.llm import LLM
from kg.ratelimit import RateLimiter
from kg.settings import Settings
from kg.store.db import Database
from kg.store.paths import parse_address
from kg.store.repos import MAIN, BranchView, ViewCache, WriteContext, begin_write
from kg.tracing import active, annotate, span

__all__ = [
    "ANONYMOUS_BUCKET", "FunctionJobQueue", "IndexRunCounts", "IndexWorker", "P", "Resources", "T",
    "UNLIMITED_KINDS", "UnitOfWork", "admit", "permit", "reading", "run", "scoped_view", "throttle",
    "unit_of_work",
]

P = ParamSpec("P")
T = TypeVar("T")

class IndexRunCounts(Protocol):
    """What an indexing pass did (:class:`kg.indexing.indexer.IndexRun`)."""

    @property
    def done(self) -> int: ...

    @property
    def failed(self) -> int: ...


class IndexWorker(Protocol):
    """The indexer as use cases see it (:class:`kg.indexing.indexer.Indexer`)."""

    def wake(self) -> None:
        """Tell the background indexer that jobs are pending."""

    def run_pending(self, *, repo_id: int | None = None,
                    content_keys: Sequence[str] | None = None) -> IndexRunCounts:
        """Run one pass in this thread: claim, embed and store up to a batch of jobs."""

    def drain(self, *, repo_id: int | None = None) -> IndexRunCounts:
        """Run passes until no job is pending."""


class FunctionJobQueue(Protocol):
    """The durable function-job queue as a use case below it sees it (the port of
    :class:`kg.rag.function_jobs.JobRunner`, a layer above; :mod:`kg.ops.lineage` queues
    re-extraction through it)."""

    def queue_own(self, uow: UnitOfWork, repo: str, name: str, raw: dict[str, Any], branch: str) -> None:
        """Queue function ``name`` on ``branch`` on kg's own account (not charged to the caller)
        from inside ``uow``; it runs once ``uow`` has committed."""
        ...


class Resources(Protocol):
    """What a use case may use, shared by the whole process (:class:`kg.services.Services`).

    Attributes
    ----------
    settings : Settings
    db : Database
    index : SearchIndex
        The search index chosen at start-up (``KG_INDEX``).
    graphs : GraphCache
        networkx views of branch states, by state.
    search_cache : LRUCache
        Searchable sets of branch states.
    views : ViewCache
        Branch views, checked against the database on every read (:func:`reading`).
    llm : LLM
        The configured language model (``NoLLM`` without one).
    weaviate_clients : ClientPool
        The RAG node's Weaviate connections.
    rate_limiter : RateLimiter
        The token buckets of expensive calls (:func:`throttle`).
    key_cache : KeyCache
        Keys authenticated lately (a revocation forgets its key here).
    indexer : IndexWorker
        Embeds queued texts.
    reranker : Reranker or None
        The reranker of search (``KG_RERANK_MODEL``), None without one.
    jobs : FunctionJobQueue
        The function-job runner (:class:`kg.rag.function_jobs.JobRunner`, a layer above this
        one), seen through its port.
    """

    settings: Settings
    db: Database
    index: SearchIndex
    graphs: GraphCache
    search_cache: LRUCache[Any]
    views: ViewCache
    llm: LLM
    weaviate_clients: ClientPool
    rate_limiter: RateLimiter
    key_cache: KeyCache

    # Read-only (properties), so that a Services whose indexer and job runner are of narrower
    # types still is Resources: a protocol's plain attributes must match their types exactly.
    @property
    def indexer(self) -> IndexWorker: ...

    @property
    def jobs(self) -> FunctionJobQueue: ...

    @property
    def reranker(self) -> Reranker | None:
        """The configured reranker of search (``KG_RERANK_MODEL``), or None."""

    def embedder(self, name: str) -> Embedder:
        """The embedder called ``name`` (``<provider>:<model>``), made once per process."""


class UnitOfWork:
    """One write transaction (``BEGIN IMMEDIATE`` on SQLite): its session, its caller, and what to
    do once it committed.

    Made by :func:`unit_of_work` (or :func:`run`); a use case receives it and never commits.
    """

    def __init__(self, services: Resources, session: Session, actor: Actor) -> None:
        self.services = services
        self.session = session
        self.actor = actor
        self._hooks: list[Callable[[], None]] = []
        self._queued: dict[int, list[str]] = {}
        #: The use case's span (:func:`run`), which :meth:`begin` names the branch on.
        self.span: Any = None

    def begin(self, repo: str, branch: str = MAIN, *, message: str | None = None,
              actor: str | None = None, action: Action = "write") -> WriteContext:
        """Open a write on ``branch`` of ``repo``; its revision is allocated by the first write.

        ``action`` is what the caller must be allowed on ``branch`` (``merge``: a merge writes its
        target); ``message`` and ``actor`` as described in this module.

        Raises
        ------
        kg.errors.NotFound
            Unknown repository or branch, or one the caller cannot see.
        kg.errors.Forbidden
            The caller may not ``action`` on the branch, or may not name another actor.
        kg.errors.Unauthenticated
            An anonymous caller while ``KG_AUTH`` is on.
        kg.errors.InvalidInput
            An ``actor`` longer than 255 characters.
        """
        self.authorize(action, repo, branch)
        if self.span is not None:
            annotate(self.span, repo=repo, branch=branch)
        return begin_write(self.session, repo, branch, message=message,
                           actor=authorize_actor_name(self.actor, repo, actor))

    def authorize(self, action: Action, repo: str, branch: str | None = None,
                  workspace: str | None = None) -> None:
        """Check that the caller may ``action`` (one of :data:`kg.access.ACTIONS`): :func:`permit` for
        this unit's caller.

        Raises
        ------
        kg.errors.NotFound
            Something the caller cannot see.
        kg.errors.Forbidden
            No grant allows it.
        kg.errors.Unauthenticated
            An anonymous caller while ``KG_AUTH`` is on.
        """
        permit(self.services, self.actor, action, repo, branch, workspace)

    def authorize_workspaces(self, action: Action, repo: str, branch: str, workspaces: Iterable[str], *,
                             unnamed: str | None = None) -> None:
        """Check ``action`` on each of ``workspaces`` (named once each, in order), before anything is
        written: the checks of a write that touches several workspaces (a batch, a graph write, a
        relation, a merge).

        ``unnamed``: the workspaces were not named by the caller but found by kg (what a merge or a
        branch delete touches): a workspace it cannot see is then a 404 that says ``unnamed`` (e.g.
        "this merge") touches something it cannot see, without its name.

        Raises
        ------
        kg.errors.NotFound
            A workspace the caller cannot see.
        kg.errors.Forbidden
            One it sees but may not ``action`` on.
        """
        for workspace in dict.fromkeys(workspaces):
            try:
                permit(self.services, self.actor, action, repo, branch, workspace)
            except NotFound:
                if unnamed is None:
                    raise
                raise NotFound(f"{unnamed} touches a workspace this key cannot see") from None

    def authorize_relation(self, repo: str, branch: str, from_: str, to: str) -> None:
        """Check a relation write: ``write`` on its source node's workspace, ``read`` on its target's (an
        agent relates its own notes to the documents it reads).

        Raises
        ------
        kg.errors.InvalidInput
            A malformed address.
        kg.errors.NotFound, kg.errors.Forbidden
            As :meth:`authorize_workspaces`.
        """
        self.authorize_workspaces("write", repo, branch, [parse_address(from_)[0]])
        self.authorize_workspaces("read", repo, branch, [parse_address(to)[0]])

    def reader_view(self, view: BranchView) -> BranchView:
        """``view`` restricted to what this unit's caller may read (:func:`scoped_view`)."""
        return scoped_view(self.actor, view)

    def after_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the transaction has committed (never if it rolls back); hooks run in the
        order they were added.
        """
        self._hooks.append(hook)

    def index_after_commit(self, repo_id: int, content_keys: Sequence[str]) -> None:
        """Once committed, index the texts this transaction queued (their content keys, in ``repo_id``'s
        queue): at once with ``KG_INDEX_INLINE``, else by waking the background indexer.
        """
        if not content_keys:
            return
        if repo_id not in self._queued:
            self._queued[repo_id] = []
            self.after_commit(lambda: _index_now_or_wake(self.services, repo_id, self._queued[repo_id]))
        self._queued[repo_id].extend(content_keys)

    def committed(self) -> None:
        """Run the hooks (called by :func:`unit_of_work` after the commit)."""
        hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()


def _index_now_or_wake(services: Resources, repo_id: int, content_keys: list[str]) -> None:
    if services.settings.index_inline:
        while services.indexer.run_pending(repo_id=repo_id, content_keys=content_keys).done:
            pass
    else:
        services.indexer.wake()


def permit(services: Resources, caller: Actor, action: Action, repo: str, branch: str | None = None,
           workspace: str | None = None) -> None:
    """:func:`kg.access.authorize` (``action``: one of :data:`kg.access.ACTIONS`), refusing an
    anonymous caller while ``KG_AUTH`` is on.

    Raises
    ------
    kg.errors.Unauthenticated
        An anonymous caller while ``KG_AUTH`` is on.
    kg.errors.NotFound
        Something the caller cannot see.
    kg.errors.Forbidden
        No grant allows it.
    """
    admit(services, caller)
    authorize(caller, action, repo, branch, workspace)


def admit(services: Resources, caller: Actor) -> None:
    """Refuse an anonymous caller while ``KG_AUTH`` is on (the HTTP layer refuses it first).

    Raises
    ------
    kg.errors.Unauthenticated
        ``caller`` is anonymous and ``KG_AUTH`` is on.
    """
    if caller.kind == "anonymous" and services.settings.auth:
        raise Unauthenticated("an API key is required (Authorization: Bearer kg_...)")


#: The callers :func:`throttle` never charges: the person at the machine and kg's own work.
UNLIMITED_KINDS = frozenset({"operator", "system"})
#: The one bucket every anonymous caller shares (they exist only while KG_AUTH is off, when
#: the server listens on loopback: every one of them is on this machine).
ANONYMOUS_BUCKET = "anonymous"


def throttle(services: Resources, caller: Actor, call: str) -> None:
    """Charge one expensive ``call`` (``ask``, ``extract-entities``, ``re-embed``, ``rag``: for the
    message) to ``caller``'s token bucket, or refuse it.

    One bucket per API key (its id: a renamed key keeps its bucket), one shared by every
    anonymous caller; the operator and kg's own work are not limited. The bucket holds
    ``KG_RATE_EXPENSIVE_BURST`` calls and refills at ``KG_RATE_EXPENSIVE_PER_MIN`` a minute
    (0: no limit). A refused call is not charged. O(1), no I/O; the buckets are per process
    (see :mod:`kg.ratelimit`).

    Raises
    ------
    kg.errors.RateLimited
        The bucket is empty; ``retry_after_s`` says when it holds a call again.
    """
    if caller.kind in UNLIMITED_KINDS:
        return
    limiter = services.rate_limiter
    identity = f"key:{caller.key_id}" if caller.kind == "key" else ANONYMOUS_BUCKET
    wait_s = limiter.take(identity)
    if wait_s > 0:
        RATE_LIMITED.labels(call).inc()
        who = f"key {caller.name!r}" if caller.kind == "key" else "anonymous callers"
        raise RateLimited(
            f"{call}: {who} made more expensive calls than allowed ({limiter.per_min:g} a minute, "
            f"{limiter.burst} at once; KG_RATE_EXPENSIVE_PER_MIN, KG_RATE_EXPENSIVE_BURST); "
            f"retry in {wait_s:.1f} s",
            retry_after_s=wait_s,
            details={"call": call, "retry_after_s": round(wait_s, 3), "per_min": limiter.per_min,
                     "burst": limiter.burst})


@contextmanager
def unit_of_work(services: Resources, actor: Actor) -> Iterator[UnitOfWork]:
    """A write transaction for ``actor``: committed when the block ends, rolled back on any error (no
    partial write); the after-commit hooks run after the commit.
    """
    with services.db.write() as session:
        uow = UnitOfWork(services, session, actor)
        yield uow
    uow.committed()


def reading(services: Resources, caller: Actor, repo: str, branch: str = MAIN,
            at_revision: int | None = None) -> AbstractContextManager[tuple[Session, BranchView]]:
    """A read session and the view of ``branch`` (as of ``at_revision``) that ``caller`` reads:
    ``with reading(...) as (session, view):``.

    Every read of a branch's content goes through here, so who may read what is decided in one
    place. The read's duration is observed by its use case (the function that called this,
    :data:`kg.metrics.USE_CASE_DURATION`) and, when traces are recorded, it runs in the spans
    ``kg.read`` and ``kg.db.read``.

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or branch, or one ``caller`` may not read.
    kg.errors.Forbidden
        ``caller`` sees the branch but may not read it.
    kg.errors.Unauthenticated
        An anonymous caller while ``KG_AUTH`` is on.
    kg.errors.InvalidInput
        A revision not written yet.
    """
    # The reading use case is the function that called this: its module and name label the
    # duration and the span.
    name = _use_case_name(sys._getframe(1))
    if active():
        return _traced_reading(services, caller, repo, branch, at_revision, name)
    return _Reading(services, caller, repo, branch, at_revision, name)


class _Reading:
    """:func:`reading` while no span is recorded: one object's ``__enter__`` and ``__exit__``, no
    generator nor nested context managers. A read answered from what the process holds (a held
    graph view) spends most of its time around its answer, and with the CPU's caches cold each
    function and object touched costs: an empty read of a cached view took 0.17 ms as nested
    context managers (``reading``, ``span``, ``read_lazily``) with the pragma as change counter,
    0.10 ms as this with the log's header (32 MB written between calls, as in the peers bench).
    """

    __slots__ = ("_at_revision", "_branch", "_caller", "_name", "_repo", "_services", "_session", "_started")

    def __init__(self, services: Resources, caller: Actor, repo: str, branch: str, at_revision: int | None,
                 name: str) -> None:
        self._services = services
        self._caller = caller
        self._repo = repo
        self._branch = branch
        self._at_revision = at_revision
        self._name = name
        self._session: Any = None
        self._started = 0.0

    def __enter__(self) -> tuple[Session, BranchView]:
        services, caller = self._services, self._caller
        self._started = time.perf_counter()
        try:
            if caller.kind == "anonymous":
                admit(services, caller)
            if not caller.unrestricted:
                authorize(caller, "read", self._repo, self._branch)
            session = self._session = services.db.lazy_read_session()
            view = services.views.view(session, self._repo, self._branch, at_revision=self._at_revision,
                                       data_version=services.db.data_version)
            return session, scoped_view(caller, view)
        except BaseException:
            self._end("error")
            raise

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._end("ok" if exc_type is None else "error")

    def _end(self, outcome: str) -> None:
        session, self._session = self._session, None
        try:
            if session is not None:
                session.close()
        finally:
            if self._services.settings.metrics:
                observe_use_case(self._name, outcome, time.perf_counter() - self._started)


@contextmanager
def _traced_reading(services: Resources, caller: Actor, repo: str, branch: str, at_revision: int | None,
                    name: str) -> Iterator[tuple[Session, BranchView]]:
    """:func:`reading` while spans are recorded."""
    started = time.perf_counter()
    outcome = "error"
    try:
        with span("kg.read", use_case=name, repo=repo, branch=branch):
            permit(services, caller, "read", repo, branch)
            with services.db.read_lazily() as session:
                view = services.views.view(session, repo, branch, at_revision=at_revision,
                                           data_version=services.db.data_version)
                yield session, scoped_view(caller, view)
        outcome = "ok"
    finally:
        if services.settings.metrics:
            observe_use_case(name, outcome, time.perf_counter() - started)


def _use_case_name(frame: Any) -> str:
    """``module.function`` of a frame's code, the module without its ``kg.`` prefix (a bounded
    label: one value per function of kg), made once per code object."""
    code = frame.f_code
    name = _USE_CASE_NAMES.get(code)
    if name is None:
        module = str(frame.f_globals.get("__name__", "?"))
        name = _USE_CASE_NAMES.setdefault(code, f"{module.removeprefix('kg.')}.{code.co_name}")
    return name


#: :func:`_use_case_name` by code object (one per reading function of kg).
_USE_CASE_NAMES: dict[Any, str] = {}


def scoped_view(caller: Actor, view: BranchView) -> BranchView:
    """``view`` as ``caller`` reads it: the same state with
    :attr:`~kg.store.repos.BranchView.readable` set to the workspaces its grants let it read
    (None: every workspace).
    """
    if caller.unrestricted:  # every workspace (readable_workspaces' first answer), no row attribute read
        return view
    names = readable_workspaces(caller, view.repo.name, view.branch.name, view.workspaces.values())
    if names is None:
        return view
    return view.scoped(frozenset(wid for wid, name in view.workspaces.items() if name in names))


def run(services: Resources, actor: Actor, use_case: Callable[Concatenate[UnitOfWork, P], T], /,
        *args: P.args, **kwargs: P.kwargs) -> T:
    """Call the write use case ``use_case`` with ``*args, **kwargs`` in a unit of work of its own,
    commit it, run its hooks, and return what it returned.

    Raises
    ------
    kg.errors.KGError
        What the use case raised; nothing of it is written.
    """
    name = f"{use_case.__module__.removeprefix('kg.')}.{getattr(use_case, '__name__', '?')}"
    started = time.perf_counter()
    outcome = "error"
    try:
        with span("kg.use_case", use_case=name) as traced, unit_of_work(services, actor) as uow:
            uow.span = traced
            result = use_case(uow, *args, **kwargs)
        outcome = "ok"
    finally:
        if services.settings.metrics:
            observe_use_case(name, outcome, time.perf_counter() - started)
    return result
