"""Failures talking to the API server, as typed values.

Callers branch on the class (``except NotFound``) or on ``is_transient``, never on message text.
The class comes from the HTTP status (or, for a watch ``ERROR`` event, the Status ``code``);
``reason`` and ``message`` are the apiserver's own ``Status`` fields so logs read like kubectl's.
Transport trouble (refused, reset, TLS, timeouts) is ``TransportError`` with status 0, chained
to the HTTP/OS error that caused it.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "ApiError",
    "Conflict",
    "Gone",
    "NotFound",
    "ServerError",
    "TooManyRequests",
    "TransportError",
    "error_from_response",
    "error_from_status",
    "is_transient",
    "parse_retry_after",
]

_MAX_MESSAGE = 512  # a non-Status error body (an HTML proxy page, say) is cut to this


class ApiError(Exception):
    """Every failure talking to the API server.

    ``status`` is the HTTP status (0 for transport errors), ``reason`` the Status ``reason``
    ("NotFound", "Conflict", "Expired", ...) or "", ``retry_after`` the server's ``Retry-After``
    in seconds (429/503), if any.
    """

    STATUS: ClassVar[int] = 0

    def __init__(
        self,
        message: str = "",
        *,
        status: int | None = None,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = self.STATUS if status is None else status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    def __str__(self) -> str:
        head = f"{self.status} {self.reason}".strip() if self.status else self.reason
        return f"{head}: {self.message}" if head else self.message

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, reason={self.reason!r}, "
            f"message={self.message!r}, retry_after={self.retry_after!r})"
        )


class NotFound(ApiError):
    STATUS = 404


class Conflict(ApiError):
    """409: a stale resourceVersion on update, or AlreadyExists on create (see ``reason``)."""

    STATUS = 409


class Gone(ApiError):
    """410: the resourceVersion is older than the server's history; relist."""

    STATUS = 410


class TooManyRequests(ApiError):
    STATUS = 429


class ServerError(ApiError):
    STATUS = 500


class TransportError(ApiError):
    """No HTTP answer: connection refused/reset, TLS failure, timeout, broken stream."""

    STATUS = 0


def is_transient(exc: ApiError) -> bool:
    """Worth retrying with backoff: 429, any 5xx, and transport failures."""
    return isinstance(exc, TooManyRequests | ServerError | TransportError)


def _class_for(status: int) -> type[ApiError]:
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status == 410:
        return Gone
    if status == 429:
        return TooManyRequests
    if status >= 500:
        return ServerError
    return ApiError


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds (what the apiserver sends) or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _retry_after_from_details(status_obj: Mapping[str, Any]) -> float | None:
    details = status_obj.get("details")
    if isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
            return float(seconds)
    return None


def error_from_status(status_obj: Mapping[str, Any], *, http_status: int = 0) -> ApiError:
    """The error a ``Status`` object describes (a watch ``ERROR`` event's object, or an error
    response body). Its ``code`` decides the class unless ``http_status`` is given."""
    code = status_obj.get("code")
    status = http_status or (code if isinstance(code, int) and not isinstance(code, bool) else 0)
    reason = status_obj.get("reason")
    message = status_obj.get("message")
    return _class_for(status)(
        str(message) if message is not None else "",
        status=status,
        reason=str(reason) if reason is not None else "",
        retry_after=_retry_after_from_details(status_obj),
    )


def error_from_response(
    status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> ApiError:
    """The error for a failed HTTP response: class from ``status``, text from the Status body
    when there is one (else the body itself, shortened), ``Retry-After`` from the header (or
    the Status' ``details.retryAfterSeconds``)."""
    status_obj: Mapping[str, Any] | None = None
    try:
        decoded = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        status_obj = decoded
    if status_obj is not None:
        err = error_from_status(status_obj, http_status=status)
    else:
        text = body[:_MAX_MESSAGE].decode("utf-8", errors="replace").strip()
        err = _class_for(status)(text, status=status)
    header = parse_retry_after(headers.get("Retry-After")) if headers is not None else None
    if header is not None:
        err.retry_after = header
    return err
