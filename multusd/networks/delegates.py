"""Delegates: the CNI configs Multus runs for a pod, and how they are resolved from disk.

A ``Delegate`` is upstream's ``DelegateNetConf``: the exact config bytes to run plus the
per-network requests (interface name, MAC, IPs, default route, ...) that shape how it runs.
This module is synchronous and does file I/O; callers run it in a worker thread.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cni_shim import gojson
from cni_shim.errors import INVALID_NETWORK_CONFIG, IO_FAILURE, CNIError

_CONFIG_SUFFIXES = (".conf", ".json", ".conflist")
_CHAIN_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")


def _invalid(msg: str) -> CNIError:
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


def _decode_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _invalid(f"{what}: {exc}") from exc
    if not isinstance(obj, dict):
        raise _invalid(f"{what}: expected a JSON object")
    return obj


def delegate_from_bytes(data: bytes) -> Delegate:
    """Upstream ``LoadDelegateNetConf`` without a selection element (reference §6.6.4)."""
    conf = _decode_object(data, "LoadDelegateNetConf: error unmarshalling delegate config")
    name = conf.get("name", "")
    if conf.get("type"):
        return Delegate(raw=data, conf=conf, name=name if isinstance(name, str) else "")
    prefix = "LoadDelegateNetConf: failed with: LoadDelegateNetConfList: "
    plugins = conf.get("plugins")
    if not isinstance(plugins, list):
        raise _invalid(f"{prefix}delegate must have the 'type' or 'plugin' field")
    if not plugins:
        # Upstream indexes plugins[0] unchecked and crashes here (reference §12, quirk 13).
        raise _invalid(f"{prefix}delegate must have at least one plugin")
    if not all(isinstance(p, dict) for p in plugins) or not plugins[0].get("type"):
        raise _invalid(f"{prefix}a plugin delegate must have the 'type' field")
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
    conf = _decode_object(delegate.raw, "cni-args")

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
    conf = _decode_object(delegate.raw, "deviceID")
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


def _subdirectory_plugins(config_dir: Path, list_name: str) -> list[bytes]:
    """libcni's subdirectory plugin loading: ``<dir>/<list name>/*.conf``, sorted."""
    if not _CHAIN_NAME.match(list_name):
        return []
    subdir = config_dir / list_name
    try:
        names = sorted(p.name for p in subdir.iterdir() if p.suffix == ".conf")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [(subdir / n).read_bytes() for n in names]


def load_conflist_file(path: Path) -> Delegate:
    """A ``.conflist`` file as a lossless delegate (HEAD behaviour, reference §6.6.4).

    The bytes are rebuilt from the list-level keys plus every plugin's own raw bytes, so that
    plugin-specific keys survive to DEL (the upstream fix for leaked IPs, #1521/#1536).
    """
    prefix = f"error loading CNI conflist file {path}: "
    if not path.is_file():
        raise _invalid(prefix + "CNI configuration path is not a regular file")
    data = path.read_bytes()
    conf = _decode_object(data, prefix.rstrip(": "))
    plugins = conf.get("plugins")
    if not isinstance(plugins, list):
        plugins = []
    extra = [
        _decode_object(b, prefix + "subdirectory plugin")
        for b in _subdirectory_plugins(path.parent, str(conf.get("name", "")))
    ]
    plugins = [*plugins, *extra]
    if not plugins:
        raise _invalid(prefix + "no plugin configs found")
    if not all(isinstance(p, dict) for p in plugins) or not plugins[0].get("type"):
        raise _invalid(prefix + "a plugin delegate must have the 'type' field")
    top = {k: conf[k] for k in sorted(conf) if k != "plugins"}
    top["plugins"] = plugins
    rebuilt = dict(sorted(top.items()))
    raw = gojson.dumps(rebuilt).encode()
    name = conf.get("name", "")
    return Delegate(
        raw=raw,
        conf={k: v for k, v in rebuilt.items() if k != "plugins"},
        name=name if isinstance(name, str) else "",
        plugins=tuple(plugins),
    )


def load_conf_file(path: Path) -> Delegate:
    """A single-plugin config file; ``type`` is mandatory (libcni ``ConfFromFile``)."""
    data = path.read_bytes()
    prefix = f"error loading CNI config file {path}: "
    conf = _decode_object(data, prefix + "error parsing configuration")
    if not conf.get("type"):
        raise _invalid(prefix + "error parsing configuration: missing 'type'")
    return delegate_from_bytes(data)


def _config_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.iterdir() if p.suffix in _CONFIG_SUFFIXES), key=lambda p: p.name
    )


def load_path(path: Path) -> Delegate:
    """A cluster network given as a path: a directory, a ``.conflist`` or a config file."""
    if path.is_dir():
        files = _config_files(path)
        if not any(p.suffix in (".conf", ".conflist") for p in files):
            raise _invalid(f"getNetDelegate: cannot find network: {path}")
        first = files[0]
        return delegate_from_bytes(first.read_bytes())
    if path.suffix == ".conflist":
        return load_conflist_file(path)
    return load_conf_file(path)


def find_by_name(conf_dir: Path, name: str) -> Delegate | None:
    """The first config in ``conf_dir`` (sorted, non-recursive) whose CNI ``name`` is ``name``.

    As upstream, an unparsable file met before the match aborts the search.
    """
    try:
        files = _config_files(conf_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for path in files:
        delegate = load_conflist_file(path) if path.suffix == ".conflist" else load_conf_file(path)
        if delegate.name == name:
            return delegate
    return None


def resolve_on_disk(name: str, conf_dir: str) -> Delegate:
    """Resolve a ``clusterNetwork``/``defaultNetworks`` entry without Kubernetes (§6.5)."""
    try:
        if "/" in name:
            os.stat(name)
            return load_path(Path(name))
        found = find_by_name(Path(conf_dir), name)
    except OSError as exc:
        raise CNIError(IO_FAILURE, f"{exc.strerror}: {exc.filename}") from exc
    if found is None:
        raise _invalid(f"getNetDelegate: cannot find network: {name}")
    return found
