"""A branch's change feed as an MCP resource, and subscriptions to it.

The resource :data:`CHANGES_URI_TEMPLATE` (``kg://acme/changes?branch=agent%2Fs1``) reads the
feed of :mod:`kg.ops.changes` as the caller may see it: the latest page, or with ``after`` the
page after that cursor (its ``next_after`` resumes). A client that holds a session (stdio, or
streamable HTTP with ``KG_MCP_SESSIONS``) may ``resources/subscribe`` to such a URI
(MCP 2025-06-18, "Resources: Subscriptions"): :class:`ChangeSubscriptions` then follows the
feed for it, every ``KG_CHANGES_POLL_S`` seconds through the same use case with the
subscriber's caller, and sends ``notifications/resources/updated`` with the subscribed URI when
a revision or branch event the caller may see lands on that branch. A revision a scoped key
sees nothing of moves the cursor silently, as on the HTTP stream. Each subscription holds one
of the caller's ``KG_CHANGES_MAX_STREAMS`` slots (:func:`kg.ops.changes.stream_slot`), shared
with the HTTP streams.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import anyio.to_thread
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    EmptyResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from kg.access import Actor
from kg.context import Resources
from kg.errors import BackendUnavailable, KGError, ProviderError, error_body
from kg.ops import changes as change_ops

log = logging.getLogger("kg.mcp")
#: The connection state's mark: its end stops its followers (registered once).
_STATE = "kg.changes.followed"

#: A branch's change feed: ``kg://acme/changes?branch=main`` (default: the connection's branch).
CHANGES_URI_TEMPLATE = "kg://{repo}/changes{?branch,after}"
#: What a subscribe is told by a server without sessions (stateless streamable HTTP).
NO_SESSIONS = ("resources/subscribe needs a session: this kg server serves MCP statelessly; its operator "
               "turns on KG_MCP_SESSIONS (or use `kg mcp` over stdio)")


def changes_uri(repo: str, branch: str) -> str:
    """The resource URI of ``branch``'s change feed.

    Parameters
    ----------
    repo, branch : str
        The repository and the branch.

    Returns
    -------
    str
        ``kg://{repo}/changes?branch={branch}``, each part percent-encoded.

    Examples
    --------
    >>> changes_uri("acme", "agent/s1")
    'kg://acme/changes?branch=agent%2Fs1'
    """
    return f"kg://{quote(repo, safe='')}/changes?branch={quote(branch, safe='')}"


@dataclass(frozen=True)
class FeedAddress:
    """What a change feed URI names.

    Attributes
    ----------
    repo : str
        The repository.
    branch : str or None
        The branch (None: the connection's).
    """

    repo: str
    branch: str | None


def parse_changes_uri(uri: str) -> FeedAddress | None:
    """The repository and branch of a change feed URI, None for any other URI.

    Parameters
    ----------
    uri : str
        A resource URI.

    Returns
    -------
    FeedAddress or None
        None unless ``uri`` is ``kg://{repo}/changes`` with an optional query.

    Examples
    --------
    >>> parse_changes_uri("kg://acme/changes?branch=agent%2Fs1")
    FeedAddress(repo='acme', branch='agent/s1')
    >>> parse_changes_uri("kg://acme/kb/docs/a?branch=main") is None
    True
    """
    parts = urlsplit(uri)
    if parts.scheme != "kg" or not parts.netloc or parts.path != "/changes":
        return None
    branch = parse_qs(parts.query).get("branch", [None])[0]
    return FeedAddress(unquote(parts.netloc), branch or None)


def mcp_error(exc: KGError, uri: str) -> MCPError:
    """A kg error of a resource request as the MCP error it is answered with.

    Parameters
    ----------
    exc : kg.errors.KGError
        What the use case raised.
    uri : str
        The resource.

    Returns
    -------
    mcp.MCPError
        ``INTERNAL_ERROR`` for a backend's failure, else ``INVALID_PARAMS``; the message
        ``"<code>: <message>"``, the data the URI and the API's error shape.
    """
    code = INTERNAL_ERROR if isinstance(exc, BackendUnavailable | ProviderError) else INVALID_PARAMS
    return MCPError(code=code, message=f"{exc.code}: {exc.message}",
                    data={"uri": uri, **error_body(exc.code, exc.message, exc.details)})


class ChangeSubscriptions:
    """The ``resources/subscribe`` and ``resources/unsubscribe`` handlers, and the followers
    that notify each subscribed session.

    Parameters
    ----------
    services : kg.context.Resources
        The store; its settings' ``changes_poll_s`` and ``changes_max_streams``.
    caller_of : callable(request) -> (repo, branch, caller)
        The connection's repository, branch and caller of a request (the server's binder).
    enabled : bool
        False on a transport that cannot push (stateless streamable HTTP): a subscribe is
        refused with :data:`NO_SESSIONS`.
    """

    def __init__(self, services: Resources, caller_of: Any, *, enabled: bool = True) -> None:
        self.services = services
        self.caller_of = caller_of
        self.enabled = enabled
        # (session, uri) -> the task following that feed for that session.
        self._followers: dict[tuple[object, str], asyncio.Task[None]] = {}

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        """``resources/subscribe``: follow a change feed for this session.

        Parameters
        ----------
        ctx : mcp.server.context.ServerRequestContext
            The request (its session receives the notifications).
        params : mcp.types.SubscribeRequestParams
            The URI, :data:`CHANGES_URI_TEMPLATE`.

        Returns
        -------
        mcp.types.EmptyResult
            Subscribed (again: nothing changes).

        Raises
        ------
        mcp.MCPError
            Not a change feed URI, a repository or branch the caller may not read, the caller's
            slots all held (``rate_limited``), or a server without sessions.
        """
        uri = str(params.uri)
        if not self.enabled:
            raise MCPError(code=METHOD_NOT_FOUND, message=NO_SESSIONS, data={"uri": uri})
        address = parse_changes_uri(uri)
        if address is None:
            raise MCPError(code=INVALID_PARAMS, message=f"only a branch's change feed can be subscribed "
                                                        f"(kg://REPO/changes?branch=BRANCH), not {uri}",
                           data={"uri": uri})
        connection = _connection(ctx)
        key = (connection, uri)
        if key in self._followers:
            return EmptyResult()
        _repo, connection_branch, caller = self.caller_of(ctx.request)
        branch = address.branch or connection_branch
        try:
            start = await anyio.to_thread.run_sync(
                lambda: change_ops.head_cursor(self.services, caller, address.repo, branch=branch))
            slot = change_ops.stream_slot(self.services, caller)
            slot.__enter__()
        except KGError as exc:
            raise mcp_error(exc, uri) from exc
        if not connection.state.get(_STATE):  # the connection's end stops its followers
            connection.state[_STATE] = True
            connection.exit_stack.callback(self._forget, connection)
        self._followers[key] = asyncio.get_running_loop().create_task(
            self._follow(connection, uri, caller, address.repo, branch, start, slot))
        return EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        """``resources/unsubscribe``: stop following the feed for this session.

        Parameters
        ----------
        ctx : mcp.server.context.ServerRequestContext
            The request.
        params : mcp.types.UnsubscribeRequestParams
            The URI subscribed.

        Returns
        -------
        mcp.types.EmptyResult
            Unsubscribed (or was not subscribed).

        Raises
        ------
        mcp.MCPError
            A server without sessions.
        """
        if not self.enabled:
            raise MCPError(code=METHOD_NOT_FOUND, message=NO_SESSIONS, data={"uri": str(params.uri)})
        task = self._followers.pop((_connection(ctx), str(params.uri)), None)
        if task is not None:
            task.cancel()
        return EmptyResult()

    def _forget(self, connection: Any) -> None:
        """Stop the followers of a connection that closed."""
        for key in [k for k in self._followers if k[0] is connection]:
            self._followers.pop(key).cancel()

    async def _follow(self, connection: Any, uri: str, caller: Actor, repo: str, branch: str, after: str,
                      slot: AbstractContextManager[None]) -> None:
        """Read the feed after ``after`` every poll; notify ``connection`` when it lists an event."""
        try:
            while True:
                await anyio.sleep(self.services.settings.changes_poll_s)
                has_more = True
                seen = False
                while has_more:
                    page = await anyio.to_thread.run_sync(functools.partial(
                        change_ops.changes, self.services, caller, repo, branch=branch, after=after,
                        limit=change_ops.MAX_PAGE, max_changes=1))
                    after, has_more = page.next_after, page.has_more
                    seen = seen or bool(page.events)
                if seen:
                    await connection.send_resource_updated(uri)
        except KGError as exc:  # the branch was deleted, the key lost its grant
            log.info("kg mcp: the subscription to %s ended: %s", uri, exc.message)
        finally:
            slot.__exit__(None, None, None)
            if self._followers.get((connection, uri)) is asyncio.current_task():
                del self._followers[(connection, uri)]


def _connection(ctx: ServerRequestContext[Any, Any]) -> Any:
    """The connection of a request (the SDK's ``ServerSession`` is a proxy built per request)."""
    return ctx.session._connection  # noqa: SLF001 - the SDK exposes it on Context, not here
