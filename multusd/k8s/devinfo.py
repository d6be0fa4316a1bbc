"""Device-info files of the Device Info Spec (NPWG): where a delegate's goes, and the copy.

A device plugin may describe the device it allocated in
``<base>/dp/<resource>-<deviceID>-device.json``; upstream copies that file, per delegate, to
``<base>/cni/<delegate>-<containerID>_<ifname>`` (the path the delegate gets as
``CNIDeviceInfoFile``), reads the delegate's file back into the ``device-info`` of
network-status, and removes it on DEL. This module is those four steps; the JSON is decoded as
Go decodes it into ``v1.DeviceInfo`` (``multusd.k8s.gostruct``), on the loop (a few hundred
bytes), after ``multusd.fileread`` has read it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from typing import Any

from cni_shim import gojson
from multusd.fileread import read_bytes
from multusd.fsutil import atomic_write
from multusd.k8s.gostruct import GoObject, go_json, json_kind

__all__ = [
    "DEVINFO_BASE",
    "copy_device_plugin_info",
    "device_info_file_path",
    "load_device_info",
    "remove_device_info",
]

log = logging.getLogger(__name__)

DEVINFO_BASE = "/var/run/k8s.cni.cncf.io/devinfo"

# v1.DeviceInfo: field order is Go's struct order, which its encoder keeps.
_DEVINFO_STRINGS = ("type", "version")
_DEVINFO_OBJECTS: dict[str, tuple[str, ...]] = {
    "pci": ("pci-address", "vhost-net", "rdma-device", "pf-pci-address", "representor-device"),
    "vdpa": (
        "parent-device",
        "driver",
        "path",
        "pci-address",
        "pf-pci-address",
        "representor-device",
    ),
    "vhost-user": ("mode", "path"),
    "memif": ("role", "path", "mode"),
}


def device_info_file_path(
    delegate_name: str, container_id: str, ifname: str, *, base: str = DEVINFO_BASE
) -> str:
    """``<base>/cni/<delegate>-<containerID>_<ifname>``, every ``/`` of the name turned to ``-``.

    Delegate names of NADs are ``namespace/name``, hence the replacement.
    """
    filename = f"{delegate_name}-{container_id}_{ifname}".replace("/", "-")
    return os.path.normpath(os.path.join(base, "cni", filename))


def _device_plugin_file_path(resource_name: str, device_id: str, base: str) -> str:
    filename = f"{resource_name.replace('/', '-')}-{device_id.replace('/', '-')}-device.json"
    return os.path.normpath(os.path.join(base, "dp", filename))


async def copy_device_plugin_info(
    resource_name: str,
    device_id: str,
    delegate_name: str,
    container_id: str,
    ifname: str,
    *,
    base: str = DEVINFO_BASE,
) -> str | None:
    """Copy the device plugin's info file for this device to the delegate's CNI path.

    Like upstream every failure is only logged (most device plugins write no such file), an
    existing target is left alone, and the copy is re-encoded through the ``DeviceInfo`` schema
    (unknown keys dropped, Go key order) and made read-only (0444). Returns the target path if
    it exists afterwards.
    """
    source = _device_plugin_file_path(resource_name, device_id, base)
    target = device_info_file_path(delegate_name, container_id, ifname, base=base)
    try:
        data = gojson.dumps(_decode_device_info(await read_bytes(source))).encode()
    except (OSError, ValueError) as exc:
        log.debug("device-info copy %s -> %s skipped: %s", source, target, exc)
        data = None
    return await asyncio.to_thread(_publish, source, target, data)


def _publish(source: str, target: str, data: bytes | None) -> str | None:
    """Create ``target`` read-only if it is absent (a failure only logged); return it if it
    exists afterwards."""
    if data is not None:
        try:
            atomic_write(target, data, mode=0o444, dir_mode=0o755, sync_dir=False, replace=False)
        except OSError as exc:
            log.debug("device-info copy %s -> %s skipped: %s", source, target, exc)
    return target if os.path.exists(target) else None


async def load_device_info(path: str) -> dict[str, Any] | None:
    """A ``CNIDeviceInfoFile`` as a ``device-info`` value for network-status; ``None`` if absent
    or unreadable (the plugin, not only the device plugin, may have written it)."""
    try:
        return _decode_device_info(await read_bytes(path))
    except (OSError, ValueError) as exc:
        log.debug("no device info in %s: %s", path, exc)
        return None


async def remove_device_info(path: str) -> None:
    """DEL removes each delegate's ``CNIDeviceInfoFile``; a missing file is fine."""
    try:
        await asyncio.to_thread(os.remove, path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.debug("could not remove device info %s: %s", path, exc)


def _decode_device_info(raw: bytes) -> dict[str, Any]:
    """Decode as Go decodes into ``v1.DeviceInfo``; ``ValueError`` where Go would fail."""
    doc = go_json(raw)
    if doc is None:
        return {}
    if not isinstance(doc, GoObject):
        raise ValueError(f"cannot decode {json_kind(doc)} as DeviceInfo")
    info: dict[str, Any] = {}
    for key, value in doc:
        name = _match(key, (*_DEVINFO_STRINGS, *_DEVINFO_OBJECTS))
        if name is None or (value is None and name in _DEVINFO_STRINGS):
            continue
        if name in _DEVINFO_STRINGS:
            if not isinstance(value, str):
                raise ValueError(f"DeviceInfo.{name}: {json_kind(value)} is not a string")
            info[name] = value
        elif value is None:
            info.pop(name, None)
        elif not isinstance(value, GoObject):
            raise ValueError(f"DeviceInfo.{name}: {json_kind(value)} is not an object")
        else:
            # Go decodes into the existing struct, so a repeated key merges into the first.
            info[name] = _sub_object(value, name, info.get(name) or {})
    return _ordered(info)


def _sub_object(obj: GoObject, name: str, into: dict[str, str]) -> dict[str, str]:
    known = _DEVINFO_OBJECTS[name]
    out = dict(into)
    for key, value in obj:
        field = _match(key, known)
        if field is None or value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"DeviceInfo.{name}.{field}: {json_kind(value)} is not a string")
        out[field] = value
    return out


def _match(key: str, names: Iterable[str]) -> str | None:
    folded = key.lower()
    return next((name for name in names if name == folded), None)


def _ordered(info: dict[str, Any]) -> dict[str, Any]:
    """Go's encoder: struct order, empty strings omitted (``omitempty``), empty objects kept."""
    out: dict[str, Any] = {k: info[k] for k in _DEVINFO_STRINGS if info.get(k)}
    for name, fields in _DEVINFO_OBJECTS.items():
        if name in info:
            out[name] = {f: info[name][f] for f in fields if info[name].get(f)}
    return out
