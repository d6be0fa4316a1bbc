"""The delegate ("scratch") cache: ``<cniDir>/<containerID>``, written before any delegate runs.

It is what makes DEL work after the pod object is gone or the daemon restarted, and it is read by
upstream's daemon too, so its layout is upstream HEAD's ``[]DelegateNetConf`` encoding
(docs/upstream.md, "Delegate cache"): delegate-level keys in Go struct order, inner plugin configs
as libcni v1.3.0 re-marshals them (keys sorted, empty ``dns`` dropped, ``ipam`` always present).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cni_shim import gojson
from cni_shim.errors import IO_FAILURE, CNIError
from cni_shim.skel import validate_container_id
from multusd.fileread import read_bytes_if_exists
from multusd.fsutil import atomic_write, remove_if_exists
from multusd.networks.delegates import Delegate, delegate_from_bytes

_DNS_KEYS = ("nameservers", "domain", "search", "options")


def _plugin_conf_view(obj: dict[str, Any]) -> dict[str, Any]:
    """libcni ``PluginConf`` as HEAD marshals it: only its own fields, sorted."""
    out: dict[str, Any] = {}
    for key in ("cniVersion", "name", "type"):
        if isinstance(obj.get(key), str) and obj[key]:
            out[key] = obj[key]
    caps = obj.get("capabilities")
    if isinstance(caps, dict) and caps:
        out["capabilities"] = dict(sorted(caps.items()))
    ipam = obj.get("ipam")
    ipam_type = ipam.get("type") if isinstance(ipam, dict) else None
    out["ipam"] = {"type": ipam_type} if isinstance(ipam_type, str) and ipam_type else {}
    dns = obj.get("dns")
    if isinstance(dns, dict):
        kept = {k: dns[k] for k in sorted(_DNS_KEYS) if dns.get(k)}
        if kept:
            out["dns"] = kept
    prev = obj.get("prevResult")
    if isinstance(prev, dict) and prev:
        out["prevResult"] = prev
    attachments = obj.get("cni.dev/valid-attachments")
    if isinstance(attachments, list) and attachments:
        out["cni.dev/valid-attachments"] = attachments
    return dict(sorted(out.items()))


def _conflist_view(delegate: Delegate) -> dict[str, Any]:
    if not delegate.is_conflist:
        return {}
    conf = delegate.conf
    out: dict[str, Any] = {}
    if conf.get("cniVersion"):
        out["cniVersion"] = conf["cniVersion"]
    if conf.get("name"):
        out["name"] = conf["name"]
    if conf.get("disableCheck") is True:
        out["disableCheck"] = True
    if conf.get("disableGC") is True:
        out["disableGC"] = True
    out["plugins"] = [_plugin_conf_view(p) for p in delegate.plugins]
    return out


def encode_delegate(delegate: Delegate) -> dict[str, Any]:
    """One cache entry in ``DelegateNetConf`` field order (``omitempty`` where upstream has it)."""
    entry: dict[str, Any] = {
        "Conf": _plugin_conf_view(delegate.conf),
        "ConfList": _conflist_view(delegate),
        "Name": delegate.name,
    }
    optional: list[tuple[str, Any]] = [
        ("ifnameRequest", delegate.ifname_request),
        ("macRequest", delegate.mac_request),
        ("infinibandGUIDRequest", delegate.infiniband_guid_request),
        ("ipRequest", list(delegate.ip_request or ())),
    ]
    entry.update((k, v) for k, v in optional if v)
    if delegate.gateway_request is not None:
        entry["default-route"] = list(delegate.gateway_request)
    entry["IsFilterV4Gateway"] = delegate.filter_v4_gateway
    entry["IsFilterV6Gateway"] = delegate.filter_v6_gateway
    if delegate.device_id:
        entry["deviceID"] = delegate.device_id
    if delegate.resource_name:
        entry["resourceName"] = delegate.resource_name
    entry["Bytes"] = base64.b64encode(delegate.raw).decode()
    return entry


def decode_delegate(entry: object) -> Delegate:
    """Rebuild a delegate from a cache entry; the cached ``Bytes`` are authoritative."""
    if not isinstance(entry, dict):
        raise ValueError("cache entry is not an object")
    # Go decodes struct fields case-insensitively.
    folded = {k.lower(): v for k, v in entry.items()}
    raw = base64.b64decode(folded.get("bytes") or "", validate=True)
    delegate = delegate_from_bytes(raw)
    gateways = folded.get("default-route")
    return replace(
        delegate,
        name=str(folded.get("name") or ""),
        ifname_request=str(folded.get("ifnamerequest") or ""),
        mac_request=str(folded.get("macrequest") or ""),
        infiniband_guid_request=str(folded.get("infinibandguidrequest") or ""),
        ip_request=tuple(folded["iprequest"]) if folded.get("iprequest") else None,
        gateway_request=tuple(gateways) if isinstance(gateways, list) else None,
        filter_v4_gateway=bool(folded.get("isfilterv4gateway")),
        filter_v6_gateway=bool(folded.get("isfilterv6gateway")),
        device_id=str(folded.get("deviceid") or ""),
        resource_name=str(folded.get("resourcename") or ""),
    )


def cache_path(cni_dir: str, container_id: str) -> Path:
    return Path(cni_dir) / container_id


async def save(cni_dir: str, container_id: str, delegates: list[Delegate]) -> None:
    body = gojson.dumps([encode_delegate(d) for d in delegates]).encode()
    try:
        await asyncio.to_thread(
            atomic_write, cache_path(cni_dir, container_id), body, sync_dir=False
        )
    except OSError as exc:
        raise CNIError(
            IO_FAILURE,
            "error saving the delegates: saveDelegates: error in saving the delegates : "
            f"saveScratchNetConf: failed to write container data in the path({cni_dir}): {exc}",
        ) from exc


class CorruptCache(Exception):
    """The cache file exists but cannot be decoded (DEL then deletes nothing, as #948)."""


async def load(cni_dir: str, container_id: str) -> list[Delegate] | None:
    """The cached delegates, ``None`` when there is no cache file."""
    path = cache_path(cni_dir, container_id)
    try:
        data = await read_bytes_if_exists(path)
    except OSError as exc:
        raise CNIError(IO_FAILURE, f"failed to read the delegate cache {path}: {exc}") from exc
    if data is None:
        return None
    try:
        entries = json.loads(data)
        if not isinstance(entries, list):
            raise ValueError("cache is not a list")
        delegates = [decode_delegate(e) for e in entries]
    except (ValueError, binascii.Error, CNIError) as exc:
        raise CorruptCache(f"corrupt delegate cache {path}: {exc}") from exc
    if delegates:
        delegates[0] = delegates[0].as_master()
    return delegates


async def remove(cni_dir: str, container_id: str) -> None:
    await asyncio.to_thread(remove_if_exists, cache_path(cni_dir, container_id))


@dataclass(frozen=True, slots=True)
class Collected:
    """What :func:`collect` did: files removed, and the ones that could not be (with why)."""

    removed: int
    failed: tuple[str, ...] = ()


def _is_container_id(name: str) -> bool:
    try:
        validate_container_id(name)
    except CNIError:
        return False
    return True


def _collect_sync(cni_dir: str, keep: frozenset[str]) -> Collected:
    try:
        # The configured directory itself may be a symlink (every cache write follows it too);
        # nothing *inside* it is ever followed: entries are judged by their own type and
        # unlinked relative to this descriptor, so no path can lead out of the directory.
        dir_fd = os.open(cni_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Collected(0)
    removed = 0
    failed: list[str] = []
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                name = entry.name
                if name in keep or not _is_container_id(name):
                    continue  # a live container, or not a cache file (temp files start with .)
                if not entry.is_file(follow_symlinks=False):
                    continue  # results/, other directories, symlinks, sockets...
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue  # a DEL got there first
                except OSError as exc:
                    failed.append(f"{name}: {exc.strerror}")
                    continue
                removed += 1
    finally:
        os.close(dir_fd)
    return Collected(removed, tuple(failed))


async def collect(cni_dir: str, keep: set[str] | frozenset[str]) -> Collected:
    """Remove the delegate cache of every container not in ``keep`` (upstream #1488).

    A cache file is a regular file directly in ``cni_dir`` named with a valid container ID;
    the file is per container (whatever its interfaces), so ``keep`` holds container IDs. A
    missing directory has nothing to collect; one that cannot be read is an I/O error.
    """
    try:
        return await asyncio.to_thread(_collect_sync, cni_dir, frozenset(keep))
    except OSError as exc:
        raise CNIError(
            IO_FAILURE, f"failed to collect the delegate caches in {cni_dir}: {exc}"
        ) from exc
