"""HTTP handlers for ``/api`` and ``/apis``: discovery documents and the resource verbs.

Request parsing, authentication, fault injection, stats and error rendering happen once in the
middleware (``app.py``); by the time a handler runs, the request's ``RequestInfo`` is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from multusd.kubesim import discovery, operations, protodecode, watch
from multusd.kubesim.encoding import (
    JSON,
    JSON_MEDIA_TYPE,
    PROTOBUF_MEDIA_TYPE,
    Encoder,
    decode_object,
    loads,
    negotiate,
    protobuf_encoder,
    request_media_type,
)
from multusd.kubesim.entries import Entry
from multusd.kubesim.errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    path_not_found,
    unsupported_media_type,
)
from multusd.kubesim.resources import ResourceType
from multusd.kubesim.routes import DiscoveryPath, Target
from multusd.kubesim.selectors import FieldSelector, parse_field_selector, parse_label_selector
from multusd.kubesim.state import State
from multusd.kubesim.tables import table_for, wants_table

STATE_KEY = web.AppKey("kubesim_state", State)


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the middleware learned about a request before any handler ran."""

    target: Target | DiscoveryPath | None
    verb: str


INFO_KEY = web.RequestKey("kubesim_info", RequestInfo)


def _json(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def _encoded(encoder: Encoder, body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=encoder.media_type)


def _stored(encoder: Encoder, raw: bytes, status: int = 200) -> web.Response:
    """One stored object in the negotiated encoding (JSON is the stored bytes as they are)."""
    if encoder is JSON:
        return _json(raw, status)
    return _encoded(encoder, encoder.object(raw), status)


def _protobuf(rt: ResourceType) -> Encoder | None:
    """The resource's protobuf encoder: built-in kinds have one, CRDs none (as upstream)."""
    return protobuf_encoder(rt.api_version, rt.kind)


def error_response(err: ApiError, request: web.Request | None = None) -> web.Response:
    """The Status of a failure, in protobuf when the failed request was for a built-in kind
    and asked for protobuf first (as the apiserver answers), else JSON."""
    info = request.get(INFO_KEY) if request is not None else None
    if request is not None and info is not None and isinstance(info.target, Target):
        accept = request.headers.get("Accept")
        protobuf = _protobuf(info.target.rt)
        if accept and protobuf is not None:
            try:
                encoder = negotiate(accept, protobuf=protobuf)[0]
            except ApiError:
                encoder = JSON
            if encoder is not JSON:
                body = encoder.object(err.status())
                return web.Response(
                    body=body,
                    status=err.code,
                    content_type=encoder.media_type,
                    headers=err.headers or None,
                )
    return _json(JSON.object(err.status()), err.code, err.headers or None)


async def api(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    info: RequestInfo = request[INFO_KEY]
    if isinstance(info.target, DiscoveryPath):
        return _discovery(state, info.target, request.method)
    if info.target is None:
        raise path_not_found()
    return await _resource(request, state, info.target, info.verb)


def _discovery(state: State, path: DiscoveryPath, method: str) -> web.Response:
    if method != "GET":
        raise method_not_allowed(method)
    enc = negotiate(None)[0]
    doc: dict[str, Any] | None
    if path.group == "" and path.version == "":
        doc = discovery.core_versions(state.server_address)
    elif path.group is None:
        doc = discovery.group_list(state.registry)
    elif path.version == "":
        doc = discovery.group(state.registry, path.group)
    else:
        doc = discovery.resource_list(state.registry, path.group, path.version)
    if doc is None:
        raise path_not_found()
    return _json(enc.object(doc))


def _body_media_type(request: web.Request) -> str:
    """The media type of a create, update or delete body, read from the header itself.

    aiohttp's ``content_type`` says ``application/octet-stream`` when the header is absent;
    kube-apiserver (``NegotiateInputSerializer``) takes an absent one for its first serializer,
    JSON, and kubectl 1.20's ``create namespace`` sends its JSON body with no Content-Type.
    """
    return request_media_type(request.headers.get("Content-Type"))


def _patch_media_type(request: web.Request) -> str:
    """A PATCH's type, parameters dropped, with no default: upstream's patch handler has none
    either (an absent Content-Type is no patch type, a 415)."""
    return request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


async def _body(request: web.Request) -> Any:
    data = await request.read()
    if not data:
        raise bad_request("the request body is empty")
    return loads(data)


async def _object_body(request: web.Request, rt: ResourceType) -> dict[str, Any]:
    """A create or update body: JSON for every kind, Kubernetes protobuf for built-in kinds
    (kubectl's typed commands send nothing else), decoded to the same JSON-shaped dict."""
    media = _body_media_type(request)
    if media == JSON_MEDIA_TYPE:
        return decode_object(await request.read())
    accepted = [JSON_MEDIA_TYPE]
    if _protobuf(rt) is not None:
        if media == PROTOBUF_MEDIA_TYPE:
            return protodecode.decode_object(await request.read(), rt.api_version, rt.kind)
        accepted.append(PROTOBUF_MEDIA_TYPE)
    raise unsupported_media_type(media, accepted)


def _reject_dry_run(request: web.Request) -> None:
    if request.query.getall("dryRun", []):
        raise bad_request("kubesim does not implement dryRun")


async def _resource(
    request: web.Request, state: State, target: Target, verb: str
) -> web.StreamResponse:
    encoder, accepted = negotiate(request.headers.get("Accept"), protobuf=_protobuf(target.rt))
    table = accepted is not None and wants_table(accepted)
    include = request.query.get("includeObject", "Metadata")
    if verb in ("list", "watch", "deletecollection"):
        return await _collection(
            request, state, target, verb, encoder=encoder, table=table, include=include
        )
    rt = target.rt
    ns = target.namespace or ""
    name = target.name or ""
    if verb == "get":
        entry = operations.get(state, rt, ns, name)
        if table:
            meta = {"resourceVersion": str(entry.rv)}
            return _json(encoder.object(table_for(rt, meta, [entry.raw], include)))
        return _stored(encoder, entry.raw)
    _reject_dry_run(request)
    if verb == "create":
        if target.name is not None or target.subresource:
            raise method_not_allowed(request.method)
        entry = operations.create(state, rt, ns, await _object_body(request, rt))
        return _stored(encoder, entry.raw, 201)
    if verb == "update":
        body = await _object_body(request, rt)
        entry = operations.update(state, rt, ns, name, body, subresource=target.subresource)
        return _stored(encoder, entry.raw)
    if verb == "patch":
        media = _patch_media_type(request)
        body = await _body(request)
        entry = operations.patch(
            state, rt, ns, name, content_type=media, body=body, subresource=target.subresource
        )
        return _stored(encoder, entry.raw)
    if verb == "delete" and not target.subresource:
        options = await _delete_options(request)
        if options.get("dryRun"):
            raise bad_request("kubesim does not implement dryRun")
        entry = operations.delete(state, rt, ns, name, options.get("preconditions"))
        return _deleted(encoder, entry, target)
    raise method_not_allowed(request.method)


async def _collection(
    request: web.Request,
    state: State,
    target: Target,
    verb: str,
    *,
    encoder: Encoder,
    table: bool,
    include: str,
) -> web.StreamResponse:
    rt = target.rt
    labels = parse_label_selector(request.query.get("labelSelector"))
    fields = parse_field_selector(request.query.get("fieldSelector"), rt.selectable)
    if target.name is not None:
        # A watch on one object (legacy /watch/.../name, or ?watch on an item URL).
        by_name = parse_field_selector(f"metadata.name={target.name}", rt.selectable)
        fields = FieldSelector((*fields.terms, *by_name.terms))
    namespace = target.namespace if rt.namespaced else None
    if verb == "watch":
        transform = None
        if table:

            def transform(raw: bytes) -> bytes:
                return encoder.object(table_for(rt, {}, [raw], include))

        query = watch.WatchQuery(rt, namespace, labels, fields, transform)
        return await watch.serve(request, state, encoder, query)
    if verb == "deletecollection":
        _reject_dry_run(request)
        doomed = list(state.store.iter_entries(rt, namespace, labels=labels, fields=fields))
        deleted = [operations.delete(state, rt, e.namespace, e.name).raw for e in doomed]
        meta = {"resourceVersion": str(state.store.resource_version)}
        return _encoded(encoder, encoder.list_body(rt.api_version, rt.list_kind, meta, deleted))
    continue_token = request.query.get("continue", "")
    limit = _int_param(request, "limit")
    version = request.query.get("resourceVersion", "")
    if not continue_token:
        operations.check_list_version(state, version)
        if version == "0" and state.settings.watch_cache_ignores_limit:
            limit = 0  # served from the watch cache, which ignores limit
    page = operations.list_page(
        state, rt, namespace, labels, fields, limit=limit, continue_token=continue_token
    )
    list_meta: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
    if page.continue_token:
        list_meta["continue"] = page.continue_token
    if page.remaining:
        list_meta["remainingItemCount"] = page.remaining
    if table:
        return _json(encoder.object(table_for(rt, list_meta, page.items, include)))
    return _encoded(encoder, encoder.list_body(rt.api_version, rt.list_kind, list_meta, page.items))


async def _delete_options(request: web.Request) -> dict[str, Any]:
    """The DeleteOptions body, if any: JSON, or protobuf from client-go's typed clients."""
    data = await request.read()
    if not data:
        return {}
    if _body_media_type(request) == PROTOBUF_MEDIA_TYPE:
        return protodecode.decode_delete_options(data)
    options = loads(data)
    return options if isinstance(options, dict) else {}


def _deleted(encoder: Encoder, entry: Entry, target: Target) -> web.Response:
    rt = target.rt
    if rt.return_deleted_object:
        return _stored(encoder, entry.raw)
    details: dict[str, Any] = {"name": entry.name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    details["uid"] = entry.uid
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
    return _encoded(encoder, encoder.object(status))


def _int_param(request: web.Request, name: str) -> int:
    text = request.query.get(name)
    if not text:
        return 0
    try:
        return int(text)
    except ValueError as exc:
        raise bad_request(f"invalid {name} {text!r}") from exc
