"""DRA's ``resource.k8s.io/v1`` ResourceClaims and ResourceSlices, as kube-apiserver serves them.

The daemon reads both for pods with claims (``multusd.k8s.dra``: GET of a claim, LIST of slices
by ``spec.nodeName`` and ``spec.driver``), so the emulator serves them like every other kind, from
the table entries here (registered in ``multusd.kubesim.state``), JSON only:

* ResourceClaims are namespaced, with a ``status`` subresource; a create through the API drops
  the status (the claim strategy's ``PrepareForCreate``: the scheduler allocates through
  ``resourceclaims/status``), seeding keeps it; selectable fields are the metadata ones;
* ResourceSlices are cluster-scoped, get a ``metadata.generation``, and select on
  ``metadata.name``, ``spec.nodeName`` (empty for a slice without a node) and ``spec.driver``
  (``pkg/registry/resource/resourceslice/strategy.go``, ``toSelectableFields``);
* ``kubectl get`` prints the columns kubectl's printers give them (``printResourceClaim``:
  NAME, STATE, AGE; ``printResourceSlice``: NAME, NODE, DRIVER, POOL, AGE).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from multusd.kubesim.resources import ResourceType, dig, field_text

__all__ = ["DRA_RESOURCES", "RESOURCE_CLAIMS", "RESOURCE_SLICES", "columns"]

JsonObj = dict[str, Any]
Column = tuple[str, str, int, Callable[[JsonObj], Any]]  # as multusd.kubesim.tables.Column

GROUP = "resource.k8s.io"
VERSION = "v1"


def _claim_fields(obj: JsonObj) -> Mapping[str, str]:
    return {
        "metadata.name": field_text(dig(obj, "metadata", "name")),
        "metadata.namespace": field_text(dig(obj, "metadata", "namespace")),
    }


def _slice_fields(obj: JsonObj) -> Mapping[str, str]:
    return {
        "metadata.name": field_text(dig(obj, "metadata", "name")),
        "spec.nodeName": field_text(dig(obj, "spec", "nodeName")),
        "spec.driver": field_text(dig(obj, "spec", "driver")),
    }


def _resource_type(fields: Callable[[JsonObj], Mapping[str, str]], **kw: Any) -> ResourceType:
    return ResourceType(
        group=GROUP,
        version=VERSION,
        fields=fields,
        selectable=frozenset(fields({"metadata": {}})),
        allow_unconditional_update=True,  # both strategies' AllowUnconditionalUpdate
        **kw,
    )


RESOURCE_CLAIMS = _resource_type(
    _claim_fields,
    plural="resourceclaims",
    singular="resourceclaim",
    kind="ResourceClaim",
    namespaced=True,
    subresources=("status",),
)
RESOURCE_SLICES = _resource_type(
    _slice_fields,
    plural="resourceslices",
    singular="resourceslice",
    kind="ResourceSlice",
    namespaced=False,
    has_generation=True,  # PrepareForCreate sets 1; a spec change bumps it
)
DRA_RESOURCES: tuple[ResourceType, ...] = (RESOURCE_CLAIMS, RESOURCE_SLICES)


def _claim_state(obj: JsonObj) -> str:
    """kubectl's ``resourceClaimState``: deleted, pending or allocated, then reserved."""
    states = []
    deleting = bool(dig(obj, "metadata", "deletionTimestamp"))
    if deleting:
        states.append("deleted")
    status = obj.get("status") or {}
    if status.get("allocation") is None:
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _cell(*path: str) -> Callable[[JsonObj], str]:
    return lambda obj: field_text(dig(obj, *path))


def columns(name: Column, age: Column) -> dict[str, list[Column]]:
    """The two kinds' ``kubectl get`` columns, around the NAME and AGE columns every kind has
    (``multusd.kubesim.tables`` passes its own, so the AGE format is one)."""
    return {
        RESOURCE_CLAIMS.kind: [name, ("State", "string", 0, _claim_state), age],
        RESOURCE_SLICES.kind: [
            name,
            ("Node", "string", 0, _cell("spec", "nodeName")),
            ("Driver", "string", 0, _cell("spec", "driver")),
            ("Pool", "string", 0, _cell("spec", "pool", "name")),
            age,
        ],
    }
