"""URL → (resource, namespace, name, subresource), the apiserver's request-info parsing.

Paths are parsed by hand rather than with one aiohttp route per shape because the same prefix
means different things per resource (``/api/v1/namespaces/x/status`` is a namespace's
subresource, ``/api/v1/namespaces/x/pods`` a collection) and the deprecated ``/watch/`` prefix
shifts everything by one.
"""

from __future__ import annotations

from dataclasses import dataclass

from multusd.kubesim.errors import path_not_found
from multusd.kubesim.resources import Registry, ResourceType


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed resource URL. ``namespace`` None on a namespaced type means all namespaces."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str
    legacy_watch: bool

    @property
    def is_collection(self) -> bool:
        return self.name is None


@dataclass(frozen=True, slots=True)
class DiscoveryPath:
    """A discovery URL: group "" is the core group; version "" means the group document."""

    group: str | None
    version: str


def parse(path: str, registry: Registry) -> Target | DiscoveryPath:
    """Parse an ``/api`` or ``/apis`` path; unknown shapes are the apiserver's bare 404."""
    parts = [p for p in path.split("/") if p]
    if not parts or parts[0] not in ("api", "apis"):
        raise path_not_found()
    if parts[0] == "api":
        if len(parts) == 1:
            return DiscoveryPath("", "")
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) == 1:
            return DiscoveryPath(None, "")
        if len(parts) == 2:
            return DiscoveryPath(parts[1], "")
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return DiscoveryPath(group, version)
    legacy_watch = rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    target = _resource(group, version, rest, registry, legacy_watch)
    if target is None:
        raise path_not_found()
    return target


def _resource(
    group: str, version: str, rest: list[str], registry: Registry, legacy_watch: bool
) -> Target | None:
    if len(rest) >= 3 and rest[0] == "namespaces":
        rt = registry.by_path(group, version, rest[2])
        if rt is not None and rt.namespaced and len(rest) <= 5:
            name = rest[3] if len(rest) > 3 else None
            sub = rest[4] if len(rest) > 4 else ""
            return _checked(rt, rest[1], name, sub, legacy_watch)
    if not rest or len(rest) > 3:
        return None
    rt = registry.by_path(group, version, rest[0])
    if rt is None:
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if rt.namespaced and name is not None:
        return None
    return _checked(rt, None, name, sub, legacy_watch)


def _checked(
    rt: ResourceType, namespace: str | None, name: str | None, sub: str, legacy_watch: bool
) -> Target | None:
    if sub and (sub not in rt.subresources or legacy_watch):
        return None
    return Target(rt, namespace, name, sub, legacy_watch)


def verb_for(method: str, target: Target, watch: bool) -> str:
    """The RBAC verb of a request, as audit logs and our stats name it."""
    if method == "GET":
        if watch or target.legacy_watch:
            return "watch"
        return "list" if target.is_collection else "get"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "deletecollection" if target.is_collection else "delete"
    return method.lower()
