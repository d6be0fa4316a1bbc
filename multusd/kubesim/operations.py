"""The verbs on stored objects, independent of HTTP.

The REST handlers, the seed loader and the in-process test handle all go through these, so a
pod created by a test fixture gets exactly the metadata and watch events a ``kubectl create``
would produce.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from multusd.kubesim import patch as patches
from multusd.kubesim.entries import Entry, ObjKey
from multusd.kubesim.errors import (
    ApiError,
    bad_request,
    conflict,
    expired,
    namespace_not_found,
    not_found,
    precondition_failed,
    too_large,
    unsupported_media_type,
)
from multusd.kubesim.objects import (
    parse_resource_version,
    prepare_create,
    prepare_update,
    unchanged,
)
from multusd.kubesim.resources import NAMESPACES, ResourceType
from multusd.kubesim.selectors import FieldSelector, LabelSelector
from multusd.kubesim.state import State

_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter."
)


def get(state: State, rt: ResourceType, namespace: str, name: str) -> Entry:
    entry = state.store.get(rt, namespace if rt.namespaced else "", name)
    if entry is None:
        raise not_found(rt, name)
    return entry


def _require_namespace(state: State, rt: ResourceType, namespace: str) -> None:
    if rt.namespaced and state.store.get(NAMESPACES, "", namespace) is None:
        raise namespace_not_found(namespace)


def create(
    state: State,
    rt: ResourceType,
    namespace: str,
    obj: dict[str, Any],
    *,
    keep_status: bool = False,
) -> Entry:
    prepared = prepare_create(rt, obj, namespace, keep_status=keep_status)
    _require_namespace(state, rt, namespace)
    return state.store.create(rt, prepared)


def _write(
    state: State,
    rt: ResourceType,
    namespace: str,
    name: str,
    new: dict[str, Any],
    *,
    old_entry: Entry,
    subresource: str,
) -> Entry:
    old = old_entry.decode()
    meta = new.get("metadata")
    given_rv = parse_resource_version(
        meta.get("resourceVersion") if isinstance(meta, dict) else None, rt, name
    )
    if given_rv is None and not rt.allow_unconditional_update:
        raise ApiError(
            422,
            "Invalid",
            f'{rt.kind} "{name}" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be '
            "specified for an update",
            {"name": name, "kind": rt.kind},
        )
    if given_rv is not None and given_rv != old_entry.rv:
        # Checked before merging so a stale writer never sees its change half-applied.
        raise conflict(rt, name)
    prepared = prepare_update(rt, new, old, subresource)
    if unchanged(prepared, old):
        return old_entry
    return state.store.update(rt, prepared, old_entry.rv)


def update(
    state: State,
    rt: ResourceType,
    namespace: str,
    name: str,
    obj: dict[str, Any],
    *,
    subresource: str = "",
) -> Entry:
    """PUT: the body replaces the object; a stale ``resourceVersion`` is a 409."""
    current = get(state, rt, namespace, name)
    return _write(state, rt, namespace, name, obj, old_entry=current, subresource=subresource)


def patch(
    state: State,
    rt: ResourceType,
    namespace: str,
    name: str,
    *,
    content_type: str,
    body: Any,
    subresource: str = "",
) -> Entry:
    """PATCH: apply the patch to the stored object, then update with the same rules as PUT.

    A patch that sets ``metadata.resourceVersion`` makes it a precondition, as upstream.
    """
    accepted = [patches.JSON_PATCH, patches.MERGE_PATCH]
    if rt.strategic_merge:
        accepted.append(patches.STRATEGIC_PATCH)
    if content_type not in accepted:
        raise unsupported_media_type(content_type, [*accepted, patches.APPLY_PATCH])
    current = get(state, rt, namespace, name)
    original = current.decode()
    result = patches.apply_patch(content_type, original, body)
    if not isinstance(result, dict):
        raise bad_request("the patch produced something that is not an object")
    meta = result.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    if not meta.get("resourceVersion"):
        meta["resourceVersion"] = str(current.rv)
    return _write(state, rt, namespace, name, result, old_entry=current, subresource=subresource)


def delete(
    state: State,
    rt: ResourceType,
    namespace: str,
    name: str,
    preconditions: dict[str, Any] | None = None,
) -> Entry:
    """Delete at once (no kubelet here to finish a graceful deletion); namespaces take their
    contents with them, as the namespace controller would."""
    current = get(state, rt, namespace, name)
    if preconditions:
        uid = preconditions.get("uid")
        if uid and uid != current.uid:
            raise precondition_failed(
                rt, name, f"UID in precondition: {uid}, UID in object meta: {current.uid}"
            )
        rv = preconditions.get("resourceVersion")
        if rv and str(rv) != str(current.rv):
            raise precondition_failed(
                rt,
                name,
                f"ResourceVersion in precondition: {rv}, ResourceVersion in object meta: "
                f"{current.rv}",
            )
    if rt is NAMESPACES:
        for other in state.registry.resources:
            if other.namespaced:
                for entry in list(state.store.iter_entries(other, name)):
                    state.store.delete(other, entry.namespace, entry.name)
    return state.store.delete(rt, namespace if rt.namespaced else "", name)


def check_list_version(state: State, version: str) -> None:
    """A list's ``resourceVersion`` ("not older than"): "" and "0" always do; a number the
    server has not reached yet is the watch cache's 504 (``too_large``); anything else is 400."""
    if version in ("", "0"):
        return
    try:
        wanted = int(version)
    except ValueError as exc:
        raise bad_request(f'invalid resource version "{version}"') from exc
    if wanted > state.store.resource_version:
        raise too_large(wanted, state.store.resource_version)


@dataclass(frozen=True, slots=True)
class Page:
    items: list[bytes]
    resource_version: int
    continue_token: str
    remaining: int | None


def _encode_continue(rv: int, key: ObjKey) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, ObjKey]:
    try:
        padded = token + "=" * (-len(token) % 4)
        doc = json.loads(base64.urlsafe_b64decode(padded))
        ns, name = doc["start"]
        return int(doc["rv"]), (str(ns), str(name))
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad_request(f"continue key is not valid: {exc}") from exc


def list_page(
    state: State,
    rt: ResourceType,
    namespace: str | None,
    labels: LabelSelector,
    fields: FieldSelector,
    *,
    limit: int = 0,
    continue_token: str = "",
) -> Page:
    """One page of a list. Pages after the first are read from the current state starting after
    the token's key and report the first page's version; the reflector's watch from that version
    replays whatever changed in between, which is the guarantee clients need from paging."""
    rv = state.store.resource_version
    after: ObjKey | None = None
    if continue_token:
        rv, after = _decode_continue(continue_token)
        # Older than a compaction, or newer than us: issued before a restore.
        if rv < state.store.compacted or rv > state.store.resource_version:
            raise expired(_CONTINUE_TOO_OLD)
    entries = state.store.iter_entries(
        rt, namespace, labels=labels, fields=fields, visible=state.faults.visible, after=after
    )
    if limit <= 0:
        return Page([e.raw for e in entries], rv, "", None)
    items: list[bytes] = []
    last: Entry | None = None
    for entry in entries:
        items.append(entry.raw)
        last = entry
        if len(items) == limit:
            break
    remaining = sum(1 for _ in entries) if last is not None else 0
    token = _encode_continue(rv, last.key) if remaining and last is not None else ""
    # Like etcd-backed lists: the count is only given when no selector filtered the page.
    exact = labels.empty and not fields.terms
    return Page(items, rv, token, remaining if remaining and exact else None)
