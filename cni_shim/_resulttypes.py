"""libcni's result structs (``pkg/types/{020,040,100}``) described for :mod:`godecode`.

Field order is Go's struct order, which is also the 0.x wire order. The Go type names appear
in decode error messages. ``Route`` and every ``IPConfig`` have their own ``UnmarshalJSON``
(decoding an unexported twin such as ``types.route``), hence CUSTOM; ``Interface`` and ``DNS``
are decoded in place, hence (P)STRUCT. Routes are the same type in every version, so even a
0.2.0 result keeps a route's ``mtu``, ``advmss``, ``priority``, ``table`` and ``scope``.
"""

from __future__ import annotations

from cni_shim.godecode import (
    CUSTOM,
    CUSTOMV,
    INT,
    IP,
    LIST,
    NET,
    PINT,
    PSTRUCT,
    STR,
    STRS,
    STRUCT,
    spec,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cni_shim.godecode import GoType, Spec

_STRING: GoType = (STR, None, "string")
_OPT_INT: GoType = (PINT, None, "int")
_GW: GoType = (IP, None, "net.IP")
_CIDR: GoType = (NET, None, "types.IPNet")

DNS = spec(
    "types.DNS",
    (
        ("nameservers", (STRS, None, "[]string"), True),
        ("domain", _STRING, True),
        ("search", (STRS, None, "[]string"), True),
        ("options", (STRS, None, "[]string"), True),
    ),
)
_DNS_FIELD = ("dns", (STRUCT, DNS, "types.DNS"), False)

ROUTE = spec(
    "types.route",
    (
        ("dst", _CIDR, False),
        ("gw", _GW, True),
        ("mtu", (INT, None, "int"), True),
        ("advmss", (INT, None, "int"), True),
        ("priority", (INT, None, "int"), True),
        ("table", _OPT_INT, True),
        ("scope", _OPT_INT, True),
    ),
)
_ROUTES_FIELD = ("routes", (LIST, (CUSTOM, ROUTE, "types.Route"), "[]*types.Route"), True)

IPCONFIG_020 = spec(
    "types020.ipConfig",
    (
        ("ip", _CIDR, False),
        ("gateway", _GW, True),
        ("routes", (LIST, (CUSTOMV, ROUTE, "types.Route"), "[]types.Route"), True),
    ),
)
RESULT_020 = spec(
    "types020.Result",
    (
        ("cniVersion", _STRING, True),
        ("ip4", (CUSTOM, IPCONFIG_020, "types020.IPConfig"), True),
        ("ip6", (CUSTOM, IPCONFIG_020, "types020.IPConfig"), True),
        _DNS_FIELD,
    ),
)

INTERFACE_040 = spec(
    "types040.Interface",
    (
        ("name", _STRING, False),
        ("mac", _STRING, True),
        ("sandbox", _STRING, True),
    ),
)
IPCONFIG_040 = spec(
    "types040.ipConfig",
    (
        ("version", _STRING, False),
        ("interface", _OPT_INT, True),
        ("address", _CIDR, False),
        ("gateway", _GW, True),
    ),
)
RESULT_040 = spec(
    "types040.Result",
    (
        ("cniVersion", _STRING, True),
        (
            "interfaces",
            (LIST, (PSTRUCT, INTERFACE_040, "types040.Interface"), "[]*types040.Interface"),
            True,
        ),
        ("ips", (LIST, (CUSTOM, IPCONFIG_040, "types040.IPConfig"), "[]*types040.IPConfig"), True),
        _ROUTES_FIELD,
        _DNS_FIELD,
    ),
)

INTERFACE_100 = spec(
    "types100.Interface",
    (
        ("name", _STRING, False),
        ("mac", _STRING, True),
        ("mtu", (INT, None, "int"), True),
        ("sandbox", _STRING, True),
        ("socketPath", _STRING, True),
        ("pciID", _STRING, True),
    ),
)
IPCONFIG_100 = spec(
    "types100.ipConfig",
    (
        ("interface", _OPT_INT, True),
        ("address", _CIDR, False),
        ("gateway", _GW, True),
    ),
)
RESULT_100 = spec(
    "types100.Result",
    (
        ("cniVersion", _STRING, True),
        (
            "interfaces",
            (LIST, (PSTRUCT, INTERFACE_100, "types100.Interface"), "[]*types100.Interface"),
            True,
        ),
        ("ips", (LIST, (CUSTOM, IPCONFIG_100, "types100.IPConfig"), "[]*types100.IPConfig"), True),
        _ROUTES_FIELD,
        _DNS_FIELD,
    ),
)

# The shim's view of the daemon's answer (multus pkg/server/api.Response).
RESPONSE = spec("api.Response", (("Result", (PSTRUCT, RESULT_100, "types100.Result"), True),))

# create.DecodeVersion's anonymous struct.
VERSION_ONLY = spec(
    'struct { CNIVersion string "json:\\"cniVersion\\"" }', (("cniVersion", _STRING, False),)
)

BY_FAMILY: dict[str, Spec] = {"020": RESULT_020, "040": RESULT_040, "100": RESULT_100}
