"""The ``k8s.v1.cni.cncf.io/network-status`` annotation: what each delegate gave the pod.

Tools (and users running ``kubectl get pod -o yaml``) parse this annotation, and upstream tests
pin it byte for byte, so it follows network-attachment-definition-client v1.7.6 exactly
(``CreateNetworkStatuses`` and ``SetNetworkStatus``): field order, omitted empties, the 4-space
indentation of each entry, and even the ``"<nil>"`` gateway of a default route without ``gw``
(docs/upstream.md, "Network status" and quirk 14, kept so consumers see what they see today).
"""

from __future__ import annotations

from typing import Any

from cni_shim import gojson, gonet, results

ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
_NIL = "<nil>"
_ZERO_V4 = gonet.parse_ip("0.0.0.0")
_ZERO_V6 = gonet.parse_ip("::")


def _ip_of(cidr: str) -> str:
    """``ipConfig.Address.IP.String()``: the address without its prefix length."""
    address = cidr.split("/", 1)[0]
    parsed = gonet.parse_ip(address)
    return gonet.format_ip(parsed) if parsed is not None else _NIL


def _is_default_route(route: dict[str, Any]) -> bool:
    """nad-client ``isDefaultRoute``: no destination, or a destination IP of 0.0.0.0 / ::."""
    dst = route.get("dst")
    if not isinstance(dst, str) or dst in ("", _NIL):
        return True
    ip = gonet.parse_ip(dst.split("/", 1)[0])
    return ip is not None and ip in (_ZERO_V4, _ZERO_V6)


def _gateway_text(route: dict[str, Any]) -> str:
    gw = route.get("gw")
    if not isinstance(gw, str) or not gw:
        return _NIL
    parsed = gonet.parse_ip(gw)
    return gonet.format_ip(parsed) if parsed is not None else _NIL


def _dns(result: dict[str, Any]) -> dict[str, Any]:
    dns = result.get("dns") or {}
    out: dict[str, Any] = {}
    for key in ("nameservers", "domain", "search", "options"):
        if dns.get(key):
            out[key] = dns[key]
    return out


def _entry(
    name: str,
    *,
    interface: dict[str, Any] | None,
    ips: list[str],
    default: bool,
    dns: dict[str, Any],
    device_info: dict[str, Any] | None,
    gateways: list[str],
) -> dict[str, Any]:
    """One ``NetworkStatus`` in Go field order with ``omitempty`` applied (``dns`` always)."""
    iface = interface or {}
    entry: dict[str, Any] = {"name": name}
    if iface.get("name"):
        entry["interface"] = iface["name"]
    if ips:
        entry["ips"] = ips
    if iface.get("mac"):
        entry["mac"] = iface["mac"]
    if iface.get("mtu"):
        entry["mtu"] = iface["mtu"]
    if default:
        entry["default"] = True
    entry["dns"] = dns
    if device_info is not None:  # Go: a present file always shows, even as {}
        entry["device-info"] = device_info
    if gateways:
        entry["gateway"] = gateways
    return entry


def statuses_for(
    result: dict[str, Any],
    network_name: str,
    default: bool,
    device_info: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``CreateNetworkStatuses``: the entries one delegate's result contributes."""
    latest = results.convert(result, results.LATEST)
    interfaces: list[dict[str, Any]] = latest.get("interfaces") or []
    ip_configs: list[dict[str, Any]] = latest.get("ips") or []
    gateways = [_gateway_text(r) for r in latest.get("routes") or [] if _is_default_route(r)]
    dns = _dns(latest)

    if len(interfaces) == 1:
        only = interfaces[0] if interfaces[0].get("sandbox") else None
        return [
            _entry(
                network_name,
                interface=only,
                ips=[_ip_of(ip["address"]) for ip in ip_configs],
                default=default,
                dns=dns,
                device_info=device_info,
                gateways=gateways,
            )
        ]

    gateway_index = -1
    if default:
        for ip in ip_configs:
            if ip.get("gateway") and ip.get("interface") is not None:
                gateway_index = ip["interface"]
                break
    slots: dict[int, list[str]] = {}
    entries: list[tuple[dict[str, Any], bool]] = []
    found_default = False
    for index, iface in enumerate(interfaces):
        if not iface.get("sandbox"):
            continue
        is_default = False
        if default and not found_default and gateway_index in (index, -1):
            is_default = found_default = True
        slots[index] = []
        entries.append((iface, is_default))
    order = list(slots)
    for ip in ip_configs:
        owner: int | None = ip.get("interface")
        if owner is not None:
            if owner in slots:
                slots[owner].append(_ip_of(ip["address"]))
        elif order:  # no index: the last sandbox entry, as previous Multus versions did
            slots[order[-1]].append(_ip_of(ip["address"]))
    return [
        _entry(
            network_name,
            interface=iface,
            ips=slots[index],
            default=is_default,
            dns=dns,
            device_info=device_info,
            gateways=gateways,
        )
        for index, (iface, is_default) in zip(order, entries, strict=True)
    ]


def annotation_value(statuses: list[dict[str, Any]]) -> str:
    """``SetNetworkStatus``: ``[`` + comma-joined 4-space-indented entries + ``]``."""
    return "[" + ",".join(gojson.dumps_indent(s) for s in statuses) + "]"
