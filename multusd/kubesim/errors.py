"""API errors as values that render to the apiserver's ``Status`` objects.

Clients branch on ``code`` and ``reason`` (client-go's ``IsNotFound``, kubernetes_asyncio's
``ApiException.status``), and kubectl prints ``message`` verbatim, so all three follow the texts
the real apiserver produces (``k8s.io/apimachinery/pkg/api/errors``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multusd.kubesim.resources import ResourceType


@dataclass(slots=True)
class ApiError(Exception):
    """An error response: HTTP ``code``, Status ``reason`` and ``message``, optional details."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _details(rt, name),
    )


def precondition_failed(rt: ResourceType, name: str, what: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.group_resource} "{name}": Precondition failed: '
        f"{what}",
        _details(rt, name),
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_old(requested: int, oldest: int) -> ApiError:
    """The watch cache's 410 for a resourceVersion its window no longer covers; ``oldest`` is
    the oldest version still resumable (``getAllEventsSinceLocked`` in
    ``apiserver/pkg/storage/cacher/watch_cache.go``: ``errors.NewResourceExpired(fmt.Sprintf(
    "too old resource version: %d (%d)", resourceVersion, oldest-1))``)."""
    return expired(f"too old resource version: {requested} ({oldest})")


def too_large(requested: int, current: int) -> ApiError:
    """A version from the future (a client that saw a newer server, e.g. before an etcd
    restore). The watch cache waits up to 3 s for it (``waitUntilFreshAndBlock``), then answers
    ``storage.NewTooLargeResourceVersionError``: a ``NewTimeoutError`` (504, reason Timeout,
    "Timeout: " before the text) with a ``ResourceVersionTooLarge`` cause and Retry-After 1 s.
    The emulator answers at once."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {
                    "reason": "ResourceVersionTooLarge",
                    "message": "Too large resource version",
                }
            ],
            "retryAfterSeconds": 1,
        },
    )


def invalid_list_options(causes: list[tuple[str, str, str]]) -> ApiError:
    """422 for query parameters the apiserver's ``ValidateListOptions`` refuses; ``causes`` are
    (field, cause reason, detail), e.g. ("sendInitialEvents", "FieldValueForbidden",
    "Forbidden: sendInitialEvents is forbidden for watch unless ..."). The message is
    ``errors.NewInvalid``'s: the errors joined, in brackets when there are several."""
    texts = [f"{f}: {detail}" for f, _reason, detail in causes]
    joined = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
    return ApiError(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {joined}',
        {
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [
                {"reason": reason, "message": detail, "field": f} for f, reason, detail in causes
            ],
        },
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 with one cause per (field, message); the message lists them like the apiserver."""
    text = "; ".join(f"{f}: {m}" for f, m in causes)
    details = _details(rt, name)
    details["kind"] = rt.kind
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes
    ]
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {text}', details)


def too_long(rt: ResourceType, name: str, field: str, limit: int) -> ApiError:
    """422 for a field past its size limit, as ``errors.NewInvalid`` renders ``field.TooLong``
    (cause ``FieldValueTooLong``; the value itself left out). The message names the kind with
    its group, ``GroupKind.String()``: ``Pod``, ``NetworkAttachmentDefinition.k8s.cni.cncf.io``."""
    detail = f"Too long: must have at most {limit} bytes"
    details = _details(rt, name)
    details["kind"] = rt.kind
    details["causes"] = [{"reason": "FieldValueTooLong", "message": detail, "field": field}]
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field}: {detail}', details)


def too_many_requests(retry_after: int) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "kubesim: injected fault: too many requests, please try again later",
        {"retryAfterSeconds": retry_after},
        {"Retry-After": str(retry_after)},
    )


def internal(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def unavailable(message: str, retry_after: int = 1) -> ApiError:
    return ApiError(
        503,
        "ServiceUnavailable",
        message,
        {"retryAfterSeconds": retry_after},
        {"Retry-After": str(retry_after)},
    )


def injected(code: int, retry_after: int) -> ApiError:
    """The error a fault rule asks for, with the reason the apiserver pairs with that code."""
    if code == 429:
        return too_many_requests(retry_after)
    if code == 503:
        return unavailable("kubesim: injected fault: service unavailable", retry_after)
    if code == 504:
        return ApiError(504, "Timeout", "kubesim: injected fault: timeout")
    if code == 500:
        return internal("kubesim: injected fault")
    return ApiError(code, "Unknown", f"kubesim: injected fault ({code})")


def not_acceptable(accept: str) -> ApiError:
    return ApiError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: application/json (asked for {accept!r})",
    )


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)} (got {content_type!r})",
    )


def method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method ({method})")


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def namespace_not_found(name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'namespaces "{name}" not found', {"name": name, "kind": "namespaces"}
    )
