"""The aiohttp application: one middleware for the cross-cutting request path, then routes.

The middleware does, in order, what the apiserver's filter chain does before a handler: parse
the request info (verb, resource, subresource), count it, authenticate (a token or a client
certificate: ``multusd.kubesim.authn``, whose user the handlers can read), apply injected faults,
and turn an ``ApiError`` into a ``Status`` response. Discovery and health endpoints are never
faulted: clients cache discovery, and a test that injects pod-list errors wants pod lists to fail,
not kubectl's startup.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from multusd.kubesim import authn, control, discovery, openapi, routes
from multusd.kubesim.errors import ApiError, internal, path_not_found, unauthorized
from multusd.kubesim.handlers import INFO_KEY, STATE_KEY, RequestInfo, api, error_response
from multusd.kubesim.state import State
from multusd.kubesim.stats import RequestRecord

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_log = logging.getLogger(__name__)
_PUBLIC = frozenset({"/version", "/healthz", "/livez", "/readyz"})


def _info(request: web.Request, state: State) -> RequestInfo:
    path = request.path
    if not (path.startswith("/api/") or path in ("/api", "/apis") or path.startswith("/apis/")):
        return RequestInfo(None, "")
    target = routes.parse(path, state.registry)
    if isinstance(target, routes.DiscoveryPath):
        return RequestInfo(target, "get")
    watch = request.query.get("watch", "").lower() in ("true", "1")
    return RequestInfo(target, routes.verb_for(request.method, target, watch))


def _record(request: web.Request, info: RequestInfo | None) -> RequestRecord:
    target = info.target if info else None
    is_resource = isinstance(target, routes.Target)
    return RequestRecord(
        started=time.monotonic(),
        method=request.method,
        path=request.path,
        query=request.query_string,
        verb=info.verb if info and is_resource else "",
        resource=target.rt.plural if isinstance(target, routes.Target) else "",
        subresource=target.subresource if isinstance(target, routes.Target) else "",
        namespace=(target.namespace or "") if isinstance(target, routes.Target) else "",
        name=(target.name or "") if isinstance(target, routes.Target) else "",
        user_agent=request.headers.get("User-Agent", ""),
        accept=request.headers.get("Accept", ""),
        body_type=request.headers.get("Content-Type", "") if request.body_exists else "",
    )


_RECORD_KEY = web.RequestKey("kubesim_record", RequestRecord)


async def _note_content_type(request: web.Request, response: web.StreamResponse) -> None:
    """The negotiated encoding goes into the request log as the response starts (a watch is
    logged while it is still open)."""
    record = request.get(_RECORD_KEY)
    if record is not None:
        record.content_type = response.headers.get("Content-Type", "")


@web.middleware
async def api_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    info: RequestInfo | None = None
    try:
        info = _info(request, state)
    except ApiError as err:
        record = state.stats.begin(_record(request, None))
        state.stats.finish(record, err.code)
        return error_response(err)
    record = state.stats.begin(_record(request, info))
    request[INFO_KEY] = info
    request[_RECORD_KEY] = record
    status = 500
    try:
        identity = authn.authenticate(request, state, public=request.path in _PUBLIC)
        if identity is None:
            raise unauthorized()
        record.user = identity.name
        target = info.target
        if isinstance(target, routes.Target):
            delay = state.faults.delay_for(info.verb, target.rt.plural)
            if delay > 0:
                await asyncio.sleep(delay)
            injected = state.faults.error_for(info.verb, target.rt.plural, target.subresource)
            if injected is not None:
                raise injected
        context = authn.RequestContext(identity, state.settings.csr_min_expiration_seconds)
        with authn.acting(context):
            resp = await handler(request)
        status = resp.status
        return resp
    except ApiError as err:
        status = err.code
        return error_response(err, request)
    except web.HTTPException as exc:
        status = exc.status
        raise
    except Exception as exc:
        # A bug here must still look like an apiserver error to clients, not a text/plain 500.
        _log.exception("kubesim: unhandled error serving %s %s", request.method, request.path)
        return error_response(internal(f"{type(exc).__name__}: {exc}"))
    finally:
        state.stats.finish(record, status)


async def _version(request: web.Request) -> web.Response:
    return web.json_response(discovery.version_info())


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _openapi_v3(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    tail = request.match_info.get("tail", "").strip("/")
    if not tail:
        return web.json_response(openapi.root_document(state.registry))
    parts = tail.split("/")
    doc = None
    if parts[0] == "api" and len(parts) == 2:
        doc = openapi.group_version_document(state.registry, "", parts[1])
    elif parts[0] == "apis" and len(parts) == 3:
        doc = openapi.group_version_document(state.registry, parts[1], parts[2])
    if doc is None:
        return error_response(path_not_found())
    return web.json_response(doc)


async def _openapi_v2(request: web.Request) -> web.Response:
    # No v2 schema: kubectl uses the v3 documents above and compiled-in patch metadata.
    return error_response(path_not_found())


def build_app(state: State) -> web.Application:
    app = web.Application(
        middlewares=[api_middleware], client_max_size=state.settings.max_body_bytes
    )
    app[STATE_KEY] = state
    app.on_response_prepare.append(_note_content_type)
    app.router.add_get("/version", _version)
    for path in ("/healthz", "/livez", "/readyz"):
        app.router.add_get(path, _health)
    app.router.add_get("/openapi/v3", _openapi_v3)
    app.router.add_get("/openapi/v3/{tail:.*}", _openapi_v3)
    app.router.add_get("/openapi/v2", _openapi_v2)
    control.add_routes(app)
    for prefix in ("/api", "/apis"):
        app.router.add_route("*", prefix, api)
        app.router.add_route("*", prefix + "/{tail:.*}", api)
    return app
