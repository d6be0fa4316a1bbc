"""A delegate's default-route plan carried out in libcni's cached result of the attachment.

The cache file (``<cacheDir>/results/<network>-<containerID>-<ifname>``) is read, its routes
edited as upstream's ``pkg/netutils`` edits them (``DeleteDefaultGWCache``, then
``AddDefaultGWCache``), and written back as a Go map (sorted keys), atomically: read through
``multusd.fileread``, edited on the loop, written in one worker-thread hop. Decisions on
upstream quirks (docs/compatibility.md, "The upstream quirks, one by one"):

* Quirk 15 (``::0/0`` vs ``::/0``): upstream removes only cached routes spelled exactly
  ``0.0.0.0/0`` / ``::0/0``, but libcni writes the IPv6 default as ``::/0``, so upstream never
  removes a plugin's cached IPv6 default route. We match by value (any spelling that Go's
  ``ParseCIDR`` reads as the family's default), and write added IPv6 defaults as ``::/0``,
  libcni's own spelling, in every result layout.
* A 0.1.0/0.2.0 route list emptied by the deletion loses its key instead of becoming ``null``.

Kept as upstream: cached routes without ``dst`` are dropped by a deletion of their family's
pass, and a 0.1.0/0.2.0 result without an ``ip4``/``ip6`` section gets no route of that family.
"""

from __future__ import annotations

import asyncio
from typing import Any

from cni_shim import gojson, gojsonerr, gonet
from cni_shim.errors import DECODING_FAILURE, IO_FAILURE, CNIError
from cni_shim.gofmt import go_value
from cni_shim.gosyscall import errno_text
from cni_shim.versions import parse_version
from multusd.cni import cache
from multusd.cni.routes.plan import RouteActions
from multusd.fileread import read_bytes
from multusd.fsutil import atomic_write

DELETE_CACHE_PREFIX = "error deleting default gateway in cache: "
SET_CACHE_PREFIX = "error setting default gateway in cache: "

_V4_DEFAULT = "0.0.0.0/0"
_V6_DEFAULT = "::/0"


class _CacheFailure(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def _bad(text: str) -> _CacheFailure:
    return _CacheFailure(DECODING_FAILURE, text)


def _is_default(dst: str, default: str) -> bool:
    return gonet.canonical_cidr(dst) == default


def _without_defaults(routes: list[Any], default: str) -> list[Any]:
    kept: list[Any] = []
    for route in routes:
        if not isinstance(route, dict):
            raise _bad(f"wrong route format: {go_value(route)}")
        if "dst" not in route:
            continue  # upstream drops dst-less routes in this pass
        dst = route["dst"]
        if not isinstance(dst, str):
            raise _bad(f"wrong dst format: {go_value(dst)}")
        if not _is_default(dst, default):
            kept.append(route)
    return kept


def _layout(result: dict[str, Any]) -> str:
    """``"020"`` for the 0.1.0/0.2.0 layout, ``"current"`` for 0.3.0 and later."""
    if "cniVersion" not in result:
        return "020"
    version = result["cniVersion"]
    if not isinstance(version, str):
        raise _bad(f"wrong cniVersion format: {go_value(version)}")
    if version in ("0.1.0", "0.2.0"):
        return "020"
    if version in ("0.3.0", "0.3.1", "0.4.0"):
        return "current"
    try:
        supported = parse_version(version) >= (1, 0, 0)
    except CNIError:
        supported = False
    if not supported:
        raise _bad(f"not supported version: {version}")
    return "current"


def _routes_of(container: dict[str, Any], what: str) -> list[Any] | None:
    if "routes" not in container:
        return None
    routes = container["routes"]
    if not isinstance(routes, list):
        raise _bad(f"wrong {what}routes format: {go_value(routes)}")
    return routes


def _section(result: dict[str, Any], key: str) -> dict[str, Any] | None:
    if key not in result:
        return None
    section = result[key]
    if not isinstance(section, dict):
        raise _bad(f"wrong {key} format: {go_value(section)}")
    return section


def _delete_in_result(result: dict[str, Any], actions: RouteActions) -> None:
    passes = [(actions.delete_v4, "ip4", _V4_DEFAULT), (actions.delete_v6, "ip6", _V6_DEFAULT)]
    if _layout(result) == "020":
        for wanted, key, default in passes:
            section = _section(result, key) if wanted else None
            routes = _routes_of(section, f"{key} ") if section is not None else None
            if section is None or routes is None:
                continue
            kept = _without_defaults(routes, default)
            if kept:
                section["routes"] = kept
            else:
                del section["routes"]
        return
    routes = _routes_of(result, "")
    if routes is None:
        return
    for wanted, _key, default in passes:
        if wanted:
            routes = _without_defaults(routes, default)
    if routes:
        result["routes"] = routes
    else:
        del result["routes"]


def _add_in_result(result: dict[str, Any], gateways: tuple[str, ...]) -> None:
    current = _layout(result) == "current"
    routes = (_routes_of(result, "") or []) if current else []
    for gateway in gateways:
        ip = gonet.parse_ip(gateway)
        if ip is None:
            raise _bad(f"invalid gateway {gateway!r}")
        is_v4 = ip[:12] == gonet.V4_PREFIX
        route = {"dst": _V4_DEFAULT if is_v4 else _V6_DEFAULT, "gw": gonet.format_ip(ip)}
        if current:
            routes.append(route)
            continue
        key = "ip4" if is_v4 else "ip6"
        section = _section(result, key)
        if section is None:
            continue  # nowhere to put it in this layout (upstream skips it too)
        section["routes"] = [*(_routes_of(section, f"{key} ") or []), route]
    if current:
        result["routes"] = routes


async def _read_cache(path: str) -> dict[str, Any]:
    try:
        data = await read_bytes(path)
    except OSError as exc:
        raise _CacheFailure(IO_FAILURE, f"open {path}: {errno_text(exc.errno)}") from exc
    try:
        info = gojsonerr.loads_any(data)
    except ValueError as exc:
        raise _bad(str(exc)) from exc
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise _bad(
            f"json: cannot unmarshal {gojsonerr.type_name(info)} "
            "into Go value of type map[string]interface {}"
        )
    if "result" not in info:
        raise _bad("cannot get result from cache")
    if not isinstance(info["result"], dict):
        raise _bad(f"wrong result type: {go_value(info['result'])}")
    return info


async def _write_cache(path: str, info: dict[str, Any]) -> None:
    # Re-marshalled as a Go map: sorted keys at every level.
    data = gojson.dumps(info, sort_keys=True).encode()
    try:
        await asyncio.to_thread(atomic_write, path, data, sync_dir=False)
    except OSError as exc:
        raise _CacheFailure(IO_FAILURE, f"open {path}: {errno_text(exc.errno)}") from exc


async def _rewrite(path: str, actions: RouteActions) -> None:
    """Upstream's two read-modify-write passes (delete, then add), fused into one write."""
    info = await _read_cache(path)
    deleting = actions.delete_v4 or actions.delete_v6
    try:
        if deleting:
            _delete_in_result(info["result"], actions)
    except _CacheFailure as failure:
        raise _CacheFailure(failure.code, DELETE_CACHE_PREFIX + failure.text) from failure
    try:
        if actions.add:
            _add_in_result(info["result"], actions.add)
    except _CacheFailure as failure:
        if deleting:  # upstream had already written the deletion
            await _write_cache(path, info)
        raise _CacheFailure(failure.code, SET_CACHE_PREFIX + failure.text) from failure
    await _write_cache(path, info)


async def rewrite_cached_routes(
    cache_dir: str, network_name: str, container_id: str, ifname: str, actions: RouteActions
) -> None:
    """Make the cached result of one attachment match the routes the plan left in the pod.

    The file is ``<cache_dir>/results/<network>-<containerID>-<ifname>``; it is rewritten
    atomically with sorted keys and mode 0600. Raises :class:`CNIError` with upstream's
    ``error deleting default gateway in cache: ...`` / ``error setting default gateway in
    cache: ...`` texts.
    """
    if not actions.any:
        return
    path = cache.entry_path(cache_dir, network_name, container_id, ifname)
    deleting = actions.delete_v4 or actions.delete_v6
    try:
        await _rewrite(path, actions)
    except _CacheFailure as failure:
        text = failure.text
        if not text.startswith((DELETE_CACHE_PREFIX, SET_CACHE_PREFIX)):
            # Reading or writing the file failed: that belongs to the first pass that runs.
            text = (DELETE_CACHE_PREFIX if deleting else SET_CACHE_PREFIX) + text
        raise CNIError(failure.code, text) from failure
