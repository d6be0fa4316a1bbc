"""Names that go into an API path: checked as client-go checks them, before any request.

A pod's name and namespace come from the runtime's ``CNI_ARGS``, a NAD's from the pod's
annotation, which anyone who may create pods writes. Put into a URL unchecked, ``..`` or ``/``
walks the path elsewhere (``pods/../../secrets/x``: a GET of a secret with the daemon's
credentials, read back as a NAD), and ``%2F`` does the same once decoded. client-go refuses such
names in ``Request.Namespace``/``Request.Name`` (``IsValidPathSegmentName``: not ``.`` or
``..``, no ``/`` or ``%``) with the texts below, which upstream's errors then quote
(docs/compatibility.md, 43).
"""

from __future__ import annotations

from cni_shim.goquote import go_quote
from multusd.k8s.errors import ApiError

_MAY_NOT_BE = (".", "..")
_MAY_NOT_CONTAIN = ("/", "%")


class InvalidName(ApiError):
    """A name client-go would refuse to put into a path; no request was made."""


def segment_problems(value: str) -> list[str]:
    """client-go's ``IsValidPathSegmentName``: what is wrong with ``value`` as a path segment."""
    if value in _MAY_NOT_BE:
        return [f"may not be '{value}'"]
    return [f"may not contain '{bad}'" for bad in _MAY_NOT_CONTAIN if bad in value]


def checked_name(name: str) -> str:
    """``name`` for ``Request.Name``; :class:`InvalidName` with client-go's text otherwise."""
    if not name:
        raise InvalidName("resource name may not be empty")
    if problems := segment_problems(name):
        raise InvalidName(f"invalid resource name {go_quote(name)}: [{' '.join(problems)}]")
    return name


def checked_namespace(namespace: str) -> str:
    """``namespace`` for ``Request.Namespace`` (empty: cluster-scoped, allowed there)."""
    if problems := segment_problems(namespace):
        raise InvalidName(f"invalid namespace {go_quote(namespace)}: [{' '.join(problems)}]")
    return namespace
