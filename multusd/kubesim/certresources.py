"""``certificates.k8s.io/v1`` CertificateSigningRequests and core ``v1`` Nodes, as kube-apiserver
serves them (registered in ``multusd.kubesim.state``; the signer that issues approved requests
is ``multusd.kubesim.csrsigner``).

A CertificateSigningRequest is cluster-scoped, with two subresources, and each way in changes
only its own part (``pkg/registry/certificates/certificates/strategy.go``):

* **create** (``PrepareForCreate``): the requester is filled in from who sent it
  (``spec.username``, ``uid``, ``groups``, ``extra``: from ``multusd.kubesim.authn``), whatever
  the body said, and the status is emptied, so nobody creates a pre-approved request. Validated:
  ``spec.request`` must be a PEM ``CERTIFICATE REQUEST``, ``signerName`` and ``usages`` are
  required, ``expirationSeconds`` may not be below 600 (``Settings.csr_min_expiration_seconds``:
  tests lower it to issue certificates of seconds);
* **update** of the object: metadata only, ``spec`` and ``status`` stay as stored (which is
  why a controller that writes a ``Denied`` condition this way changes nothing);
* **``/approval``**: only ``status.conditions``; ``Approved`` and ``Denied`` exclude each
  other and, once there, stay;
* **``/status``** (the signer): the status, but not the ``Approved``/``Denied`` conditions,
  which keep their stored values.

New conditions get ``lastUpdateTime`` and ``lastTransitionTime`` when they carry none
(``populateConditionTimestamps``). ``kubectl get csr`` prints kubectl's columns: NAME, AGE,
SIGNERNAME, REQUESTOR, REQUESTEDDURATION, CONDITION (``Pending``, ``Approved,Issued``, ...).

Nodes are plain objects here (no kubelet heartbeats): cluster-scoped, a ``status``
subresource, the ``spec.unschedulable`` field selector.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from multusd.kubesim import authn
from multusd.kubesim.errors import ApiError
from multusd.kubesim.resources import ResourceType, dig, field_text

__all__ = [
    "CERTIFICATE_SIGNING_REQUESTS",
    "CERT_RESOURCES",
    "NODES",
    "columns",
    "prepare_create",
    "prepare_update",
]

JsonObj = dict[str, Any]
Column = tuple[str, str, int, Callable[[JsonObj], Any]]  # as multusd.kubesim.tables.Column

APPROVAL_TYPES = ("Approved", "Denied")
_PEM_REQUEST = b"-----BEGIN CERTIFICATE REQUEST-----"


def _csr_fields(obj: JsonObj) -> Mapping[str, str]:
    return {
        "metadata.name": field_text(dig(obj, "metadata", "name")),
        "spec.signerName": field_text(dig(obj, "spec", "signerName")),
    }


def _node_fields(obj: JsonObj) -> Mapping[str, str]:
    return {
        "metadata.name": field_text(dig(obj, "metadata", "name")),
        "spec.unschedulable": field_text(bool(dig(obj, "spec", "unschedulable"))),
    }


def _resource_type(fields: Callable[[JsonObj], Mapping[str, str]], **kw: Any) -> ResourceType:
    return ResourceType(
        fields=fields,
        selectable=frozenset(fields({"metadata": {}})),
        namespaced=False,
        allow_unconditional_update=True,  # both strategies' AllowUnconditionalUpdate
        **kw,
    )


CERTIFICATE_SIGNING_REQUESTS = _resource_type(
    _csr_fields,
    group="certificates.k8s.io",
    version="v1",
    plural="certificatesigningrequests",
    singular="certificatesigningrequest",
    kind="CertificateSigningRequest",
    short_names=("csr",),
    subresources=("approval", "status"),
)
NODES = _resource_type(
    _node_fields,
    group="",
    version="v1",
    plural="nodes",
    singular="node",
    kind="Node",
    short_names=("no",),
    subresources=("status",),
)
CERT_RESOURCES: tuple[ResourceType, ...] = (CERTIFICATE_SIGNING_REQUESTS, NODES)


def _invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 as ``errors.NewInvalid`` words it, the group in the kind (``GroupKind.String()``)."""
    text = "; ".join(f"{f}: {m}" for f, _, m in causes)
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    details = {
        "name": name,
        "group": rt.group,
        "kind": rt.kind,
        "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
    }
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details)


def _duration_text(seconds: int) -> str:
    if seconds % 60 == 0:
        minutes = seconds // 60
        return f"{minutes} minute" + ("s" if minutes != 1 else "")
    return f"{seconds} second" + ("s" if seconds != 1 else "")


def _object(value: Any) -> JsonObj:
    return value if isinstance(value, dict) else {}


def _validate_create(rt: ResourceType, obj: JsonObj, minimum: int) -> None:
    name = str(dig(obj, "metadata", "name") or "")
    spec = _object(obj.get("spec"))
    causes: list[tuple[str, str, str]] = []
    request = spec.get("request")
    try:
        data = base64.b64decode(str(request or ""), validate=True)
    except (binascii.Error, ValueError):
        data = b""
    if _PEM_REQUEST not in data:
        message = "Invalid value: []byte{...}: PEM block type must be CERTIFICATE REQUEST"
        causes.append(("spec.request", "FieldValueInvalid", message))
    if not spec.get("signerName"):
        causes.append(("spec.signerName", "FieldValueRequired", "Required value"))
    if not spec.get("usages"):
        causes.append(("spec.usages", "FieldValueRequired", "Required value"))
    seconds = spec.get("expirationSeconds")
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds < minimum:
        causes.append((
            "spec.expirationSeconds", "FieldValueInvalid",
            f"Invalid value: {seconds}: may not specify a duration less than {minimum} seconds "
            f"({_duration_text(minimum)})",
        ))  # fmt: skip
    if causes:
        raise _invalid(rt, name, causes)


def prepare_create(rt: ResourceType, obj: JsonObj) -> None:
    """``PrepareForCreate`` and the create validation of a request (in place)."""
    context = authn.current()
    _validate_create(rt, obj, context.csr_min_expiration_seconds)
    spec = obj.setdefault("spec", {})
    for key in ("username", "uid", "groups", "extra"):
        spec.pop(key, None)
    identity = context.identity
    spec["username"] = identity.name
    if identity.uid:
        spec["uid"] = identity.uid
    spec["groups"] = list(identity.groups)
    obj["status"] = {}


def _condition_timestamps(new: list[JsonObj], old: list[JsonObj]) -> None:
    """``populateConditionTimestamps``: a condition without times gets now, or, when the stored
    one of its type has the same status, that one's transition time."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for condition in new:
        condition.setdefault("lastUpdateTime", now)
        if condition.get("lastTransitionTime"):
            continue
        same = next(
            (c for c in old if c.get("type") == condition.get("type")
             and c.get("status") == condition.get("status")),
            None,
        )  # fmt: skip
        condition["lastTransitionTime"] = (same or {}).get("lastTransitionTime") or now


def _conditions(obj: JsonObj) -> list[JsonObj]:
    conditions = dig(obj, "status", "conditions")
    return [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []


def _validate_approval(rt: ResourceType, name: str, new: list[JsonObj], old: list[JsonObj]) -> None:
    causes: list[tuple[str, str, str]] = []
    types = [c.get("type") for c in new]
    if "Approved" in types and "Denied" in types:
        causes.append(("status.conditions", "FieldValueInvalid",
                       "Invalid value: \"Denied\": Approved and Denied conditions are mutually "
                       "exclusive"))  # fmt: skip
    for kind in APPROVAL_TYPES:
        if any(c.get("type") == kind for c in old) and kind not in types:
            message = f'Forbidden: updates may not remove a condition of type "{kind}"'
            causes.append(("status.conditions", "FieldValueForbidden", message))
    for index, condition in enumerate(new):
        if not condition.get("type"):
            causes.append((f"status.conditions[{index}].type", "FieldValueRequired",
                           "Required value"))  # fmt: skip
    if causes:
        raise _invalid(rt, name, causes)


def prepare_update(rt: ResourceType, new: JsonObj, old: JsonObj, subresource: str) -> None:
    """What each way of updating a request may change (in place; the metadata rules are the
    generic ones, applied before)."""
    if "spec" in old:
        new["spec"] = old["spec"]
    else:
        new.pop("spec", None)
    old_status = _object(old.get("status"))
    old_conditions = _conditions(old)
    if subresource == "approval":
        conditions = _conditions(new)
        _validate_approval(rt, str(old["metadata"]["name"]), conditions, old_conditions)
        _condition_timestamps(conditions, old_conditions)
        new["status"] = {**old_status, "conditions": conditions}
    elif subresource == "status":
        status = _object(new.get("status"))
        kept = [c for c in old_conditions if c.get("type") in APPROVAL_TYPES]
        others = [c for c in _conditions(new) if c.get("type") not in APPROVAL_TYPES]
        _condition_timestamps(others, old_conditions)
        status = dict(status)
        if kept or others:
            status["conditions"] = kept + others
        else:
            status.pop("conditions", None)
        new["status"] = status
    else:
        new["status"] = old_status


def _condition_column(obj: JsonObj) -> str:
    """kubectl's ``extractCSRStatus``."""
    types = {c.get("type") for c in _conditions(obj)}
    if "Denied" in types:
        text = "Denied"
    elif "Approved" in types:
        text = "Approved"
    else:
        text = "Pending"
    if "Failed" in types:
        text += ",Failed"
    if dig(obj, "status", "certificate"):
        text += ",Issued"
    return text


def columns(
    name: Column, age: Column, human_duration: Callable[[float], str]
) -> dict[str, list[Column]]:
    """``kubectl get`` columns (kubectl's ``printCertificateSigningRequest``, ``printNode``'s
    first ones), around the NAME and AGE columns of ``multusd.kubesim.tables``."""

    def requested(obj: JsonObj) -> str:
        seconds = dig(obj, "spec", "expirationSeconds")
        return "<none>" if seconds is None else human_duration(float(seconds))

    def text(*path: str) -> Callable[[JsonObj], str]:
        return lambda obj: field_text(dig(obj, *path)) or "<none>"

    return {
        CERTIFICATE_SIGNING_REQUESTS.kind: [
            name,
            age,
            ("SignerName", "string", 0, text("spec", "signerName")),
            ("Requestor", "string", 0, text("spec", "username")),
            ("RequestedDuration", "string", 0, requested),
            ("Condition", "string", 0, _condition_column),
        ],
    }
