"""Applying a delegate's default-route plan: in the pod's namespace and in libcni's cache.

Upstream (``pkg/netutils``) edits both places right after the delegate's ADD (reference
§6.9.6): the kernel routes, so the pod really uses the requested gateway, and the cached
result, so that CHECK and DEL later see what the pod has. The plan itself comes from
:mod:`multusd.networks.gateways`. Netlink work runs in a namespace thread, file work in a
worker thread; nothing here blocks the event loop.

Decisions on upstream quirks (reference §12):

* Link lookup failure when deleting: upstream then deletes the default routes of *every*
  link in the pod. We delete nothing in that case: the attachment has no such link, so it has
  no default route to give up, and the other attachments' routes are not ours to touch.
* Quirk 15 (``::0/0`` vs ``::/0``): upstream removes only cached routes spelled exactly
  ``0.0.0.0/0`` / ``::0/0``, but libcni writes the IPv6 default as ``::/0``, so upstream never
  removes a plugin's cached IPv6 default route. We match by value (any spelling that Go's
  ``ParseCIDR`` reads as the family's default), and write added IPv6 defaults as ``::/0``,
  libcni's own spelling, in every result layout.
* A 0.1.0/0.2.0 route list emptied by the deletion loses its key instead of becoming ``null``.
* When several deletions or additions fail, the first error is reported (upstream keeps the
  last one, and a later success can even hide an earlier failure); a route that vanished
  between listing and deleting (``ESRCH``) is not a failure.
* Only IPv4/IPv6 routes are considered (upstream's ``FAMILY_ALL`` would also hit MPLS routes).

Kept as upstream: cached routes without ``dst`` are dropped by a deletion of their family's
pass, errors abort without touching the other attachments, and a 0.1.0/0.2.0 result without
an ``ip4``/``ip6`` section gets no route of that family.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any, NamedTuple

from cni_shim import gojson, gojsonerr, gonet
from cni_shim.errors import DECODING_FAILURE, INTERNAL, IO_FAILURE, CNIError
from cni_shim.gofmt import go_value
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from cni_shim.versions import parse_version
from multusd.cni import cache, rtnetlink
from multusd.cni.netns import run_in_netns
from multusd.fsutil import atomic_write


class RouteActions(NamedTuple):
    """What one delegate's ADD is followed by.

    ``add`` holds the requested gateways in Go's ``net.IP.String()`` form (IPv4 dotted even
    when written v4-mapped), empty when nothing is to be added.
    """

    delete_v4: bool
    delete_v6: bool
    add: tuple[str, ...]

    @property
    def any(self) -> bool:
        return self.delete_v4 or self.delete_v6 or bool(self.add)


NO_ACTIONS = RouteActions(delete_v4=False, delete_v6=False, add=())

DELETE_PREFIX = "error deleting default gateway: "
SET_PREFIX = "error setting default gateway: "
DELETE_CACHE_PREFIX = "error deleting default gateway in cache: "
SET_CACHE_PREFIX = "error setting default gateway in cache: "

_V4_DEFAULT = "0.0.0.0/0"
_V6_DEFAULT = "::/0"


class _Failure(Exception):
    """A failure inside the namespace thread, already worded; ``adding`` picks the prefix."""

    def __init__(self, adding: bool, text: str) -> None:
        super().__init__(text)
        self.adding = adding
        self.text = text


def _errno_text(exc: OSError) -> str:
    if exc.errno is None:  # a socket timeout
        return "netlink: no answer from the kernel"
    return errno_text(exc.errno)


def _delete_defaults(sock: rtnetlink.RouteSocket, oif: int, actions: RouteActions) -> None:
    families: set[int] = set()
    if actions.delete_v4:
        families.add(socket.AF_INET)
    if actions.delete_v6:
        families.add(socket.AF_INET6)
    first: OSError | None = None
    for route in sock.dump_routes():
        # vishvananda/netlink RouteList(link, FAMILY_ALL): main table, no cloned entries,
        # routes out of this link; Dst == nil picks the defaults.
        if route.family not in families or route.table != rtnetlink.RT_TABLE_MAIN:
            continue
        if route.flags & rtnetlink.RTM_F_CLONED or route.oif != oif or not route.is_default:
            continue
        try:
            sock.delete(route)
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # already gone: the goal is reached
                first = first or exc
    if first is not None:
        raise _Failure(False, _errno_text(first))


def _add_defaults(sock: rtnetlink.RouteSocket, oif: int, gateways: tuple[str, ...]) -> None:
    first: OSError | None = None
    for gateway in gateways:
        ip = gonet.parse_ip(gateway)
        if ip is None:
            raise _Failure(True, f"invalid gateway {gateway!r}")
        raw = ip[12:] if ip[:12] == gonet.V4_PREFIX else ip
        try:
            sock.add_default(raw, oif)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                first = first or exc
    if first is not None:
        raise _Failure(True, _errno_text(first))


def _apply_here(ifname: str, actions: RouteActions) -> None:
    """The namespace-thread part: look the link up, delete, then add (upstream's order)."""
    try:
        oif: int | None = socket.if_nametoindex(ifname)
    except OSError:
        oif = None
    deleting = actions.delete_v4 or actions.delete_v6
    try:
        sock = rtnetlink.RouteSocket()
    except OSError as exc:
        raise _Failure(not deleting, _errno_text(exc)) from exc
    with sock:
        if deleting and oif is not None:
            try:
                _delete_defaults(sock, oif, actions)
            except OSError as exc:  # the dump itself failed
                raise _Failure(False, _errno_text(exc)) from exc
        if actions.add:
            if oif is None:
                raise _Failure(True, "SetDefaultGW: Error getting link Link not found")
            _add_defaults(sock, oif, actions.add)


def _netns_error(netns: str, actions: RouteActions, exc: OSError) -> CNIError:
    deleting = actions.delete_v4 or actions.delete_v6
    prefix, where = (DELETE_PREFIX, "DeleteDefaultGW") if deleting else (SET_PREFIX, "SetDefaultGW")
    if exc.filename is not None:
        reason = f"failed to Statfs {go_quote(netns)}: {_errno_text(exc)}"
    else:
        reason = f"cannot enter {go_quote(netns)}: {_errno_text(exc)}"
    return CNIError(INTERNAL, f"{prefix}{where}: Error getting namespace {reason}")


async def apply_default_routes(netns: str, ifname: str, actions: RouteActions) -> None:
    """Delete the default routes the plan drops on ``ifname``, then add the requested ones.

    ``netns`` is the namespace path (``CNI_NETNS``). Gateways that already exist are fine.
    Raises :class:`CNIError` with upstream's ``error deleting default gateway: ...`` or
    ``error setting default gateway: ...`` text.
    """
    if not actions.any:
        return
    try:
        await run_in_netns(netns, lambda: _apply_here(ifname, actions))
    except _Failure as failure:
        prefix = SET_PREFIX if failure.adding else DELETE_PREFIX
        raise CNIError(INTERNAL, prefix + failure.text) from failure
    except OSError as exc:  # opening or entering the namespace
        raise _netns_error(netns, actions, exc) from exc


# --- the libcni result cache -----------------------------------------------------------------


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


def _read_cache(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise _CacheFailure(IO_FAILURE, f"open {path}: {_errno_text(exc)}") from exc
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


def _write_cache(path: str, info: dict[str, Any]) -> None:
    # Re-marshalled as a Go map: sorted keys at every level.
    data = gojson.dumps(info, sort_keys=True).encode()
    try:
        atomic_write(path, data, sync_dir=False)
    except OSError as exc:
        raise _CacheFailure(IO_FAILURE, f"open {path}: {_errno_text(exc)}") from exc


def _rewrite(path: str, actions: RouteActions) -> None:
    """Upstream's two read-modify-write passes (delete, then add), fused into one write."""
    info = _read_cache(path)
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
            _write_cache(path, info)
        raise _CacheFailure(failure.code, SET_CACHE_PREFIX + failure.text) from failure
    _write_cache(path, info)


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
        await asyncio.to_thread(_rewrite, path, actions)
    except _CacheFailure as failure:
        text = failure.text
        if not text.startswith((DELETE_CACHE_PREFIX, SET_CACHE_PREFIX)):
            # Reading or writing the file failed: that belongs to the first pass that runs.
            text = (DELETE_CACHE_PREFIX if deleting else SET_CACHE_PREFIX) + text
        raise CNIError(failure.code, text) from failure
