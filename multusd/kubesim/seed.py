"""Loading YAML/JSON manifests into the store, at start (``--seed``) or through the control API.

Seeding is "make it so": objects that exist are replaced (keeping their uid), missing namespaces
are created first, and a pod's ``status`` in the manifest is kept, so a fixture can describe
running pods with IPs and nodes. ``kind: List`` documents are unpacked, like ``kubectl apply``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from multusd.kubesim import operations
from multusd.kubesim.errors import ApiError, bad_request
from multusd.kubesim.resources import NAMESPACES
from multusd.kubesim.state import State


def parse_manifests(text: str) -> list[dict[str, Any]]:
    """Every object in a multi-document YAML (or JSON) text; blocking, run it in a thread."""
    try:
        raw_docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise bad_request(f"invalid manifest: {exc}") from exc
    docs: list[dict[str, Any]] = []
    for doc in raw_docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise bad_request("every manifest document must be an object")
        if doc.get("kind") == "List" or (
            str(doc.get("kind", "")).endswith("List") and "items" in doc
        ):
            docs.extend(item for item in doc.get("items") or [] if isinstance(item, dict))
        else:
            docs.append(doc)
    return docs


def _ensure_namespace(state: State, name: str, applied: list[str]) -> None:
    if state.store.get(NAMESPACES, "", name) is None:
        operations.create(state, NAMESPACES, "", {"metadata": {"name": name}})
        applied.append(f"namespace/{name} created")


def apply(state: State, docs: Iterable[dict[str, Any]]) -> list[str]:
    """Create or replace each object; returns kubectl-style lines (``pod/x created``)."""
    ordered = sorted(docs, key=lambda d: 0 if d.get("kind") == "Namespace" else 1)
    applied: list[str] = []
    for doc in ordered:
        rt = state.registry.by_kind(str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
        if rt is None:
            raise bad_request(f"kubesim does not serve {doc.get('apiVersion')}/{doc.get('kind')}")
        meta = doc.get("metadata") or {}
        name = str(meta.get("name", ""))
        namespace = str(meta.get("namespace") or "default") if rt.namespaced else ""
        if rt.namespaced:
            _ensure_namespace(state, namespace, applied)
        label = f"{rt.singular.replace('-', '')}/{name}"
        existing = state.store.get(rt, namespace, name) if name else None
        if existing is None:
            operations.create(state, rt, namespace, doc, keep_status=True)
            applied.append(f"{label} created")
            continue
        body = dict(doc, metadata=dict(meta, resourceVersion=str(existing.rv), namespace=namespace))
        if not rt.namespaced:
            body["metadata"].pop("namespace")
        entry = operations.update(state, rt, namespace, name, body)
        if "status" in doc and "status" in rt.subresources:
            status_body = dict(body, metadata=dict(body["metadata"], resourceVersion=str(entry.rv)))
            operations.update(state, rt, namespace, name, status_body, subresource="status")
        applied.append(f"{label} configured")
    return applied


async def load_files(state: State, paths: Iterable[str | Path]) -> list[str]:
    """Read and apply manifest files in order (reading and parsing happen off the loop)."""
    applied: list[str] = []
    for path in paths:
        text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
        docs = await asyncio.to_thread(parse_manifests, text)
        try:
            applied.extend(apply(state, docs))
        except ApiError as err:
            raise ApiError(err.code, err.reason, f"{path}: {err.message}", err.details) from err
    return applied
