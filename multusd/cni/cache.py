"""libcni's result cache: ``<cacheDir>/results/<network>-<containerID>-<ifname>``.

The files are shared with anything else that reads libcni caches (upstream Multus, runtimes'
GC, humans with ``cat``), so the layout is byte-for-byte libcni's ``cachedInfo``: struct keys
in field order, ``capabilityArgs`` and ``result`` as Go maps (sorted keys), ``config`` base64.
Writes are atomic (temp file, fsync, rename) and every file operation runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cni_shim import errors, gojson, gojsonerr
from cni_shim.gojsonerr import loads_any
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from multusd.cni.invoke import LibcniError
from multusd.fsutil import atomic_write, remove_if_exists

KIND = "cniCacheV1"
RESULTS_DIR = "results"


@dataclass(frozen=True, eq=False)
class CacheEntry:
    """One cached attachment; ``result`` is the wire (JSON) form of the ADD result."""

    container_id: str
    network_name: str
    ifname: str
    config: bytes
    netns: str = ""
    cni_args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict)
    result: Mapping[str, Any] | None = None
    kind: str = KIND


def results_dir(cache_dir: str) -> str:
    return str(Path(cache_dir, RESULTS_DIR))


def entry_path(cache_dir: str, network_name: str, container_id: str, ifname: str) -> str:
    """The cache file of one attachment; all three parts are required (as libcni)."""
    if not network_name or not container_id or not ifname:
        raise LibcniError(
            errors.INVALID_ENVIRONMENT,
            "cache file path requires network name "
            f"({go_quote(network_name)}), container ID ({go_quote(container_id)}), "
            f"and interface name ({go_quote(ifname)})",
        )
    return str(Path(results_dir(cache_dir), f"{network_name}-{container_id}-{ifname}"))


def _sorted_deep(value: Any) -> Any:
    # A Go map[string]interface{} round trip: every object sorted, at every level.
    if isinstance(value, dict):
        return {k: _sorted_deep(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_sorted_deep(v) for v in value]
    return value


def encode_entry(entry: CacheEntry) -> bytes:
    """libcni's ``json.Marshal(&cachedInfo)``: field order, ``omitempty`` honoured."""
    obj: dict[str, Any] = {
        "kind": entry.kind,
        "containerId": entry.container_id,
        "config": base64.b64encode(entry.config).decode("ascii"),
        "ifName": entry.ifname,
        "networkName": entry.network_name,
    }
    if entry.netns:
        obj["netns"] = entry.netns
    if entry.cni_args:
        obj["cniArgs"] = [[k, v] for k, v in entry.cni_args]
    if entry.capability_args:
        # The map is sorted; its values are marshalled as the caller built them (Go structs).
        obj["capabilityArgs"] = dict(sorted(entry.capability_args.items()))
    if entry.result:
        obj["result"] = _sorted_deep(dict(entry.result))
    return gojson.dumps(obj).encode()


_FIELDS = (
    "kind",
    "containerId",
    "config",
    "ifName",
    "networkName",
    "netns",
    "cniArgs",
    "capabilityArgs",
    "result",
)


def _type_error(value: Any, key: str, go_type: str) -> gojsonerr.GoJSONError:
    return gojsonerr.field_type_error(value, "cachedInfo", key, go_type)


def _string(fields: Mapping[str, Any], key: str) -> str:
    value = fields.get(key, "")
    if not isinstance(value, str):
        raise _type_error(value, key, "string")
    return value


def _args(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list):
        raise _type_error(value, "cniArgs", "[][2]string")
    out: list[tuple[str, str]] = []
    for pair in value:
        if pair is None:
            out.append(("", ""))
            continue
        if not isinstance(pair, list) or not all(isinstance(p, str) for p in pair):
            raise _type_error(pair, "cniArgs", "[2]string")
        padded = [*pair[:2], "", ""]
        out.append((padded[0], padded[1]))
    return tuple(out)


def decode_entry(data: bytes) -> CacheEntry:
    """Go's ``json.Unmarshal(data, &cachedInfo)``; raises ``ValueError`` with Go's wording.

    The ``kind`` is *not* checked here: libcni and Multus differ on what a wrong kind means.
    """
    obj = loads_any(data)
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise gojsonerr.value_type_error(obj, "libcni.cachedInfo")
    fields: dict[str, Any] = {}
    for name in _FIELDS:
        value = gojsonerr.field(obj, name)
        if value is not gojsonerr.MISSING and value is not None:
            fields[name] = value
    raw_config = _string(fields, "config")
    try:
        config = base64.b64decode(raw_config, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"illegal base64 data at input byte {len(raw_config)}") from exc
    capability_args = fields.get("capabilityArgs", {})
    if not isinstance(capability_args, dict):
        raise _type_error(capability_args, "capabilityArgs", "map[string]interface {}")
    result = fields.get("result")
    if result is not None and not isinstance(result, dict):
        raise _type_error(result, "result", "map[string]interface {}")
    return CacheEntry(
        kind=_string(fields, "kind"),
        container_id=_string(fields, "containerId"),
        config=config,
        ifname=_string(fields, "ifName"),
        network_name=_string(fields, "networkName"),
        netns=_string(fields, "netns"),
        cni_args=_args(fields["cniArgs"]) if "cniArgs" in fields else (),
        capability_args=capability_args,
        result=result,
    )


async def write_entry(cache_dir: str, entry: CacheEntry) -> str:
    """Persist ``entry`` atomically (dir 0700, file 0600); returns the file's path."""
    path = entry_path(cache_dir, entry.network_name, entry.container_id, entry.ifname)
    data = encode_entry(entry)
    try:
        await asyncio.to_thread(atomic_write, path, data, sync_dir=False)
    except OSError as exc:
        text = f"{exc.filename or path}: {errno_text(exc.errno)}"
        raise LibcniError(errors.IO_FAILURE, f"open {text}") from exc
    return path


def _read_optional(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


async def read_entry_bytes(
    cache_dir: str, network_name: str, container_id: str, ifname: str
) -> bytes | None:
    """The raw cache file, or ``None`` when it cannot be read (libcni ignores read errors)."""
    path = entry_path(cache_dir, network_name, container_id, ifname)
    return await asyncio.to_thread(_read_optional, path)


async def delete_entry(cache_dir: str, network_name: str, container_id: str, ifname: str) -> None:
    """Remove one attachment's file; a missing file or incomplete key is not an error."""
    try:
        path = entry_path(cache_dir, network_name, container_id, ifname)
    except errors.CNIError:
        return
    with contextlib.suppress(OSError):
        await asyncio.to_thread(remove_if_exists, path)


def _list_sync(cache_dir: str, container_id: str) -> list[CacheEntry]:
    directory = Path(results_dir(cache_dir))
    try:
        names = sorted(p.name for p in directory.iterdir())
    except FileNotFoundError:
        return []
    entries: list[CacheEntry] = []
    part = f"-{container_id}-"
    for name in names:
        if container_id:
            pos = name.find(part)
            if pos <= 0 or pos + len(part) >= len(name):
                continue
        data = _read_optional(str(directory / name))
        if data is None:
            continue
        try:
            entry = decode_entry(data)
        except ValueError:
            continue
        if entry.kind != KIND or (container_id and entry.container_id != container_id):
            continue
        if not entry.ifname or not entry.network_name:
            continue
        entries.append(entry)
    return entries


async def list_entries(cache_dir: str, container_id: str = "") -> list[CacheEntry]:
    """Every valid ``cniCacheV1`` entry, by file name (libcni ``GetCachedAttachments``).

    ``container_id`` narrows the list to one container. A missing directory is an empty list.
    """
    try:
        return await asyncio.to_thread(_list_sync, cache_dir, container_id)
    except OSError as exc:
        text = f"open {results_dir(cache_dir)}: {errno_text(exc.errno)}"
        raise LibcniError(errors.IO_FAILURE, text) from exc


def _gather_sync(cache_dir: str) -> list[tuple[str, str]]:
    directory = Path(results_dir(cache_dir))
    out: list[tuple[str, str]] = []
    for name in sorted(p.name for p in directory.iterdir()):
        data = _read_optional(str(directory / name))
        if data is None:
            continue
        try:
            obj = loads_any(data)
            if not isinstance(obj, dict):
                continue
            container_id = gojsonerr.string_field(obj, "containerId", "simpleCacheV1")
            ifname = gojsonerr.string_field(obj, "ifName", "simpleCacheV1")
            gojsonerr.string_field(obj, "kind", "simpleCacheV1")
        except ValueError:
            continue
        if container_id and ifname:
            out.append((container_id, ifname))
    return out


async def gather_valid_attachments(cache_dir: str) -> list[tuple[str, str]]:
    """Multus' GC view (docs/upstream.md, "GC"): ``(containerID, ifname)`` of *every* decodable
    cache file.

    Unlike :func:`list_entries` the kind and network are not checked, and a missing results
    directory is an error (``open <dir>: no such file or directory``), both as upstream.
    """
    try:
        return await asyncio.to_thread(_gather_sync, cache_dir)
    except OSError as exc:
        text = f"open {results_dir(cache_dir)}: {errno_text(exc.errno)}"
        raise LibcniError(errors.IO_FAILURE, text) from exc
