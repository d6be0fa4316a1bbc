"""HTTP failures and watch ERROR events become typed ApiErrors built from the Status body."""

from __future__ import annotations

import email.utils
import json

import pytest

from multusd.k8s.errors import (
    ApiError,
    Conflict,
    Gone,
    NotFound,
    ServerError,
    TooManyRequests,
    TransportError,
    error_from_response,
    error_from_status,
    is_transient,
    parse_retry_after,
)


def status_body(code: int, reason: str, message: str, **details: object) -> bytes:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("code", "reason", "cls", "transient"),
    [
        (400, "BadRequest", ApiError, False),
        (401, "Unauthorized", ApiError, False),
        (403, "Forbidden", ApiError, False),
        (404, "NotFound", NotFound, False),
        (409, "Conflict", Conflict, False),
        (409, "AlreadyExists", Conflict, False),
        (410, "Expired", Gone, False),
        (422, "Invalid", ApiError, False),
        (429, "TooManyRequests", TooManyRequests, True),
        (500, "InternalError", ServerError, True),
        (503, "ServiceUnavailable", ServerError, True),
        (504, "Timeout", ServerError, True),
    ],
)
def test_status_body_maps_to_class(
    code: int, reason: str, cls: type[ApiError], transient: bool
) -> None:
    err = error_from_response(code, status_body(code, reason, f"text {code}"), {})
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (code, reason, f"text {code}")
    assert is_transient(err) is transient
    assert err.retry_after is None
    assert str(err) == f"{code} {reason}: text {code}"


def test_retry_after_header_wins_over_details() -> None:
    body = status_body(429, "TooManyRequests", "slow down", retryAfterSeconds=7)
    assert error_from_response(429, body, {}).retry_after == 7.0
    err = error_from_response(429, body, {"Retry-After": "2"})
    assert isinstance(err, TooManyRequests)
    assert err.retry_after == 2.0


def test_http_status_decides_class_even_if_status_code_disagrees() -> None:
    err = error_from_response(404, status_body(500, "InternalError", "odd"), {})
    assert isinstance(err, NotFound)
    assert err.status == 404


def test_non_status_body_keeps_a_short_message() -> None:
    err = error_from_response(502, b"<html>" + b"x" * 5000 + b"</html>", {"Retry-After": "1"})
    assert isinstance(err, ServerError)
    assert err.reason == ""
    assert err.message.startswith("<html>")
    assert len(err.message) <= 512
    assert err.retry_after == 1.0
    assert isinstance(error_from_response(404, b"", None), NotFound)
    assert isinstance(error_from_response(500, b"\xff\xfe not json", None), ServerError)


def test_watch_error_event_status() -> None:
    err = error_from_status(
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    )
    assert isinstance(err, Gone)
    assert (err.status, err.reason) == (410, "Expired")
    err = error_from_status({"kind": "Status", "code": 500, "message": "boom"})
    assert isinstance(err, ServerError)
    assert err.reason == ""
    err = error_from_status({"kind": "Status"})
    assert type(err) is ApiError
    assert err.status == 0


def test_transport_error_and_defaults() -> None:
    err = TransportError("connection refused")
    assert (err.status, err.reason, err.retry_after) == (0, "", None)
    assert is_transient(err)
    assert str(err) == "connection refused"
    assert NotFound("x").status == 404
    assert Gone().status == 410
    assert ApiError("m", status=418, reason="Teapot").status == 418
    assert "NotFound" in repr(NotFound("gone", reason="NotFound"))


def test_parse_retry_after() -> None:
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("nan") is None
    assert parse_retry_after("soon") is None
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert parse_retry_after(date, now=1_000_000) == pytest.approx(10.0)
    assert parse_retry_after(date, now=1_000_100) == 0.0
