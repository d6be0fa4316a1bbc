"""The network-selection annotations: ``k8s.v1.cni.cncf.io/networks`` and the default-network
override ``v1.multus-cni.io/default-network`` (docs/upstream.md, "Network-selection annotations").

Users write these by hand and upstream's ``parsePodNetworkAnnotation`` is lenient in odd places
(an empty name after a trailing comma, unvalidated names in the JSON form) and strict in others
(DNS-1123 labels in the text form). A pod that works with Go Multus must work here and a pod it
rejects must fail with the same words, so this follows the Go code step by step: the JSON form
is decoded by :mod:`cni_shim.godecode` with Go's rules (keys case-insensitive, the last one
wins, unknown keys ignored, the first type error reported), the text form is split exactly as
``parsePodNetworkObjectName`` splits it, and the checks run in upstream's order.

Pure and synchronous: the callers decide what an absent annotation means.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from cni_shim import godecode, gonet, gonum
from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError
from cni_shim.godecode import INT, IP, LIST, PSTRUCT, STR, STRS, Pairs, spec
from cni_shim.goquote import go_quote

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"


@dataclass(frozen=True, slots=True)
class SelectionElement:
    """Upstream's ``NetworkSelectionElement`` after parsing and validation.

    ``None`` marks a key that was absent (or ``null``) where upstream tells a nil slice or
    pointer from an empty one: ``"ips": []`` or ``"portMappings": []`` still override the
    runtime's own values, ``"default-route": []`` still strips default routes. ``interface``
    already holds the deprecated ``interfaceRequest`` when ``interface`` was empty.
    """

    name: str
    namespace: str
    interface: str = ""
    ips: tuple[str, ...] | None = None
    """As written (each checked as ``net.ParseCIDR`` if it has a ``/``, else ``net.ParseIP``)."""
    mac: str = ""
    infiniband_guid: str = ""
    default_route: tuple[str, ...] | None = None
    """Gateways as Go's ``net.IP.String()`` prints them; ``""`` is a nil IP (``""``/``null``)."""
    port_mappings: tuple[dict[str, Any] | None, ...] | None = None
    """``PortMapEntry`` objects as Go re-encodes them (field order, ``omitempty``); ``None``
    entries are ``null`` ones (nil pointers, re-encoded as ``null``)."""
    bandwidth: dict[str, Any] | None = None
    """``BandwidthEntry`` as Go re-encodes it: all four keys, in field order."""
    device_id: str = ""
    cni_args: dict[str, Any] | None = None
    """As a Go ``map[string]interface{}``: numbers through float64 (integral ones as ``int``),
    keys sorted at every level, duplicates resolved (last wins)."""


# --------------------------------------------------------------------------------------------
# Go types of the JSON form (pkg/types/types.go), in struct order.

_STRING = (STR, None, "string")
_INT = (INT, None, "int")
PORT_MAP_ENTRY = spec(
    "types.PortMapEntry",
    (
        ("hostPort", _INT, False),
        ("containerPort", _INT, False),
        ("protocol", _STRING, True),
        ("hostIP", _STRING, True),
    ),
)
BANDWIDTH_ENTRY = spec(
    "types.BandwidthEntry",
    (
        ("ingressRate", _INT, False),
        ("ingressBurst", _INT, False),
        ("egressRate", _INT, False),
        ("egressBurst", _INT, False),
    ),
)
# ``cni-args`` is a ``*map[string]interface{}``. A struct with no fields reproduces how Go
# decodes it (null clears it, an object is accepted, anything else is a remembered type error
# naming the map type); the map's contents are then read from the JSON by :func:`_go_map`.
_ANY_MAP = spec("map[string]interface {}", ())
_CNI_ARGS = "cni-args"
ELEMENT = spec(
    "types.NetworkSelectionElement",
    (
        ("name", _STRING, False),
        ("namespace", _STRING, True),
        ("ips", (STRS, None, "[]string"), True),
        ("mac", _STRING, True),
        ("infiniband-guid", _STRING, True),
        ("interface", _STRING, True),
        ("interfaceRequest", _STRING, True),
        (
            "portMappings",
            (LIST, (PSTRUCT, PORT_MAP_ENTRY, "*types.PortMapEntry"), "[]*types.PortMapEntry"),
            True,
        ),
        ("bandwidth", (PSTRUCT, BANDWIDTH_ENTRY, "*types.BandwidthEntry"), True),
        ("deviceID", _STRING, True),
        (_CNI_ARGS, (PSTRUCT, _ANY_MAP, "*map[string]interface {}"), False),
        ("default-route", (LIST, (IP, None, "net.IP"), "[]net.IP"), True),
    ),
)
_ANNOTATION = (
    LIST,
    (PSTRUCT, ELEMENT, "*types.NetworkSelectionElement"),
    "[]*types.NetworkSelectionElement",
)

# --------------------------------------------------------------------------------------------
# Text-form rules (parsePodNetworkObjectName).

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Go's unicode.IsSpace, which strings.TrimSpace uses (Python's strip() also drops \x1c-\x1f).
_GO_SPACE = (
    " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)
_IFNAME_FORBIDDEN = frozenset(" \t\n\v\f\r/")
_IFNAMSIZ = 16
_JSON_MARKERS = frozenset('[{"')
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _error(msg: str) -> CNIError:
    return CNIError(INVALID_NETWORK_CONFIG, msg)


def _parse_error(msg: str) -> CNIError:
    return _error("parsePodNetworkAnnotation: " + msg)


def parse_network_annotation(
    value: str, default_namespace: str, *, limit: int | None = None
) -> list[SelectionElement]:
    """Upstream ``parsePodNetworkAnnotation``: the elements, in annotation order.

    ``default_namespace`` fills an empty namespace (the pod's own for the networks annotation).
    An empty ``value`` is an error, as upstream; an *absent or empty* networks annotation means
    "no extra networks" and must be handled before calling this. Every failure is a
    ``CNIError`` (code 7) with upstream's text, to which the caller adds its own prefixes.

    ``limit`` (``maxNetworksPerPod``; upstream has none) refuses an annotation asking for more
    networks, counted before any element is decoded or checked: the API server lets a pod's
    annotations reach 256 KiB, 43,690 elements, and element by element that work stalls the
    loop (docs/compatibility.md).
    """
    # A pod's JSON cannot carry lone surrogates to Go: its decoder turns them into U+FFFD.
    value = _LONE_SURROGATE.sub("\ufffd", value)
    if not value:
        raise _parse_error('pod annotation does not have "network" as key')
    text_form = _JSON_MARKERS.isdisjoint(value)
    if limit is not None:
        count = value.count(",") + 1 if text_form else _count_elements(value)
        if count is not None and count > limit:
            raise _parse_error(
                f"the pod asks for {count} networks, more than maxNetworksPerPod ({limit}) allows"
            )
    if text_form:
        items = [_text_item(item.strip(_GO_SPACE)) for item in value.split(",")]
        return [_validated(fields, None, default_namespace) for fields in items]
    raw, decoded = _decode_json(value)
    out: list[SelectionElement] = []
    for index, fields in enumerate(decoded):
        if fields is None:
            # Upstream dereferences the nil element and panics; refuse it instead.
            raise _parse_error(f"network selection element {index} is null")
        out.append(_validated(fields, raw[index], default_namespace))
    return out


def parse_default_network_annotation(value: str, multus_namespace: str) -> SelectionElement:
    """Upstream's parsing half of ``tryLoadK8sPodDefaultNetwork``: exactly one element, whose
    namespace defaults to ``multusNamespace``.

    Call it whenever the annotation is *present* (an empty value fails, as upstream). The caller
    adds ``TryLoadPodDelegates: error in loading K8s cluster default network from pod
    annotation: `` in front of these texts.
    """
    value = _LONE_SURROGATE.sub("\ufffd", value)
    try:
        networks = parse_network_annotation(value, multus_namespace)
    except CNIError as exc:
        raise exc.with_prefix("tryLoadK8sPodDefaultNetwork: failed to parse CRD object: ") from None
    if len(networks) > 1:
        raise _error(
            f"tryLoadK8sPodDefaultNetwork: more than one default network is specified: {value}"
        )
    if not networks:
        # "[]": upstream indexes the empty list and panics; refuse it instead.
        raise _error(f"tryLoadK8sPodDefaultNetwork: no default network is specified: {value}")
    return networks[0]


def _text_item(item: str) -> dict[str, Any]:
    """``parsePodNetworkObjectName``: ``[<namespace>/]<name>[@<ifname>]``, already trimmed."""
    where = "parsePodNetworkObjectName: "
    slash_items = item.split("/")
    if len(slash_items) > 2:
        raise _parse_error(where + "Invalid network object (failed at '/')")
    namespace = slash_items[0].strip(_GO_SPACE) if len(slash_items) == 2 else ""
    at_items = slash_items[-1].split("@")
    if len(at_items) > 2:
        raise _parse_error(where + "Invalid network object (failed at '@')")
    name = at_items[0].strip(_GO_SPACE)
    ifname = at_items[1].strip(_GO_SPACE) if len(at_items) == 2 else ""
    for part in (namespace, name):
        if part and not _DNS_LABEL.fullmatch(part):
            raise _parse_error(
                where + "Failed to parse: one or more items did not match comma-delimited "
                "format (must consist of lower case alphanumeric characters). Must start and end "
                f"with an alphanumeric character), mismatch @ '{part}'"
            )
    if ifname and (
        len(ifname.encode("utf-8")) > _IFNAMSIZ - 1 or not _IFNAME_FORBIDDEN.isdisjoint(ifname)
    ):
        raise _parse_error(
            where + "Failed to parse interface name: must be less than 15 chars and not contain "
            f"'/' or spaces. interface name '{ifname}'"
        )
    return {"name": name, "namespace": namespace, "interface": ifname}


def _count_elements(value: str) -> int | None:
    """How many elements a JSON annotation lists, read at C speed before the Go-exact decoder
    runs (``None`` when the standard library cannot tell: the Go decoder reports it then)."""
    try:
        data = json.loads(value)
    except ValueError:
        return None
    return len(data) if isinstance(data, list) else None


def _decode_json(value: str) -> tuple[list[Any], list[dict[str, Any] | None]]:
    """``json.Unmarshal`` into ``[]*NetworkSelectionElement``: the parsed JSON and the structs."""
    prefix = "failed to parse pod Network Attachment Selection Annotation JSON format: "
    try:
        data = godecode.loads(value.encode("utf-8"))
        decoded = godecode.unmarshal(_ANNOTATION, data)
    except CNIError as exc:
        raise _parse_error(prefix + exc.msg) from None
    return data, decoded


def _validated(fields: dict[str, Any], raw: Any, default_namespace: str) -> SelectionElement:
    """The per-element loop of ``parsePodNetworkAnnotation``, in upstream's order."""
    mac = fields.get("mac") or ""
    if mac and not _is_mac(mac):
        raise _parse_error(f"failed to mac: address {mac}: invalid MAC address")
    guid = fields.get("infiniband-guid") or ""
    if guid and not _is_mac(guid):
        raise _parse_error(
            f"failed to validate infiniband GUID: address {guid}: invalid MAC address"
        )
    ips = fields.get("ips")
    for ip in ips or ():
        if "/" in ip:
            if not _is_cidr(ip):
                raise _error(f"failed to parse CIDR {go_quote(ip)}: invalid CIDR address: {ip}")
        elif gonet.parse_ip(ip) is None:
            raise _error(f"failed to parse IP address {go_quote(ip)}")
    ports = fields.get("portMappings")
    bandwidth = fields.get("bandwidth")
    gateways = fields.get("default-route")
    return SelectionElement(
        name=fields.get("name") or "",
        namespace=fields.get("namespace") or default_namespace,
        interface=fields.get("interface") or fields.get("interfaceRequest") or "",
        ips=None if ips is None else tuple(ips),
        mac=mac,
        infiniband_guid=guid,
        default_route=None if gateways is None else tuple(gw or "" for gw in gateways),
        port_mappings=None
        if ports is None
        else tuple(None if p is None else godecode.render(PORT_MAP_ENTRY, p) for p in ports),
        bandwidth=None if bandwidth is None else godecode.render(BANDWIDTH_ENTRY, bandwidth),
        device_id=fields.get("deviceID") or "",
        cni_args=None if fields.get(_CNI_ARGS) is None else _cni_args(raw),
    )


# --------------------------------------------------------------------------------------------
# cni-args: a Go map[string]interface{}


def _cni_args(raw: Any) -> dict[str, Any] | None:
    """Replay Go's decoding of every ``cni-args`` key of the element, in order: ``null``
    clears the map, an object merges its keys into it (a repeated key replaces the value)."""
    found: dict[str, Any] | None = None
    try:
        for key, value in raw:
            if godecode.fold(key) != _CNI_ARGS:
                continue
            if value is None:
                found = None
            else:
                found = {} if found is None else found
                found.update((k, _go_value(v)) for k, v in value)
    except RecursionError:
        raise _parse_error(
            "failed to parse pod Network Attachment Selection Annotation JSON format: "
            "exceeded max depth"
        ) from None
    return None if found is None else dict(sorted(found.items()))


def _go_value(value: Any) -> Any:
    """A JSON value as Go's ``interface{}`` holds it, in the shape Go re-encodes it."""
    kind = type(value)
    if kind is Pairs:
        merged = {k: _go_value(v) for k, v in value}
        return dict(sorted(merged.items()))
    if kind is list:
        return [_go_value(v) for v in value]
    if kind is int or kind is gonum.NumLit:
        return _float64(str(value))
    return value


def _float64(text: str) -> int | float:
    """``strconv.ParseFloat(text, 64)`` as encoding/json prints it back: an ``int`` when Go's
    text has no fraction or exponent (``1.0`` → ``1``, ``1e3`` → ``1000``)."""
    number = float(text)  # saturates to ±inf where Go reports a range error
    if math.isinf(number):
        # Go remembers this type error while decoding; nothing else failed if we got here.
        raise _parse_error(
            "failed to parse pod Network Attachment Selection Annotation JSON format: json: "
            f"cannot unmarshal number {text} into Go struct field "
            f"NetworkSelectionElement.{_CNI_ARGS} of type float64"
        )
    go_text = gonum.go_float_text(number)
    as_number = gonum.number_from_text(go_text)
    return as_number if type(as_number) is int else number


# --------------------------------------------------------------------------------------------
# net.ParseMAC and net.ParseCIDR


def _is_mac(text: str) -> bool:
    """Go's ``net.ParseMAC`` accepts it: 6, 8 or 20 octets as ``xx:xx:..``/``xx-xx-..`` (one
    separator throughout) or ``xxxx.xxxx...``. Lengths are in bytes, as Go counts them."""
    data = text.encode("utf-8")
    size = len(data)
    if size < 14:
        return False
    if data[2] in b":-":
        if (size + 1) % 3 != 0 or (size + 1) // 3 not in (6, 8, 20):
            return False
        groups = [data[i : i + 2] for i in range(0, size, 3)]
        separators = data[2::3]
    elif data[4:5] == b".":
        if (size + 1) % 5 != 0 or 2 * (size + 1) // 5 not in (6, 8, 20):
            return False
        groups = [data[i : i + 4] for i in range(0, size, 5)]
        separators = data[4::5]
    else:
        return False
    return separators == separators[:1] * len(separators) and all(
        _is_hex(group) for group in groups
    )


def _is_hex(group: bytes) -> bool:
    return all(byte in b"0123456789abcdefABCDEF" for byte in group)


def _is_cidr(text: str) -> bool:
    """Go's ``net.ParseCIDR`` accepts it (leading zeros in the prefix length are fine there)."""
    address, _, bits = text.partition("/")
    if bits.isascii() and bits.isdigit():
        bits = bits.lstrip("0") or "0"
    return gonet.canonical_cidr(f"{address}/{bits}") is not None
