"""Just enough OpenAPI v3 for ``kubectl apply``.

kubectl (1.27+) validates manifests before sending them. It first asks ``/openapi/v3`` whether
the server does field validation itself: it looks, in the group/version document, for the PATCH
operation tagged with the object's group/version/kind and checks that the operation lists the
``fieldValidation`` query parameter. When it does, kubectl leaves validation to the server and
never needs a schema. Without these documents kubectl falls back to downloading the v2 schema
and, when that is missing too, refuses to apply ("failed to download openapi").

The PATCH operations deliberately carry no ``requestBody``: kubectl then builds strategic merge
patches from its compiled-in types (and JSON merge patches for custom resources) instead of
from schemas we would have to write.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from multusd.kubesim.resources import Registry, ResourceType


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _item_path(rt: ResourceType) -> str:
    prefix = "/" + _gv_path(rt.group, rt.version)
    if rt.namespaced:
        return f"{prefix}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
    return f"{prefix}/{rt.plural}/{{name}}"


def _patch_operation(rt: ResourceType, sub: str) -> dict[str, Any]:
    return {
        "operationId": f"patch{rt.kind}{sub.capitalize()}",
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
    }


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    served = registry.in_group_version(group, version)
    if not served:
        return None
    paths: dict[str, Any] = {}
    for rt in served:
        item = _item_path(rt)
        paths[item] = {"patch": _patch_operation(rt, "")}
        for sub in rt.subresources:
            paths[f"{item}/{sub}"] = {"patch": _patch_operation(rt, sub)}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-kubesim"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def _hash(doc: dict[str, Any] | None) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()


def root_document(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, versions in registry.group_versions().items():
        for version in versions:
            gv = _gv_path(group, version)
            digest = _hash(group_version_document(registry, group, version))
            paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}
