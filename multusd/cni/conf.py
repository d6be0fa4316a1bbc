"""Plugin configs and config lists (libcni ``conf.go``), and the stdin each plugin receives.

A config is kept as its raw bytes plus the few fields libcni reads from them; nothing else is
interpreted, so unknown keys reach the plugin untouched. Whenever libcni edits a config it goes
through a Go map, which re-encodes with sorted keys and Go's number formatting; the
:func:`inject` helper reproduces that, because plugins, caches and tests see those bytes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cni_shim import errors, gojson, results
from cni_shim.gofmt import type_name
from cni_shim.gojsonerr import loads_any, loads_map
from cni_shim.gojsonerr import type_name as json_type_name
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from multusd.cni.invoke import LibcniError, prefixed
from multusd.fileread import read_bytes

#: The spec version this engine implements (libcni ``version.Current()``).
CURRENT_VERSION = "1.1.0"


@dataclass(frozen=True, eq=False)
class NetworkConfig:
    """One plugin's config: the exact bytes, plus the fields libcni itself needs."""

    raw: bytes
    name: str
    type: str
    cni_version: str
    capabilities: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class NetworkConfigList:
    """A conflist; ``plugins`` keep their own (Go re-encoded) bytes, ``raw`` the list's."""

    name: str
    cni_version: str
    plugins: tuple[NetworkConfig, ...]
    disable_check: bool = False
    disable_gc: bool = False
    load_only_inlined_plugins: bool = False
    raw: bytes = b""


def _decoding_error(msg: str) -> LibcniError:
    return LibcniError(errors.DECODING_FAILURE, msg)


def _invalid(msg: str) -> LibcniError:
    return LibcniError(errors.INVALID_NETWORK_CONFIG, msg)


def _unmarshal_field_error(value: Any, field_path: str, go_type: str) -> ValueError:
    return ValueError(
        f"json: cannot unmarshal {json_type_name(value)} into Go struct field "
        f"PluginConf.{field_path} of type {go_type}"
    )


def _struct_fields(obj: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """Go struct decoding: keys match field tags case-insensitively; null leaves the zero value."""
    wanted = {n.lower(): n for n in names}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = wanted.get(key.lower())
        if name is not None and value is not None:
            out[name] = value
    return out


_PLUGIN_FIELDS = ("cniVersion", "name", "type", "capabilities", "ipam", "dns", "prevResult")


def _decode_plugin(raw: bytes) -> NetworkConfig:
    obj = loads_any(raw)
    if not isinstance(obj, dict):
        raise ValueError(
            f"json: cannot unmarshal {json_type_name(obj)} into Go value of type types.PluginConf"
        )
    fields = _struct_fields(obj, _PLUGIN_FIELDS)
    for name in ("cniVersion", "name", "type"):
        if not isinstance(fields.get(name, ""), str):
            raise _unmarshal_field_error(fields[name], name, "string")
    capabilities = fields.get("capabilities", {})
    if not isinstance(capabilities, dict):
        raise _unmarshal_field_error(capabilities, "capabilities", "map[string]bool")
    for value in capabilities.values():
        if value is not None and not isinstance(value, bool):
            raise _unmarshal_field_error(value, "capabilities", "bool")
    for name, go_type in (("ipam", "types.IPAM"), ("dns", "types.DNS")):
        if not isinstance(fields.get(name, {}), dict):
            raise _unmarshal_field_error(fields[name], name, go_type)
    ipam_type = _struct_fields(fields.get("ipam", {}), ("type",)).get("type", "")
    if not isinstance(ipam_type, str):
        raise _unmarshal_field_error(ipam_type, "ipam.type", "string")
    if not isinstance(fields.get("prevResult", {}), dict):
        raise _unmarshal_field_error(fields["prevResult"], "prevResult", "map[string]interface {}")
    return NetworkConfig(
        raw=raw,
        name=fields.get("name", ""),
        type=fields.get("type", ""),
        cni_version=fields.get("cniVersion", ""),
        capabilities={k: bool(v) for k, v in capabilities.items()},
    )


def conf_from_bytes(raw: bytes) -> NetworkConfig:
    """Parse one plugin config (libcni ``ConfFromBytes``); ``type`` is required."""
    try:
        conf = _decode_plugin(raw)
    except ValueError as exc:
        raise _decoding_error(f"error parsing configuration: {exc!s}") from exc
    if not conf.type:
        raise _invalid("error parsing configuration: missing 'type'")
    return conf


def _list_error(msg: str, *, code: int = errors.INVALID_NETWORK_CONFIG) -> LibcniError:
    return LibcniError(code, f"error parsing configuration list: {msg}")


def _version_gt(version: str, other: str) -> bool:
    return not results.version_ge(other, version)


def _pick_version(raw_list: Mapping[str, Any], cni_version: str) -> str:
    """libcni's ``cniVersions`` handling: the highest listed version this engine implements."""
    raw_versions = raw_list["cniVersions"]
    if not isinstance(raw_versions, list):
        raise _list_error("invalid type for cniVersions: []interface {}")
    candidates: list[str] = []
    for index, item in enumerate(raw_versions):
        if not isinstance(item, str):
            raise _list_error(f"invalid type for cniVersions index {index}: {type_name(item)}")
        try:
            newer = _version_gt(item, CURRENT_VERSION)
        except errors.CNIError as exc:
            raise _list_error(f"invalid cniVersions entry {item} at index {index}: {exc}") from exc
        if not newer:
            candidates.append(item)
    if cni_version:
        try:
            newer = _version_gt(cni_version, CURRENT_VERSION)
        except errors.CNIError as exc:
            raise _list_error(f"invalid cniVersion {cni_version}: {exc}") from exc
        if not newer:
            candidates.append(cni_version)
    if not candidates:
        return cni_version
    best = candidates[0]
    for candidate in candidates[1:]:
        if _version_gt(candidate, best):
            best = candidate
    return best


def _read_bool(raw_list: Mapping[str, Any], key: str) -> bool:
    if key not in raw_list:
        return False
    value = raw_list[key]
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise _list_error(f"invalid type {type_name(value)} for {key}")
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise _list_error(f"invalid value {go_quote(lowered)} for {key}")


def conflist_from_bytes(raw: bytes) -> NetworkConfigList:
    """Parse a conflist (libcni ``NetworkConfFromBytes``).

    Each plugin is re-encoded the Go way (sorted keys) and parsed as a plugin config, so its
    bytes keep every key. A list without ``plugins`` parses to an empty list (the file loader
    then looks for ``<dir>/<name>/*.conf``), as upstream.
    """
    try:
        raw_list = loads_map(raw)
    except ValueError as exc:
        raise _list_error(str(exc), code=errors.DECODING_FAILURE) from exc
    if not isinstance(raw_list, dict):
        raise _list_error(
            f"json: cannot unmarshal {json_type_name(raw_list)} into Go value of type "
            "map[string]interface {}",
            code=errors.DECODING_FAILURE,
        )
    if "name" not in raw_list:
        raise _list_error("no name")
    name = raw_list["name"]
    if not isinstance(name, str):
        raise _list_error(f"invalid name type {type_name(name)}")
    cni_version = ""
    if "cniVersion" in raw_list:
        cni_version = raw_list["cniVersion"]
        if not isinstance(cni_version, str):
            raise _list_error(f"invalid cniVersion type {type_name(cni_version)}")
    if "cniVersions" in raw_list:
        cni_version = _pick_version(raw_list, cni_version)
    disable_check = _read_bool(raw_list, "disableCheck")
    disable_gc = _read_bool(raw_list, "disableGC")
    inlined_only = _read_bool(raw_list, "loadOnlyInlinedPlugins")

    plugins: list[NetworkConfig] = []
    if "plugins" not in raw_list:
        if inlined_only:
            raise _list_error("`loadOnlyInlinedPlugins` is true, and no 'plugins' key")
    else:
        raw_plugins = raw_list["plugins"]
        if not isinstance(raw_plugins, list):
            raise _list_error(f"invalid 'plugins' type {type_name(raw_plugins)}")
        if not raw_plugins:
            raise _list_error("no plugins in list")
        for index, item in enumerate(raw_plugins):
            try:
                plugins.append(conf_from_bytes(_encode(item)))
            except errors.CNIError as exc:
                raise prefixed(exc, f"failed to parse plugin config {index}: ") from exc
    return NetworkConfigList(
        name=name,
        cni_version=cni_version,
        plugins=tuple(plugins),
        disable_check=disable_check,
        disable_gc=disable_gc,
        load_only_inlined_plugins=inlined_only,
        raw=raw,
    )


def conflist_from_conf(conf: NetworkConfig) -> NetworkConfigList:
    """Wrap one plugin config as a one-plugin list (libcni ``ConfListFromConf``)."""
    raw_config = _decode_existing(conf.raw)
    wrapped = {"cniVersion": conf.cni_version, "name": conf.name, "plugins": [raw_config]}
    return conflist_from_bytes(_encode(wrapped))


def _encode(value: Any) -> bytes:
    """Marshal like Go: a dict here stands for a Go map, so its top level is sorted."""
    if isinstance(value, dict):
        value = dict(sorted(value.items()))
    return gojson.dumps(value).encode()


def _decode_existing(raw: bytes) -> dict[str, Any]:
    try:
        config = loads_map(raw)
    except ValueError as exc:
        raise _decoding_error(f"unmarshal existing network bytes: {exc!s}") from exc
    if not isinstance(config, dict):
        raise _decoding_error(
            "unmarshal existing network bytes: json: cannot unmarshal "
            f"{json_type_name(config)} into Go value of type map[string]interface {{}}"
        )
    return config


def inject(conf: NetworkConfig, values: Mapping[str, Any]) -> NetworkConfig:
    """libcni ``InjectConf``: set top-level keys through a Go map and re-parse the result.

    Decoded parts come back key-sorted at every level; injected values are encoded as given
    (pass dicts in the order Go would marshal the corresponding struct).
    """
    config = _decode_existing(conf.raw)
    for key, value in values.items():
        if not key:
            raise _invalid("keys cannot be empty")
        if value is None:
            raise _invalid(f"key '{key}' value must not be nil")
        config[key] = value
    return conf_from_bytes(_encode(config))


def plugin_stdin(
    conf: NetworkConfig,
    *,
    name: str,
    cni_version: str,
    prev_result: Mapping[str, Any] | None = None,
    capability_args: Mapping[str, Any] | None = None,
) -> bytes:
    """The bytes a plugin reads on stdin (libcni ``buildOneConfig``).

    ``name``/``cniVersion`` are forced to the list's, ``prevResult`` (already in wire form) is
    added when given, and ``runtimeConfig`` receives only the capability args the plugin
    declares ``true`` in its own ``capabilities`` -- replacing any ``runtimeConfig`` the config
    carried, as upstream does.
    """
    injected: dict[str, Any] = {"name": name, "cniVersion": cni_version}
    if prev_result is not None:
        injected["prevResult"] = prev_result
    built = inject(conf, injected)
    args = capability_args or {}
    runtime_config = {
        capability: args[capability]
        for capability, enabled in sorted(built.capabilities.items())
        if enabled and capability in args
    }
    if runtime_config:
        built = inject(built, {"runtimeConfig": runtime_config})
    return built.raw


def conf_files(directory: str, extensions: Sequence[str]) -> list[str]:
    """Files in ``directory`` with one of ``extensions`` (libcni ``ConfFiles``), name order.

    Blocking; call it from a worker thread. A missing directory yields no files.
    """
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise LibcniError(errors.IO_FAILURE, _os_error_text("open", directory, exc)) from exc
    return [
        str(Path(directory, e.name))
        for e in entries
        if not e.is_dir() and Path(e.name).suffix in extensions
    ]


def _os_error_text(op: str, path: str, exc: OSError) -> str:
    return f"{op} {path}: {errno_text(exc.errno)}"


async def _read(path: str) -> bytes:
    try:
        return await read_bytes(path)
    except OSError as exc:
        text = _os_error_text("open", path, exc)
        raise LibcniError(errors.IO_FAILURE, f"error reading {path}: {text}") from exc


async def conf_from_file(path: str) -> NetworkConfig:
    """Load a ``.conf``/``.json`` plugin config (libcni ``ConfFromFile``)."""
    return conf_from_bytes(await _read(path))


async def conflist_from_file(path: str) -> NetworkConfigList:
    """Load a ``.conflist`` (libcni ``ConfListFromFile``).

    Unless ``loadOnlyInlinedPlugins`` is set, ``<dir>/<name>/*.conf`` are appended as plugins.
    """
    conflist = conflist_from_bytes(await _read(path))
    plugins = list(conflist.plugins)
    if not conflist.load_only_inlined_plugins:
        plugin_dir = str(Path(path).parent / conflist.name)
        try:
            files = await asyncio.to_thread(conf_files, plugin_dir, (".conf",))
        except errors.CNIError as exc:
            raise prefixed(exc, f"failed to read plugin config files in {plugin_dir}: ") from exc
        plugins.extend([await conf_from_file(f) for f in files])
    if not plugins:
        raise _invalid("no plugin configs found")
    return NetworkConfigList(
        name=conflist.name,
        cni_version=conflist.cni_version,
        plugins=tuple(plugins),
        disable_check=conflist.disable_check,
        disable_gc=conflist.disable_gc,
        load_only_inlined_plugins=conflist.load_only_inlined_plugins,
        raw=conflist.raw,
    )


async def network_from_file(path: str) -> NetworkConfigList:
    """Load either kind by extension; a single config comes back wrapped as a one-plugin list."""
    if path.endswith(".conflist"):
        return await conflist_from_file(path)
    return conflist_from_conf(await conf_from_file(path))
