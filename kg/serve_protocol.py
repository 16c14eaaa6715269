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

A request h11 cannot parse (a malformed request line, a bad ``Content-Length``, invalid
chunking, a malformed header, a head over 64 KiB) is answered in the API's error shape
(:func:`kg.errors.error_body`: code ``malformed``, or ``too_large`` for the head) with the
status h11 suggests (400; 431 for the head; 501 for an unsupported ``Transfer-Encoding``), not
uvicorn's ``text/plain``. The connection is closed after it: its framing cannot be trusted.

References
----------
.. [1] R. Hansen, "Slowloris HTTP DoS", 2009; Apache's ``mod_reqtimeout`` ``header=`` deadline
   is the same defence.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import sys
from http import HTTPStatus

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from kg.errors import KGError, MalformedInput, TooLarge, error_body
from kg.settings import Settings

log = logging.getLogger("kg.serve")


#: Seconds a connection refused for its framing stays open to drain what the client still sends.
LINGER_S = 2.0


@functools.cache
def header_timeout_s() -> float:
    """``KG_HEADER_TIMEOUT_S`` of this process, read once (every worker reads its own)."""
    return Settings().header_timeout_s


class HeadDeadlineH11Protocol(H11Protocol):
    """:class:`uvicorn.protocols.http.h11_impl.H11Protocol` that closes a connection whose
    request head is not complete within :func:`header_timeout_s` seconds."""

    _head_timer: asyncio.TimerHandle | None = None
    _refused = False

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
        if self._refused:  # answered and closing: the rest is dropped
            return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_deadline()

    def send_400_response(self, msg: str) -> None:
        """Answer a request h11 refused (:func:`framing_error`) in the API's error shape, then
        close the connection.

        Called by uvicorn while it handles h11's :class:`h11.RemoteProtocolError`.

        Parameters
        ----------
        msg : str
            uvicorn's text ("Invalid HTTP request received."), for an error that is not h11's.
        """
        refused = sys.exc_info()[1]
        status, error = framing_error(refused if isinstance(refused, h11.RemoteProtocolError) else None, msg)
        body = json.dumps(error_body(error.code, error.message, error.details)).encode()
        try:
            head = h11.Response(status_code=status, reason=HTTPStatus(status).phrase.encode(), headers=[
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"connection", b"close")])
            self.transport.write(self.conn.send(head) or b"")
            self.transport.write(self.conn.send(h11.Data(data=body)) or b"")
            self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError:  # a response had started: nothing more can be said
            self.transport.close()
            return
        self._linger()

    def _linger(self) -> None:
        """Close after an answer while the client may still be sending: the answer is sent and
        our side shut (FIN), what still arrives is read and dropped for
        :data:`LINGER_S` seconds, then the connection is closed. Closed at once, the kernel
        would answer the unread bytes with a reset, which can destroy the answer before the
        client reads it."""
        self._refused = True
        self._disarm_head_deadline()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

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


def framing_error(refused: h11.RemoteProtocolError | None, fallback: str = "") -> tuple[int, KGError]:
    """The status and kg error of a request that is not valid HTTP/1.1.

    Parameters
    ----------
    refused : h11.RemoteProtocolError or None
        What h11 found wrong.
    fallback : str
        The reason when there is no h11 error.

    Returns
    -------
    (int, kg.errors.KGError)
        h11's status hint (400 unless it suggests another 4xx/5xx) and
        :class:`kg.errors.TooLarge` for a head over the limit (431), else
        :class:`kg.errors.MalformedInput` naming h11's reason.

    Examples
    --------
    >>> status, error = framing_error(h11.RemoteProtocolError("illegal request line"))
    >>> status, error.code, error.message
    (400, 'malformed', 'the request is not valid HTTP/1.1: illegal request line')
    >>> framing_error(h11.RemoteProtocolError("illegal header line: bytearray(b'Bad')"))[1].message
    "the request is not valid HTTP/1.1: illegal header line: 'Bad'"
    """
    hint = refused.error_status_hint if refused is not None else 400
    status = hint if 400 <= hint < 600 else 400
    reason = str(refused) if refused is not None and str(refused) else fallback or "unreadable request"
    reason = re.sub(r"bytearray\((b'[^']*'|b\"[^\"]*\")\)", lambda m: m.group(1)[1:], reason)  # h11's reprs
    if status == 431:
        return status, TooLarge(f"the request head is larger than this server reads: {reason}",
                                details={"reason": reason})
    return status, MalformedInput(f"the request is not valid HTTP/1.1: {reason}", details={"reason": reason})
