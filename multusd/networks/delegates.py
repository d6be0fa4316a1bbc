"""Delegates: the CNI configs Multus runs for a pod, as values built from config bytes.

A ``Delegate`` is upstream's ``DelegateNetConf``: the exact config bytes to run plus the
per-network requests (interface name, MAC, IPs, default route, ...) that shape how it runs.
Which delegates a pod gets is :mod:`multusd.networks.resolve`; loading them from files is
:mod:`multusd.networks.ondisk`. Nothing here does I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from cni_shim import gojson
from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError


def invalid_config(msg: str) -> CNIError:
    """A network config Multus cannot use (CNI code 7, ``INVALID_NETWORK_CONFIG``)."""
    return CNIError(INVALID_NETWORK_CONFIG, msg)


@dataclass(frozen=True, slots=True)
class Delegate:
    """One network to attach: config bytes plus the requests that apply to it."""

    raw: bytes
    conf: dict[str, Any]
    """The decoded single-plugin view (for a conflist: its list-level keys)."""
    name: str
    plugins: tuple[dict[str, Any], ...] = ()
    """Non-empty exactly for conflists: the decoded plugin objects, in order."""
    ifname_request: str = ""
    mac_request: str = ""
    infiniband_guid_request: str = ""
    ip_request: tuple[str, ...] | None = None
    """``None``: not asked for (the runtime's IPs apply); ``()``: asked for none."""
    gateway_request: tuple[str, ...] | None = None
    filter_v4_gateway: bool = False
    filter_v6_gateway: bool = False
    device_id: str = ""
    resource_name: str = ""
    port_mappings_request: tuple[dict[str, Any], ...] | None = None
    bandwidth_request: dict[str, Any] | None = None
    master: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_conflist(self) -> bool:
        return bool(self.plugins)

    @property
    def network_name(self) -> str:
        """The CNI network name (``Conf.name``, or the list name for conflists)."""
        name = self.conf.get("name", "")
        return name if isinstance(name, str) else ""

    @property
    def plugin_type(self) -> str:
        value = self.conf.get("type", "")
        return value if isinstance(value, str) else ""

    @property
    def cni_version(self) -> str:
        value = self.conf.get("cniVersion", "")
        return value if isinstance(value, str) else ""

    def as_master(self) -> Delegate:
        return replace(self, master=True)


def decode_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` as a JSON object; the error (code 7) is ``<what>: <why>``."""
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_config(f"{what}: {exc}") from exc
    if not isinstance(obj, dict):
        raise invalid_config(f"{what}: expected a JSON object")
    return obj


def delegate_from_bytes(data: bytes) -> Delegate:
    """Upstream ``LoadDelegateNetConf`` without a selection element
    (docs/upstream.md, "Delegates from config bytes")."""
    conf = decode_object(data, "LoadDelegateNetConf: error unmarshalling delegate config")
    name = conf.get("name", "")
    if conf.get("type"):
        return Delegate(raw=data, conf=conf, name=name if isinstance(name, str) else "")
    prefix = "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: "
    plugins = conf.get("plugins")
    if not isinstance(plugins, list):
        raise invalid_config(f"{prefix}delegate must have the 'type' or 'plugin' field")
    if not plugins:
        # Upstream indexes plugins[0] unchecked and crashes here (docs/upstream.md, quirk 13).
        raise invalid_config(f"{prefix}delegate must have at least one plugin")
    if not all(isinstance(p, dict) for p in plugins) or not plugins[0].get("type"):
        raise invalid_config(f"{prefix}a plugin delegate must have the 'type' field")
    list_view = {k: v for k, v in conf.items() if k != "plugins"}
    return Delegate(
        raw=data,
        conf=list_view,
        name=name if isinstance(name, str) else "",
        plugins=tuple(plugins),
    )


def with_cni_args(delegate: Delegate, cni_args: dict[str, Any]) -> Delegate:
    """Merge a selection's ``cni-args`` into ``args.cni`` of the config (every plugin of a
    conflist), as upstream's ``LoadDelegateNetConf``: requested keys win, others are kept."""
    conf = decode_object(delegate.raw, "cni-args")

    def merged(plugin: dict[str, Any]) -> dict[str, Any]:
        args = plugin.get("args")
        args = dict(args) if isinstance(args, dict) else {}
        cni = args.get("cni")
        args["cni"] = {**(cni if isinstance(cni, dict) else {}), **cni_args}
        return {**plugin, "args": args}

    if delegate.is_conflist:
        conf["plugins"] = [merged(p) for p in conf.get("plugins") or []]
    else:
        conf = merged(conf)
    rebuilt = delegate_from_bytes(gojson.dumps(conf, sort_keys=True).encode())
    return replace(delegate, raw=rebuilt.raw, conf=rebuilt.conf, plugins=rebuilt.plugins)


def with_device(delegate: Delegate, device_id: str, resource_name: str) -> Delegate:
    """Upstream injects the allocated device as ``deviceID`` and ``pciBusID`` (every plugin of a
    conflist), re-encoded with sorted keys, and remembers it for the runtime config."""
    conf = decode_object(delegate.raw, "deviceID")
    if delegate.is_conflist:
        conf["plugins"] = [
            {**p, "deviceID": device_id, "pciBusID": device_id} for p in conf.get("plugins") or []
        ]
    else:
        conf = {**conf, "deviceID": device_id, "pciBusID": device_id}
    rebuilt = delegate_from_bytes(gojson.dumps(conf, sort_keys=True).encode())
    return replace(
        delegate,
        raw=rebuilt.raw,
        conf=rebuilt.conf,
        plugins=rebuilt.plugins,
        device_id=device_id,
        resource_name=resource_name,
    )
