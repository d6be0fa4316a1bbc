"""Server-side printing: the ``meta.k8s.io/v1`` ``Table`` kubectl asks for on ``get``.

kubectl sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io, application/json`` and
prints the columns it gets back. The columns here are the ones ``kubectl get`` shows against a
real cluster for these kinds (NAME/READY/STATUS/RESTARTS/AGE for pods, and so on).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from multusd.kubesim.certresources import columns as cert_columns
from multusd.kubesim.draresources import columns as dra_columns
from multusd.kubesim.encoding import MediaRange
from multusd.kubesim.resources import NAMESPACES, PODS, ResourceType

Column = tuple[str, str, int, Callable[[dict[str, Any]], Any]]  # name, type, priority, cell


def wants_table(accepted: MediaRange) -> bool:
    p = accepted.params
    return (
        p.get("as") == "Table" and p.get("g") == "meta.k8s.io" and p.get("v") in ("v1", "v1beta1")
    )


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``, the AGE column's format."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m{rem}s" if rem else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h{rem}m" if rem else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d{rem}h" if rem else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // 24 // 365}y"


def _age(obj: dict[str, Any]) -> str:
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    created = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - created).total_seconds())


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _pod_ready(obj: dict[str, Any]) -> str:
    spec = obj.get("spec", {}).get("containers", [])
    statuses = obj.get("status", {}).get("containerStatuses", [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{len(spec)}"


def _pod_restarts(obj: dict[str, Any]) -> int:
    return sum(
        int(s.get("restartCount", 0)) for s in obj.get("status", {}).get("containerStatuses", [])
    )


def _pod_status(obj: dict[str, Any]) -> str:
    status = obj.get("status", {})
    return str(status.get("reason") or status.get("phase") or "Unknown")


def _path(*keys: str) -> Callable[[dict[str, Any]], Any]:
    def get(obj: dict[str, Any]) -> Any:
        cur: Any = obj
        for key in keys:
            cur = cur.get(key) if isinstance(cur, dict) else None
        return "<none>" if cur in (None, "") else cur

    return get


_NAME: Column = ("Name", "string", 0, _name)
_AGE: Column = ("Age", "string", 0, _age)

_COLUMNS: dict[str, list[Column]] = {
    PODS.kind: [
        _NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "integer", 0, _pod_restarts),
        _AGE,
        ("IP", "string", 1, _path("status", "podIP")),
        ("Node", "string", 1, _path("spec", "nodeName")),
    ],
    NAMESPACES.kind: [_NAME, ("Status", "string", 0, _path("status", "phase")), _AGE],
    "Event": [
        ("Last Seen", "string", 0, _age),
        ("Type", "string", 0, _path("type")),
        ("Reason", "string", 0, _path("reason")),
        (
            "Object",
            "string",
            0,
            lambda o: (
                f"{o.get('involvedObject', {}).get('kind', '').lower()}/"
                f"{o.get('involvedObject', {}).get('name', '')}"
            ),
        ),
        ("Message", "string", 0, _path("message")),
    ],
}


_COLUMNS.update(dra_columns(_NAME, _AGE))
_COLUMNS.update(cert_columns(_NAME, _AGE, human_duration))


def _columns(rt: ResourceType) -> list[Column]:
    return _COLUMNS.get(rt.kind, [_NAME, _AGE])


def table_for(
    rt: ResourceType, meta: dict[str, Any], items: Iterable[bytes], include: str = "Metadata"
) -> dict[str, Any]:
    """A Table of ``items``; ``include`` is ``includeObject`` (None, Metadata or Object)."""
    columns = _columns(rt)
    rows = []
    for raw in items:
        obj = json.loads(raw)
        row: dict[str, Any] = {"cells": [cell(obj) for _, _, _, cell in columns]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {
                "name": n,
                "type": t,
                "format": "name" if n == "Name" else "",
                "description": n,
                "priority": p,
            }
            for n, t, p, _ in columns
        ],
        "rows": rows,
    }
