"""Default-route planning: which delegate keeps, loses or gains a default gateway.

A pod usually gets its default route from the cluster network. The selection element's
``default-route`` key moves it to another attachment; upstream then strips the default routes of
*every* attachment and installs the requested gateway on the chosen one
(docs/upstream.md, "Default-route handling"). Deciding that is pure and lives here; doing it in the
pod's namespace and in the libcni result cache is :mod:`multusd.cni.routes`.
"""

from __future__ import annotations

from dataclasses import replace

from cni_shim import gonet
from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError
from multusd.cni.routes import RouteActions
from multusd.networks.delegates import Delegate

ECMP_ERROR = "multus does not support ECMP for default-route"


def _parse(gateway: str) -> bytes:
    ip = gonet.parse_ip(gateway)
    if ip is None:
        # The selection decoder refuses such values already (Go's net.IP unmarshalling), so
        # this only guards delegates built by hand.
        raise CNIError(INVALID_NETWORK_CONFIG, f"invalid default-route gateway {gateway!r}")
    return ip


def is_ipv4(gateway: str) -> bool:
    """Go's ``gw.To4() != nil``: v4-mapped IPv6 addresses count as IPv4, as upstream."""
    return _parse(gateway)[:12] == gonet.V4_PREFIX


def canonical(gateway: str) -> str:
    """The gateway as Go prints it after parsing (what upstream writes to the cache)."""
    return gonet.format_ip(_parse(gateway))


def plan_gateways(delegates: list[Delegate]) -> list[Delegate]:
    """Upstream ``CheckGatewayConfig``, run only when some delegate has a ``default-route`` key.

    Raises the ECMP error when, over all delegates, more than one IPv4 or more than one IPv6
    gateway is requested. Otherwise every delegate is marked to lose the default routes of the
    families it does not request a gateway for (an empty ``default-route: []`` therefore loses
    both). Without any ``default-route`` key the delegates come back unchanged.
    """
    if all(d.gateway_request is None for d in delegates):
        return list(delegates)
    families = [is_ipv4(gw) for d in delegates for gw in d.gateway_request or ()]
    v4_count = sum(families)
    if v4_count > 1 or len(families) - v4_count > 1:
        raise CNIError(INVALID_NETWORK_CONFIG, ECMP_ERROR)
    planned: list[Delegate] = []
    for delegate in delegates:
        requested = [is_ipv4(gw) for gw in delegate.gateway_request or ()]
        planned.append(
            replace(
                delegate,
                filter_v4_gateway=True not in requested,
                filter_v6_gateway=False not in requested,
            )
        )
    return planned


def route_actions(delegate: Delegate) -> RouteActions:
    """The per-delegate decision of upstream ``CmdAdd`` right after the delegate's ADD
    (docs/upstream.md, "Default-route handling").

    The caller applies it only when the delegate's result has interfaces or IPs. A non-empty
    request deletes the family's default routes even when that family's filter is off, so a
    delegate asking for an IPv4 gateway loses its IPv6 default routes as well (its v6 filter is
    on); after :func:`plan_gateways` both delete flags are in fact always equal.
    """
    requested = bool(delegate.gateway_request)
    delete_v4 = delegate.filter_v4_gateway or requested
    delete_v6 = delegate.filter_v6_gateway or requested
    adding = requested and not (delegate.filter_v4_gateway and delegate.filter_v6_gateway)
    add = tuple(canonical(gw) for gw in delegate.gateway_request or ()) if adding else ()
    return RouteActions(delete_v4=delete_v4, delete_v6=delete_v6, add=add)
