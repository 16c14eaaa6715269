"""The HTTP/1.1 protocol ``kg serve`` runs: uvicorn's h11 protocol with a deadline on request heads.

uvicorn bounds how long an idle keep-alive connection lives (``timeout_keep_alive``) and how
large a request head may be (``h11_max_incomplete_event_size``), but not how long a client may
take to send one: a connection that sends nothing, or sends its headers a byte at a time, each
byte cancelling the keep-alive timer, holds its slot for as long as it likes (the "slowloris"
attack). Here a request's head (request line and headers) must be complete within
``KG_HEADER_TIMEOUT_S`` seconds of the connection opening, or of the previous response on a
keep-alive connection; otherwise the connection is closed. A body has its own deadline and
minimum rate (``KG_BODY_TIMEOUT_S``, ``KG_BODY_MIN_BYTES_PER_S``), kept by the request guard
(api/guard.py) with its size (``KG_MAX_BODY_BYTES``) and the bytes all bodies hold.

References
----------
.. [1] R. Hansen, "Slowloris HTTP DoS", 2009; Apache's ``mod_reqtimeout`` ``header=`` deadline
   is the same defence.
"""

from __future__ import annotations

import asyncio
import functools
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from kg.settings import Settings

log = logging.getLogger("kg.serve")


@functools.cache
def header_timeout_s() -> float:
    """``KG_HEADER_TIMEOUT_S`` of this process, read once (every worker reads its own)."""
    return Settings().header_timeout_s


class HeadDeadlineH11Protocol(H11Protocol):
    """:class:`uvicorn.protocols.http.h11_impl.H11Protocol` that closes a connection whose
    request head is not complete within :func:`header_timeout_s` seconds."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Accept the connection and start the deadline of its first request head.

        Parameters
        ----------
        transport : asyncio.Transport
        """
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        """Feed the bytes to h11; once a request's head is complete, its deadline is off.

        Parameters
        ----------
        data : bytes
        """
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_deadline()

    def on_response_complete(self) -> None:
        """The response is sent: the next request's head has its own deadline."""
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the deadline with the connection.

        Parameters
        ----------
        exc : Exception or None
        """
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_timer = self.loop.call_later(header_timeout_s(), self._head_deadline_passed)

    def _disarm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_deadline_passed(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.info("closing a connection from %s: no complete request head in %g s",
                     self.client, header_timeout_s())
            self.transport.close()
