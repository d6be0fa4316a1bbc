"""libcni's result converters, on canonical dicts (see :mod:`cni_shim.results`).

Each function mirrors one registered Go converter; what each keeps and drops is the point:

* 0.1.0/0.2.0 → 0.3.x/0.4.0 (``convertFrom02x``): ``ip4`` then ``ip6`` become ``ips`` with
  ``version`` "4"/"6" (by slot, no interface index); their routes are appended in that order.
* 0.3.x/0.4.0 → 0.1.0/0.2.0 (``convertTo02x``): the first IP whose ``version`` field is "4"
  (resp. "6") fills ``ip4`` (``ip6``); routes go to the slot of their ``dst`` family with only
  ``dst`` and ``gw``; no slot filled → "cannot convert: no valid IP addresses". Interfaces go.
* 0.x ↔ 1.x (``convertFrom04x``/``convertTo04x``): interfaces keep ``name``, ``mac``,
  ``sandbox``; IP ``version`` is dropped going up and derived from the address going down.
* 1.0.0 ↔ 1.1.0 and 0.1.0 ↔ 0.2.0: only the version changes.
* Routes and DNS are copied whole everywhere else.

Go appends into fresh slices, so an empty ``interfaces``/``ips`` comes out nil (absent), while
``routes`` always comes out non-nil; 1.0.0 ↔ 1.1.0 shares the slices and keeps their nil-ness.
A JSON ``null`` inside a list that Go dereferences is a nil-pointer panic upstream; here it is
``CNIError`` 999 with the panic's text. Conversion errors are 999 because that is the code a
runtime sees when the Go shim fails to print a result.
"""

from __future__ import annotations

from cni_shim.errors import INTERNAL, CNIError

TYPE_CHECKING = False  # typing costs milliseconds at shim start-up; annotations only
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    Result = dict[str, Any]
_PANIC = "runtime error: invalid memory address or nil pointer dereference"


def from_02x(src: Result, to: str) -> Result:
    ips: list[Result] = []
    routes: list[Any] = []
    for slot, family in (("ip4", "4"), ("ip6", "6")):
        if slot in src:
            ipc = {"version": family, "address": src[slot]["ip"]}
            if "gateway" in src[slot]:
                ipc["gateway"] = src[slot]["gateway"]
            ips.append(ipc)
            routes.extend(dict(route) for route in src[slot].get("routes", ()))
    out: Result = {"cniVersion": to}
    if ips:
        out["ips"] = ips
    out["routes"] = routes
    out["dns"] = _copy_dns(src["dns"])
    return out


def to_02x(src: Result, to: str) -> Result:
    slots: dict[str, Result] = {}
    for item in src.get("ips", ()):
        ipc = _deref(item)
        # By the "version" field, not the address: 0.3.x IPs without one are skipped.
        slot = {"4": "ip4", "6": "ip6"}.get(ipc["version"])
        if slot and slot not in slots:
            slots[slot] = {"ip": ipc["address"]}
            if "gateway" in ipc:
                slots[slot]["gateway"] = ipc["gateway"]
        if len(slots) == 2:
            break
    for item in src.get("routes", ()):
        route = _deref(item)
        target = slots.get("ip4" if _is_v4(route["dst"]) else "ip6")
        if target is not None:
            slim = {"dst": route["dst"]}
            if "gw" in route:
                slim["gw"] = route["gw"]
            target.setdefault("routes", []).append(slim)
    if not slots:
        raise CNIError(INTERNAL, "cannot convert: no valid IP addresses")
    out: Result = {"cniVersion": to}
    out.update((slot, slots[slot]) for slot in ("ip4", "ip6") if slot in slots)
    out["dns"] = _copy_dns(src["dns"])
    return out


def within_020(src: Result, to: str) -> Result:
    out: Result = {"cniVersion": to}
    for slot in ("ip4", "ip6"):
        if slot in src:
            ipc = {key: val for key, val in src[slot].items() if key != "routes"}
            routes = [dict(route) for route in src[slot].get("routes", ())]
            if routes:  # IPConfig.Copy appends, so an empty list becomes nil
                ipc["routes"] = routes
            out[slot] = ipc
    out["dns"] = _copy_dns(src["dns"])
    return out


def within_040(src: Result, to: str) -> Result:
    out: Result = {"cniVersion": to}
    for key in ("interfaces", "ips"):
        items = [None if item is None else dict(item) for item in src.get(key, ())]
        if items:
            out[key] = items
    out["routes"] = [_copy(route) for route in src.get("routes", ())]
    out["dns"] = _copy_dns(src["dns"])
    return out


def from_04x(src: Result, to: str) -> Result:
    out: Result = {"cniVersion": to}
    interfaces = [_interface(_deref(item)) for item in src.get("interfaces", ())]
    if interfaces:
        out["interfaces"] = interfaces
    ips = [
        {key: ipc[key] for key in ("interface", "address", "gateway") if key in ipc}
        for ipc in map(_deref, src.get("ips", ()))
    ]
    if ips:
        out["ips"] = ips
    out["routes"] = [_copy(route) for route in src.get("routes", ())]
    out["dns"] = _copy_dns(src["dns"])
    return out


def to_04x(src: Result, to: str) -> Result:
    out: Result = {"cniVersion": to}
    interfaces = [_interface(_deref(item)) for item in src.get("interfaces", ())]
    if interfaces:
        out["interfaces"] = interfaces
    ips = []
    for item in src.get("ips", ()):
        ipc = _deref(item)
        new = {"version": "4" if _is_v4(ipc["address"]) else "6"}
        new.update((key, ipc[key]) for key in ("interface", "address", "gateway") if key in ipc)
        ips.append(new)
    if ips:
        out["ips"] = ips
    out["routes"] = [_copy(route) for route in src.get("routes", ())]
    out["dns"] = _copy_dns(src["dns"])
    return out


def _interface(src: Result) -> Result:
    out = {"name": src["name"]}
    out.update((key, src[key]) for key in ("mac", "sandbox") if key in src)
    return out


def _copy(item: Result | None) -> Result | None:
    return None if item is None else dict(item)


def _copy_dns(dns: Result) -> Result:
    return {key: list(val) if type(val) is list else val for key, val in dns.items()}


def _deref(item: Result | None) -> Result:
    if item is None:
        raise CNIError(INTERNAL, _PANIC)
    return item


def _is_v4(cidr: str) -> bool:
    # Canonical text is dotted exactly for IPv4 and v4-mapped addresses: Go's To4() != nil.
    # A zero IPNet ("<nil>") is not IPv4, as upstream decides.
    return "." in cidr
