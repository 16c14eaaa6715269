"""Validity of relations in world time (issue 17). Pure: no session, no I/O.

A relation version may carry ``valid_from`` and ``valid_to`` (timezone-aware; None: unbounded)
and ``invalidated_by`` (the relation that superseded it). It is *valid at* time ``t`` when
``valid_from`` is None or ``valid_from <= t``, and ``valid_to`` is None or ``t < valid_to``
(a half-open interval). An invalidation always closes the interval (it sets ``valid_to``), so
the interval is the whole rule; ``invalidated_by`` says why it closed.

Reads take a :data:`ValidAt`: a time (answer the facts valid then: ``as_of``, or now by
default) or None (``include_invalid``: every fact, whatever its interval). Together with
``at_revision`` (what the store held then) this is bi-temporal: world time and transaction time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kg.errors import InvalidInput

#: The world time relations are read at; None reads every relation (``include_invalid``).
ValidAt = datetime | None


def valid_at(valid_from: datetime | None, valid_to: datetime | None, at: ValidAt) -> bool:
    """Whether an interval ``[valid_from, valid_to)`` holds ``at`` (always, when ``at`` is None).

    Parameters
    ----------
    valid_from, valid_to : datetime or None
        Timezone-aware bounds; None is unbounded.
    at : datetime or None
        The world time read; None accepts every interval.

    Returns
    -------
    bool

    Examples
    --------
    >>> from datetime import datetime, UTC
    >>> valid_at(None, datetime(2020, 1, 1, tzinfo=UTC), datetime(2019, 1, 1, tzinfo=UTC))
    True
    """
    if at is None:
        return True
    return (valid_from is None or valid_from <= at) and (valid_to is None or at < valid_to)


def read_time(as_of: datetime | None = None, include_invalid: bool = False) -> ValidAt:
    """The :data:`ValidAt` of a read: None with ``include_invalid``, else ``as_of`` or now.

    Parameters
    ----------
    as_of : datetime or None
        A timezone-aware world time; None: now.
    include_invalid : bool
        Read every relation, whatever its validity (``as_of`` is then ignored).

    Returns
    -------
    datetime or None

    Raises
    ------
    kg.errors.InvalidInput
        ``as_of`` is naive (no zone).
    """
    if include_invalid:
        return None
    if as_of is None:
        return datetime.now(UTC)
    return aware(as_of, "as_of")


def aware(value: Any, name: str) -> datetime:
    """A timezone-aware datetime from a datetime or an ISO 8601 string with a zone.

    Parameters
    ----------
    value : datetime or str
    name : str
        The field's name, for the message.

    Returns
    -------
    datetime
        In UTC.

    Raises
    ------
    kg.errors.InvalidInput
        Not a time, a time without a zone, or one outside the years 1 to 9999 once in UTC
        (``0001-01-01T00:00:00+01:00`` is in the year 0 in UTC).
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00") if value.endswith("Z") else value)
        except ValueError as exc:
            raise InvalidInput(
                f"{name} must be an ISO 8601 time with a zone, got {value!r}", details={name: value}
            ) from exc
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be an ISO 8601 time with a zone", details={name: str(value)})
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(
            f"{name} must carry a time zone (ISO 8601, e.g. 2026-01-01T00:00:00Z)", details={name: value.isoformat()}
        )
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidInput(
            f"{name} is out of range: in UTC it falls outside the years 1 to 9999", details={name: value.isoformat()}
        ) from exc


def maybe_aware(value: Any, name: str) -> datetime | None:
    """:func:`aware`, passing None through."""
    return None if value is None else aware(value, name)


def check_interval(valid_from: datetime | None, valid_to: datetime | None) -> None:
    """Refuse an interval that ends before it starts.

    Raises
    ------
    kg.errors.InvalidInput
        ``valid_to < valid_from``.
    """
    if valid_from is not None and valid_to is not None and valid_to < valid_from:
        raise InvalidInput(
            "valid_to must not be earlier than valid_from",
            details={"field": "valid_to", "valid_from": valid_from.isoformat(), "valid_to": valid_to.isoformat()},
        )


def iso(value: datetime | None) -> str | None:
    """ISO 8601 text of a time (None passes)."""
    return None if value is None else value.isoformat()
