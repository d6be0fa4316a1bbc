"""The control API under ``/kubesim/``: faults, stats and seeding for other processes.

Tests running the emulator in process use ``KubeSim``'s methods; the CLI, benchmarks and tests
that start it as a subprocess use these endpoints (same bearer token as the Kubernetes API).
Bodies and answers are JSON in the shapes ``Faults.to_dict`` and ``Stats.to_dict`` produce.

    GET/PUT/PATCH/DELETE /kubesim/faults     read / replace / change some keys / clear
    POST /kubesim/faults/errors              append an error rule
    POST /kubesim/faults/latency             append a latency rule
    POST /kubesim/faults/hide|unhide         {"namespace", "name", "resource"?}
    POST /kubesim/watches/drop               {"mode": "eof"|"reset"} closes open watches
    POST /kubesim/watches/expire             {"count": n} next n watches get 410
    POST /kubesim/compact                    empty every watch cache window (older versions: 410)
    POST /kubesim/snapshot                   an etcd backup of every object, kept for restore
    POST /kubesim/restore                    {"newUIDs"?: bool} back to it: older versions
    GET/DELETE /kubesim/stats                counters and request log (?log=N) / reset
    GET /kubesim/store                       object counts, resourceVersion, watch cache sizes
    POST /kubesim/seed                       YAML or JSON manifests, created or replaced
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from aiohttp import web

from multusd.kubesim import backup, seed
from multusd.kubesim.encoding import loads
from multusd.kubesim.errors import bad_request
from multusd.kubesim.faults import ErrorRule, LatencyRule
from multusd.kubesim.handlers import STATE_KEY
from multusd.kubesim.state import State

DROP_MODES = ("eof", "reset")


def drop_watches(state: State, mode: str = "eof") -> int:
    """Close every open watch stream: ``eof`` ends it cleanly, ``reset`` aborts the connection."""
    if mode not in DROP_MODES:
        raise bad_request(f"unknown drop mode {mode!r} (one of {', '.join(DROP_MODES)})")
    watchers = state.store.watchers()
    for watcher in watchers:
        watcher.close(mode)
    return len(watchers)


async def _json_body(request: web.Request) -> dict[str, Any]:
    data = await request.read()
    if not data:
        return {}
    doc = loads(data)
    if not isinstance(doc, dict):
        raise bad_request("expected a JSON object")
    return doc


def _state(request: web.Request) -> State:
    return request.app[STATE_KEY]


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(_state(request).faults.to_dict())


async def put_faults(request: web.Request) -> web.Response:
    doc = await _json_body(request)
    faults = _state(request).faults
    faults.reset()
    faults.apply_dict(doc)
    return web.json_response(faults.to_dict())


async def patch_faults(request: web.Request) -> web.Response:
    faults = _state(request).faults
    faults.apply_dict(await _json_body(request))
    return web.json_response(faults.to_dict())


async def delete_faults(request: web.Request) -> web.Response:
    faults = _state(request).faults
    faults.reset()
    return web.json_response(faults.to_dict())


async def add_error(request: web.Request) -> web.Response:
    doc = await _json_body(request)
    try:
        rule = ErrorRule(**doc)
    except TypeError as exc:
        raise bad_request(f"invalid error rule: {exc}") from exc
    _state(request).faults.errors.append(rule)
    return web.json_response(asdict(rule))


async def add_latency(request: web.Request) -> web.Response:
    doc = await _json_body(request)
    try:
        rule = LatencyRule(**doc)
    except TypeError as exc:
        raise bad_request(f"invalid latency rule: {exc}") from exc
    _state(request).faults.latency.append(rule)
    return web.json_response(asdict(rule))


def _hidden_args(doc: dict[str, Any]) -> tuple[str, str, str]:
    try:
        return str(doc["namespace"]), str(doc["name"]), str(doc.get("resource", "pods"))
    except KeyError as exc:
        raise bad_request(f"missing {exc.args[0]!r}") from exc


async def hide(request: web.Request) -> web.Response:
    ns, name, resource = _hidden_args(await _json_body(request))
    _state(request).faults.hide(ns, name, resource)
    return web.json_response(_state(request).faults.to_dict())


async def unhide(request: web.Request) -> web.Response:
    ns, name, resource = _hidden_args(await _json_body(request))
    _state(request).faults.unhide(ns, name, resource)
    return web.json_response(_state(request).faults.to_dict())


async def drop(request: web.Request) -> web.Response:
    doc = await _json_body(request)
    count = drop_watches(_state(request), str(doc.get("mode", "eof")))
    return web.json_response({"dropped": count})


async def expire(request: web.Request) -> web.Response:
    doc = await _json_body(request)
    faults = _state(request).faults
    faults.expire_next_watches += int(doc.get("count", 1))
    return web.json_response({"expireNextWatches": faults.expire_next_watches})


async def compact(request: web.Request) -> web.Response:
    return web.json_response({"resourceVersion": str(_state(request).store.compact())})


async def snapshot(request: web.Request) -> web.Response:
    snap = backup.take(_state(request))
    return web.json_response({"resourceVersion": str(snap.resource_version)})


async def restore(request: web.Request) -> web.Response:
    doc = await _json_body(request)
    rv = backup.restore(_state(request), new_uids=bool(doc.get("newUIDs", False)))
    return web.json_response({"resourceVersion": str(rv)})


async def get_stats(request: web.Request) -> web.Response:
    try:
        log = int(request.query.get("log", "100"))
    except ValueError as exc:
        raise bad_request("log must be an integer") from exc
    return web.json_response(_state(request).stats.to_dict(log_limit=log))


async def reset_stats(request: web.Request) -> web.Response:
    _state(request).stats.reset()
    return web.json_response({})


async def store_stats(request: web.Request) -> web.Response:
    return web.json_response(asdict(_state(request).store.statistics()))


async def put_token(request: web.Request) -> web.Response:
    """``{"token": "..."}``: the bearer token the emulator accepts from now on (``null``:
    anonymous requests are accepted); the old one gets 401."""
    doc = await _json_body(request)
    token = doc.get("token")
    if token is not None and (not isinstance(token, str) or not token):
        raise bad_request("token must be a non-empty string or null")
    _state(request).rotate_token(token)
    return web.json_response({})


async def post_seed(request: web.Request) -> web.Response:
    text = await request.text()
    docs = await asyncio.to_thread(seed.parse_manifests, text)
    applied = seed.apply(_state(request), docs)
    return web.json_response({"applied": applied})


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/kubesim/faults", get_faults)
    r.add_put("/kubesim/faults", put_faults)
    r.add_patch("/kubesim/faults", patch_faults)
    r.add_delete("/kubesim/faults", delete_faults)
    r.add_post("/kubesim/faults/errors", add_error)
    r.add_post("/kubesim/faults/latency", add_latency)
    r.add_post("/kubesim/faults/hide", hide)
    r.add_post("/kubesim/faults/unhide", unhide)
    r.add_post("/kubesim/watches/drop", drop)
    r.add_post("/kubesim/watches/expire", expire)
    r.add_post("/kubesim/compact", compact)
    r.add_post("/kubesim/snapshot", snapshot)
    r.add_post("/kubesim/restore", restore)
    r.add_get("/kubesim/stats", get_stats)
    r.add_delete("/kubesim/stats", reset_stats)
    r.add_get("/kubesim/store", store_stats)
    r.add_post("/kubesim/seed", post_seed)
    r.add_put("/kubesim/token", put_token)
