"""The clients: :class:`Client` (sync) and :class:`AsyncClient` (async), over httpx.

Each operation is written once, as a builder of :mod:`kg.client.operations`; :class:`Operations`
makes it a method of both clients (the :class:`operation` descriptor), with the builder's
signature and docstring: a :class:`Client` method answers the result model, an
:class:`AsyncClient` method a coroutine of it. The two clients differ only in how they send.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload

import anyio
import httpx

from kg.client import operations as ops
from kg.client.calls import Call, Connection, retry_delay
from kg.types import ChangeEvent, Node, Repo, Revision

__all__ = ["AsyncClient", "Client", "I", "Operations", "P", "R", "T", "operation", "pages"]

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 (an item of a paginated listing)


class operation(Generic[P, T]):  # noqa: N801 (used as a decorator-like factory in class bodies)
    """A method of both clients made from an operation's builder.

    Parameters
    ----------
    build : callable
        ``(*args, **kwargs) -> Call[T]`` (:mod:`kg.client.operations`).

    Notes
    -----
    On a :class:`Client` the method is ``Callable[P, T]``; on an :class:`AsyncClient`
    ``Callable[P, Awaitable[T]]`` (the ``__get__`` overloads tell mypy and IDEs). It carries the
    builder's name, signature and docstring (``functools.wraps``).
    """

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: Client, owner: type[Any]) -> Callable[P, T]: ...

    @overload
    def __get__(self, obj: AsyncClient, owner: type[Any]) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, obj: Client | AsyncClient | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        build, execute = self.build, obj.execute

        @functools.wraps(build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return execute(build(*args, **kwargs))

        return method


class pages(Generic[P, R, I]):  # noqa: N801
    """An iterator over every page of a paginated listing, made from the listing's builder.

    Parameters
    ----------
    build : callable
        The listing's builder; the iterator takes its arguments (``limit`` is the page size).
    items : callable
        ``page -> list`` of the page's items.
    follow : callable
        ``page -> dict`` of the query of the next page (its cursor), or None after the last.
    """

    def __init__(self, build: Callable[P, Call[R]], items: Callable[[R], list[I]],
                 follow: Callable[[R], dict[str, Any] | None]) -> None:
        self.build, self.items, self.follow = build, items, follow
        self.__doc__ = f"Every item of every page of ``{build.__name__}``, page by page."

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: Client, owner: type[Any]) -> Callable[P, Iterator[I]]: ...

    @overload
    def __get__(self, obj: AsyncClient, owner: type[Any]) -> Callable[P, AsyncIterator[I]]: ...

    def __get__(self, obj: Client | AsyncClient | None, owner: type[Any]) -> Any:
        if obj is None:
            return self
        listing = self

        @functools.wraps(self.build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj.paginate(listing.build(*args, **kwargs), listing.items, listing.follow)

        method.__doc__ = self.__doc__
        return method


def _after_cursor(page: Any) -> dict[str, Any] | None:
    """The next page of a cursor listing: ``next_cursor``, None on the last."""
    return {"cursor": page.next_cursor} if page.next_cursor else None


def _after_revision(page: Any) -> dict[str, Any] | None:
    """The next page of the revision log: before the oldest revision listed; None after an empty page."""
    return {"before": page.revisions[-1].revision} if page.revisions else None


def _after_next(page: Any) -> dict[str, Any] | None:
    """The next page of the change feed: after ``next_after`` while ``has_more``; None at the end
    (call ``changes`` again later with the last ``next_after`` to follow)."""
    return {"after": page.next_after} if page.has_more else None


def _events(page: Any) -> list[ChangeEvent]:
    return list(page.events)


def _repos(page: Any) -> list[Repo]:
    return list(page.repos)


def _nodes(page: Any) -> list[Node]:
    return list(page.nodes)


def _revisions(page: Any) -> list[Revision]:
    return list(page.revisions)


class Operations:
    """Every operation of kg's HTTP API, as methods (shared by both clients).

    Path parameters come first, positionally; the rest are keywords named like the API's fields
    (``from_`` for ``from``), ``None`` leaving a field to the server's default. Shared ones:

    - ``repo``, ``ws``: repository and workspace names; ``branch``: a branch name (default
      ``main``; may contain ``/``); ``path``: a node path (``/docs/a``; the leading ``/`` optional).
    - ``at_revision``: read the branch as of this revision; ``message``, ``actor``: kept in the
      revision log of a write; ``if_revision``: refuse the write (409) if the node changed since.
    - ``limit``, ``cursor``: a page of a listing; ``iter_*`` walk every page.

    Each method answers the operation's result model of :mod:`kg.types` and raises the error
    class of :mod:`kg.errors` the answer names (``NotFound``, ``Conflict``, ``Forbidden``...).
    """

    health = operation(ops.health)
    create_repo = operation(ops.create_repo)
    list_repos = operation(ops.list_repos)
    get_repo = operation(ops.get_repo)
    delete_repo = operation(ops.delete_repo)
    create_workspace = operation(ops.create_workspace)
    list_workspaces = operation(ops.list_workspaces)
    get_workspace = operation(ops.get_workspace)
    patch_workspace = operation(ops.patch_workspace)
    log = operation(ops.log)
    batch = operation(ops.batch)
    diff = operation(ops.diff)
    merge = operation(ops.merge)
    reset_branch = operation(ops.reset_branch)
    create_branch = operation(ops.create_branch)
    list_branches = operation(ops.list_branches)
    get_branch = operation(ops.get_branch)
    delete_branch = operation(ops.delete_branch)
    put_node = operation(ops.put_node)
    patch_node = operation(ops.patch_node)
    get_node = operation(ops.get_node)
    delete_node = operation(ops.delete_node)
    list_nodes = operation(ops.list_nodes)
    lineage = operation(ops.lineage)
    references = operation(ops.references)
    search = operation(ops.search)
    export = operation(ops.export)
    import_file = operation(ops.import_file)
    index_status = operation(ops.index_status)
    retry_failed = operation(ops.retry_failed)
    relate = operation(ops.relate)
    unrelate = operation(ops.unrelate)
    neighbors = operation(ops.neighbors)
    traverse = operation(ops.traverse)
    invalidate = operation(ops.invalidate)
    get_relation_types = operation(ops.get_relation_types)
    put_relation_types = operation(ops.put_relation_types)
    rag = operation(ops.rag)
    sql = operation(ops.sql)
    invoke_function = operation(ops.invoke_function)
    get_job = operation(ops.get_job)
    create_key = operation(ops.create_key)
    list_keys = operation(ops.list_keys)
    revoke_key = operation(ops.revoke_key)
    changes = operation(ops.changes)
    add_webhook = operation(ops.add_webhook)
    list_webhooks = operation(ops.list_webhooks)
    remove_webhook = operation(ops.remove_webhook)
    webhook_deliveries = operation(ops.webhook_deliveries)

    iter_repos = pages(ops.list_repos, _repos, _after_cursor)
    iter_nodes = pages(ops.list_nodes, _nodes, _after_cursor)
    iter_log = pages(ops.log, _revisions, _after_revision)
    iter_changes = pages(ops.changes, _events, _after_next)


_CLIENT_DOC = """

    Parameters
    ----------
    base_url : str, optional
        The server, e.g. ``http://127.0.0.1:8765``; default ``KG_URL``, else that address.
    api_key : str, optional
        The bearer token ``kg_<id>_<secret>``; default ``KG_API_KEY``; none: anonymous.
    timeout : float or httpx.Timeout
        Of each request, in seconds (not used with an injected ``http`` client).
    max_retries : int
        After a 429 (rate limited) or 503 (overloaded) with ``Retry-After``, send again at most
        this many times, waiting what the server said; then raise ``RateLimited`` / ``Overloaded``.
    sleep : callable, optional
        How to wait ``Retry-After`` seconds (tests pass one that does not wait).
    http : httpx client, optional
        Send through this client (its transport, its pool); it is not closed by this one.
    transport : httpx transport, optional
        The transport of the client this one makes (an ``httpx.ASGITransport`` for an app in
        the same process, an ``httpx.MockTransport``).
"""


class Client(Operations):
    """kg's HTTP API, synchronously: ``with Client() as kg: kg.get_repo("acme")``."""

    __doc__ = (__doc__ or "") + _CLIENT_DOC

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float | httpx.Timeout = 30.0, max_retries: int = 3,
                 sleep: Callable[[float], None] = time.sleep, http: httpx.Client | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.connection = Connection.of(base_url, api_key, max_retries)
        self.sleep = sleep
        self._owned = http is None
        self.http = http if http is not None else httpx.Client(timeout=timeout, transport=transport)

    def execute(self, call: Call[T]) -> T:
        """Send ``call`` (again after a 429 / 503 with ``Retry-After``) and answer its result."""
        for attempt in itertools.count():
            response = self.http.request(**self.connection.request(call))
            delay = retry_delay(response, attempt, self.connection.max_retries)
            if delay is None:
                return call.answer(response)
            self.sleep(delay)
        raise AssertionError("unreachable")

    def paginate(self, call: Call[R], items: Callable[[R], list[I]],
                 follow: Callable[[R], dict[str, Any] | None]) -> Iterator[I]:
        """The items of ``call``'s page and of every page after it."""
        following: Call[R] | None = call
        while following is not None:
            page = self.execute(following)
            yield from items(page)
            query = follow(page)
            following = following.next_page(**query) if query is not None else None

    def close(self) -> None:
        """Close the connections (not those of an injected ``http`` client)."""
        if self._owned:
            self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class AsyncClient(Operations):
    """kg's HTTP API, asynchronously: ``async with AsyncClient() as kg: await kg.get_repo("acme")``."""

    __doc__ = (__doc__ or "") + _CLIENT_DOC

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float | httpx.Timeout = 30.0, max_retries: int = 3,
                 sleep: Callable[[float], Awaitable[None]] = anyio.sleep, http: httpx.AsyncClient | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.connection = Connection.of(base_url, api_key, max_retries)
        self.sleep = sleep
        self._owned = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=timeout, transport=transport)

    async def execute(self, call: Call[T]) -> T:
        """Send ``call`` (again after a 429 / 503 with ``Retry-After``) and answer its result."""
        for attempt in itertools.count():
            response = await self.http.request(**self.connection.request(call))
            delay = retry_delay(response, attempt, self.connection.max_retries)
            if delay is None:
                return call.answer(response)
            await self.sleep(delay)
        raise AssertionError("unreachable")

    async def paginate(self, call: Call[R], items: Callable[[R], list[I]],
                       follow: Callable[[R], dict[str, Any] | None]) -> AsyncIterator[I]:
        """The items of ``call``'s page and of every page after it."""
        following: Call[R] | None = call
        while following is not None:
            page = await self.execute(following)
            for item in items(page):
                yield item
            query = follow(page)
            following = following.next_page(**query) if query is not None else None

    async def aclose(self) -> None:
        """Close the connections (not those of an injected ``http`` client)."""
        if self._owned:
            await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, value: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()
