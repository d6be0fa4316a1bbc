"""A delegate's default-route plan carried out in the pod's routing table.

Runs in a thread that joined the pod's network namespace (:func:`multusd.cni.netns.run_in_netns`)
over our own rtnetlink socket, after upstream's ``pkg/netutils`` (``DeleteDefaultGW`` then
``SetDefaultGW``), with upstream's error texts. Decisions on upstream quirks
(docs/compatibility.md, "The upstream quirks, one by one"):

* Link lookup failure when deleting: upstream then deletes the default routes of *every*
  link in the pod. We delete nothing in that case: the attachment has no such link, so it has
  no default route to give up, and the other attachments' routes are not ours to touch.
* When several deletions or additions fail, the first error is reported (upstream keeps the
  last one, and a later success can even hide an earlier failure); a route that vanished
  between listing and deleting (``ESRCH``) is not a failure.
* Only IPv4/IPv6 routes are considered (upstream's ``FAMILY_ALL`` would also hit MPLS routes).
"""

from __future__ import annotations

import errno
import socket

from cni_shim import gonet
from cni_shim.errors import INTERNAL, CNIError
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from multusd.cni import rtnetlink
from multusd.cni.netns import run_in_netns
from multusd.cni.routes.plan import RouteActions

DELETE_PREFIX = "error deleting default gateway: "
SET_PREFIX = "error setting default gateway: "


class _Failure(Exception):
    """A failure inside the namespace thread, already worded; ``adding`` picks the prefix."""

    def __init__(self, adding: bool, text: str) -> None:
        super().__init__(text)
        self.adding = adding
        self.text = text


def _os_error_text(exc: OSError) -> str:
    """Go's text for a system call's error; our netlink socket's own time-out has no errno."""
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
        raise _Failure(False, _os_error_text(first))


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
        raise _Failure(True, _os_error_text(first))


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
        raise _Failure(not deleting, _os_error_text(exc)) from exc
    with sock:
        if deleting and oif is not None:
            try:
                _delete_defaults(sock, oif, actions)
            except OSError as exc:  # the dump itself failed
                raise _Failure(False, _os_error_text(exc)) from exc
        if actions.add:
            if oif is None:
                raise _Failure(True, "SetDefaultGW: Error getting link Link not found")
            _add_defaults(sock, oif, actions.add)


def _netns_error(netns: str, actions: RouteActions, exc: OSError) -> CNIError:
    deleting = actions.delete_v4 or actions.delete_v6
    prefix, where = (DELETE_PREFIX, "DeleteDefaultGW") if deleting else (SET_PREFIX, "SetDefaultGW")
    if exc.filename is not None:
        reason = f"failed to Statfs {go_quote(netns)}: {_os_error_text(exc)}"
    else:
        reason = f"cannot enter {go_quote(netns)}: {_os_error_text(exc)}"
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
