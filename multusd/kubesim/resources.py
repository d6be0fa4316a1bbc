"""The resource types the emulator serves, and what the apiserver knows about each.

Every behaviour that differs between kinds (scope, which fields a field selector may use, whether
a delete answers with the object or a Status, which subresources exist) lives in one table here,
so the handlers stay generic and adding a kind is one entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

JsonObj = dict[str, Any]
FieldExtractor = Callable[[JsonObj], Mapping[str, str]]


def dig(obj: JsonObj, *path: str) -> Any:
    """The value at ``path`` in nested mappings, ``None`` where one is missing."""
    cur: Any = obj
    for part in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_text(value: Any) -> str:
    """Render a field for selector matching the way the apiserver does (Go's fmt of the value)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _meta_fields(obj: JsonObj, *, namespaced: bool) -> dict[str, str]:
    fields = {"metadata.name": field_text(dig(obj, "metadata", "name"))}
    if namespaced:
        fields["metadata.namespace"] = field_text(dig(obj, "metadata", "namespace"))
    return fields


def _pod_fields(obj: JsonObj) -> Mapping[str, str]:
    # The set the real pod registry exposes (pkg/registry/core/pod/strategy.go ToSelectableFields).
    fields = _meta_fields(obj, namespaced=True)
    fields.update(
        {
            "spec.nodeName": field_text(dig(obj, "spec", "nodeName")),
            "spec.restartPolicy": field_text(dig(obj, "spec", "restartPolicy")),
            "spec.schedulerName": field_text(dig(obj, "spec", "schedulerName")),
            "spec.serviceAccountName": field_text(dig(obj, "spec", "serviceAccountName")),
            "spec.hostNetwork": field_text(bool(dig(obj, "spec", "hostNetwork"))),
            "status.phase": field_text(dig(obj, "status", "phase")),
            "status.podIP": field_text(dig(obj, "status", "podIP")),
            "status.nominatedNodeName": field_text(dig(obj, "status", "nominatedNodeName")),
        }
    )
    return fields


def _namespace_fields(obj: JsonObj) -> Mapping[str, str]:
    fields = _meta_fields(obj, namespaced=False)
    fields["status.phase"] = field_text(dig(obj, "status", "phase"))
    return fields


def _core_event_fields(obj: JsonObj) -> Mapping[str, str]:
    fields = _meta_fields(obj, namespaced=True)
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
        fields[f"involvedObject.{key}"] = field_text(dig(obj, "involvedObject", key))
    fields["reason"] = field_text(obj.get("reason"))
    fields["reportingComponent"] = field_text(obj.get("reportingComponent"))
    fields["source"] = field_text(dig(obj, "source", "component"))
    fields["type"] = field_text(obj.get("type"))
    return fields


def _generic_namespaced(obj: JsonObj) -> Mapping[str, str]:
    return _meta_fields(obj, namespaced=True)


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One served resource (a group/version/plural), with its apiserver traits."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    fields: FieldExtractor
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    # Pods and namespaces answer a DELETE with the object; CRs and events with a Status.
    return_deleted_object: bool = False
    # Pods may be PUT without a resourceVersion (last write wins); CRs may not.
    allow_unconditional_update: bool = False
    # CRs and pods bump metadata.generation on spec changes; events carry none.
    has_generation: bool = False
    # Strategic merge patch exists only for compiled-in types, never for CRs.
    strategic_merge: bool = True
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    selectable: frozenset[str] = field(default_factory=frozenset)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group_resource(self) -> str:
        """``pods`` or ``network-attachment-definitions.k8s.cni.cncf.io``, as in error texts."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _rt(**kw: Any) -> ResourceType:
    extractor: FieldExtractor = kw["fields"]
    probe = extractor({"metadata": {}})
    return ResourceType(selectable=frozenset(probe), **kw)


PODS = _rt(
    group="",
    version="v1",
    plural="pods",
    singular="pod",
    kind="Pod",
    namespaced=True,
    fields=_pod_fields,
    short_names=("po",),
    categories=("all",),
    subresources=("status",),
    return_deleted_object=True,
    allow_unconditional_update=True,
    has_generation=True,
)
NAMESPACES = _rt(
    group="",
    version="v1",
    plural="namespaces",
    singular="namespace",
    kind="Namespace",
    namespaced=False,
    fields=_namespace_fields,
    short_names=("ns",),
    subresources=("status",),
    return_deleted_object=True,
    allow_unconditional_update=True,
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
)
EVENTS = _rt(
    group="",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    namespaced=True,
    fields=_core_event_fields,
    short_names=("ev",),
    allow_unconditional_update=True,
)
EVENTS_V1 = _rt(
    group="events.k8s.io",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    namespaced=True,
    fields=_generic_namespaced,
    # No "ev" here: kubectl 1.32 warns on every `get ev` when two groups share a short name.
    allow_unconditional_update=True,
)
NADS = _rt(
    group="k8s.cni.cncf.io",
    version="v1",
    plural="network-attachment-definitions",
    singular="network-attachment-definition",
    kind="NetworkAttachmentDefinition",
    namespaced=True,
    fields=_generic_namespaced,
    short_names=("net-attach-def",),
    has_generation=True,
    strategic_merge=False,
)

ALL_RESOURCES: tuple[ResourceType, ...] = (PODS, NAMESPACES, EVENTS, EVENTS_V1, NADS)


class Registry:
    """Lookup of served resources by URL coordinates or by apiVersion/kind (for seeding)."""

    def __init__(self, resources: tuple[ResourceType, ...] = ALL_RESOURCES) -> None:
        self.resources = resources
        self._by_path = {(r.group, r.version, r.plural): r for r in resources}
        self._by_kind = {(r.api_version, r.kind): r for r in resources}

    def by_path(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        return self._by_kind.get((api_version, kind))

    def group_versions(self) -> dict[str, list[str]]:
        """Served versions per group ("" is the legacy core group)."""
        out: dict[str, list[str]] = {}
        for r in self.resources:
            versions = out.setdefault(r.group, [])
            if r.version not in versions:
                versions.append(r.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [r for r in self.resources if r.group == group and r.version == version]
