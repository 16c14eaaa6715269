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
write where) is decided here, in this one layer, from the actor every call carries.

The resources a use case may use are declared by :class:`Resources`; :class:`kg.services.Services`
(the composition root, above every use case) implements it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, TypeVar

from sqlalchemy.orm import Session

from kg.graph.cache import GraphCache
from kg.index.base import VectorIndex
from kg.index.weaviate import ClientPool
from kg.lru import LRUCache
from kg.providers.base import Embedder
from kg.providers.llm import LLM
from kg.settings import Settings
from kg.store.db import Database
from kg.store.repos import MAIN, BranchView, WriteContext, begin_write, branch_view

P = ParamSpec("P")
T = TypeVar("T")

ActorKind = Literal["anonymous", "operator", "system"]


@dataclass(frozen=True)
class Actor:
    """Who calls a use case.

    Attributes
    ----------
    kind : {"anonymous", "operator", "system"}
        ``anonymous``: an HTTP caller (no credentials are asked for yet); ``operator``: the
        person at the machine, through the CLI; ``system``: kg's own background work (the
        indexer, re-embedding, the function-job runner).
    name : str or None
        Recorded as a revision's ``actor`` when the call names none of its own.
    """

    kind: ActorKind
    name: str | None = None


#: An HTTP caller, until API keys identify callers.
ANONYMOUS = Actor("anonymous")
#: The person running the CLI on the machine that holds the data.
OPERATOR = Actor("operator")
#: kg's own background work.
SYSTEM = Actor("system")


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


class Resources(Protocol):
    """What a use case may use, shared by the whole process (:class:`kg.services.Services`).

    Attributes
    ----------
    settings : Settings
    db : Database
    index : VectorIndex
        The search index chosen at start-up (``KG_INDEX``).
    graphs : GraphCache
        networkx views of branch states, by state.
    search_cache : LRUCache
        Searchable sets of branch states.
    llm : LLM
        The configured language model (``NoLLM`` without one).
    weaviate_clients : ClientPool
        The RAG node's Weaviate connections.
    indexer : IndexWorker
        Embeds queued texts.
    jobs : object
        The function-job runner (:class:`kg.rag.function_jobs.JobRunner`, a layer above this
        one; only :mod:`kg.rag.function_jobs` uses it).
    """

    settings: Settings
    db: Database
    index: VectorIndex
    graphs: GraphCache
    search_cache: LRUCache[Any]
    llm: LLM
    weaviate_clients: ClientPool

    # Read-only (properties), so that a Services whose indexer and job runner are of narrower
    # types still is Resources: a protocol's plain attributes must match their types exactly.
    @property
    def indexer(self) -> IndexWorker: ...

    @property
    def jobs(self) -> object: ...

    def embedder(self, name: str) -> Embedder:
        """The embedder called ``name`` (``<provider>:<model>``), made once per process."""


class UnitOfWork:
    """One write transaction: its session, its caller, and what to do once it committed.

    Made by :func:`unit_of_work` (or :func:`run`); a use case receives it and never commits.

    Parameters
    ----------
    services : Resources
    session : Session
        The write transaction (``BEGIN IMMEDIATE`` on SQLite).
    actor : Actor
        The caller.
    """

    def __init__(self, services: Resources, session: Session, actor: Actor) -> None:
        self.services = services
        self.session = session
        self.actor = actor
        self._hooks: list[Callable[[], None]] = []
        self._queued: dict[int, list[str]] = {}

    def begin(self, repo: str, branch: str = MAIN, *, message: str | None = None,
              actor: str | None = None) -> WriteContext:
        """Open a write on ``branch`` of ``repo``; its revision is allocated by the first write.

        Parameters
        ----------
        repo, branch : str
        message : str or None
            Why: kept in the revision log.
        actor : str or None
            Who, as the caller states it; default: the caller's name.

        Returns
        -------
        kg.store.repos.WriteContext

        Raises
        ------
        kg.errors.NotFound
            Unknown repository or branch.
        kg.errors.InvalidInput
            An ``actor`` longer than 255 characters.
        """
        return begin_write(self.session, repo, branch, message=message,
                           actor=actor if actor is not None else self.actor.name)

    def after_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the transaction has committed (never if it rolls back).

        Parameters
        ----------
        hook : callable()
            Hooks run in the order they were added.
        """
        self._hooks.append(hook)

    def index_after_commit(self, repo_id: int, content_keys: Sequence[str]) -> None:
        """Once committed, index the texts this transaction queued: at once with
        ``KG_INDEX_INLINE``, else by waking the background indexer.

        Parameters
        ----------
        repo_id : int
            The repository whose queue holds them.
        content_keys : sequence of str
            Content keys of the queued texts (64 hexadecimal digits each); empty: nothing.
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


@contextmanager
def unit_of_work(services: Resources, actor: Actor) -> Iterator[UnitOfWork]:
    """A write transaction for ``actor``: committed when the block ends, rolled back on any
    error (no partial write); the after-commit hooks run after the commit.

    Parameters
    ----------
    services : Resources
    actor : Actor

    Yields
    ------
    UnitOfWork
    """
    with services.db.write() as session:
        uow = UnitOfWork(services, session, actor)
        yield uow
    uow.committed()


@contextmanager
def reading(services: Resources, caller: Actor, repo: str, branch: str = MAIN,
            at_revision: int | None = None) -> Iterator[tuple[Session, BranchView]]:
    """A read session and the view of ``branch`` (as of ``at_revision``) that ``caller`` reads.

    Every read of a branch's content goes through here, so who may read what is decided in
    one place.

    Parameters
    ----------
    services : Resources
    caller : Actor
    repo, branch : str
    at_revision : int or None
        Read the branch as of this revision (None: its head).

    Yields
    ------
    (Session, kg.store.repos.BranchView)

    Raises
    ------
    kg.errors.NotFound
        Unknown repository or branch.
    kg.errors.InvalidInput
        A revision not written yet.
    """
    with services.db.read() as session:
        yield session, branch_view(session, repo, branch, at_revision=at_revision)


def run(services: Resources, actor: Actor, use_case: Callable[Concatenate[UnitOfWork, P], T], /,
        *args: P.args, **kwargs: P.kwargs) -> T:
    """Call the write use case ``use_case`` in a unit of work of its own and commit it.

    Parameters
    ----------
    services : Resources
    actor : Actor
        The caller.
    use_case : callable(UnitOfWork, ...)
        A write use case.
    *args, **kwargs
        Its other arguments.

    Returns
    -------
    object
        What the use case returned, once committed and its hooks run.

    Raises
    ------
    kg.errors.KGError
        What the use case raised; nothing of it is written.
    """
    with unit_of_work(services, actor) as uow:
        result = use_case(uow, *args, **kwargs)
    return result
