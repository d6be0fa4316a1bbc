"""libcni's result cache: ``<cacheDir>/results/<network>-<containerID>-<ifname>``.

The files are shared with anything else that reads libcni caches (upstream Multus, runtimes'
GC, humans with ``cat``), so the layout is byte-for-byte libcni's ``cachedInfo``: struct keys
in field order, ``capabilityArgs`` and ``result`` as Go maps (sorted keys), ``config`` base64.
Writes are atomic (temp file, fsync, rename, in one worker-thread hop), reads go through
``multusd.fileread``, and the decoding of what was read runs on the loop (a few KiB each).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cni_shim import errors, gojson, gojsonerr
from cni_shim.gojsonerr import loads_any
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from multusd.cni.invoke import LibcniError
from multusd.fileread import read_bytes
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


async def _read_optional(path: str) -> bytes | None:
    """The file, or ``None`` when it cannot be read: libcni ignores read errors here."""
    try:
        return await read_bytes(path)
    except OSError:
        return None


async def read_entry_bytes(
    cache_dir: str, network_name: str, container_id: str, ifname: str
) -> bytes | None:
    """The raw cache file, or ``None`` when it cannot be read (libcni ignores read errors)."""
    return await _read_optional(entry_path(cache_dir, network_name, container_id, ifname))


async def delete_entry(cache_dir: str, network_name: str, container_id: str, ifname: str) -> None:
    """Remove one attachment's file; a missing file or incomplete key is not an error."""
    try:
        path = entry_path(cache_dir, network_name, container_id, ifname)
    except errors.CNIError:
        return
    with contextlib.suppress(OSError):
        await asyncio.to_thread(remove_if_exists, path)


async def _cache_files(cache_dir: str) -> list[str]:
    """The results directory's entries, sorted by name (the listing is one worker-thread hop).

    ``OSError`` as the listing raises it: whether a missing directory is an error is the
    caller's to say.
    """
    names = await asyncio.to_thread(os.listdir, results_dir(cache_dir))
    return sorted(names)


def _entry_of(data: bytes, container_id: str) -> CacheEntry | None:
    """A listed file's entry, ``None`` when libcni's ``GetCachedAttachments`` skips it."""
    try:
        entry = decode_entry(data)
    except ValueError:
        return None
    if entry.kind != KIND or (container_id and entry.container_id != container_id):
        return None
    if not entry.ifname or not entry.network_name:
        return None
    return entry


def _names_container(name: str, container_id: str) -> bool:
    """Whether a file name can be ``<network>-<containerID>-<ifname>`` for ``container_id``."""
    part = f"-{container_id}-"
    pos = name.find(part)
    return pos > 0 and pos + len(part) < len(name)


async def list_entries(cache_dir: str, container_id: str = "") -> list[CacheEntry]:
    """Every valid ``cniCacheV1`` entry, by file name (libcni ``GetCachedAttachments``).

    ``container_id`` narrows the list to one container. A missing directory is an empty list.
    The files are read one after the other: this is GC's, and a burst of reads would queue
    ahead of the ADDs' and DELs' in the worker threads.
    """
    try:
        names = await _cache_files(cache_dir)
    except FileNotFoundError:
        return []
    except OSError as exc:
        text = f"open {results_dir(cache_dir)}: {errno_text(exc.errno)}"
        raise LibcniError(errors.IO_FAILURE, text) from exc
    entries: list[CacheEntry] = []
    directory = results_dir(cache_dir)
    for name in names:
        if container_id and not _names_container(name, container_id):
            continue
        data = await _read_optional(os.path.join(directory, name))
        entry = None if data is None else _entry_of(data, container_id)
        if entry is not None:
            entries.append(entry)
    return entries


def _attachment_of(data: bytes) -> tuple[str, str] | None:
    """``(containerID, ifname)`` of a decodable ``simpleCacheV1``, else ``None``."""
    try:
        obj = loads_any(data)
        if not isinstance(obj, dict):
            return None
        container_id = gojsonerr.string_field(obj, "containerId", "simpleCacheV1")
        ifname = gojsonerr.string_field(obj, "ifName", "simpleCacheV1")
        gojsonerr.string_field(obj, "kind", "simpleCacheV1")
    except ValueError:
        return None
    return (container_id, ifname) if container_id and ifname else None


async def gather_valid_attachments(cache_dir: str) -> list[tuple[str, str]]:
    """Multus' GC view (docs/upstream.md, "GC"): ``(containerID, ifname)`` of *every* decodable
    cache file.

    Unlike :func:`list_entries` the kind and network are not checked, and a missing results
    directory is an error (``open <dir>: no such file or directory``), both as upstream.
    """
    try:
        names = await _cache_files(cache_dir)
    except OSError as exc:
        text = f"open {results_dir(cache_dir)}: {errno_text(exc.errno)}"
        raise LibcniError(errors.IO_FAILURE, text) from exc
    out: list[tuple[str, str]] = []
    directory = results_dir(cache_dir)
    for name in names:
        data = await _read_optional(os.path.join(directory, name))
        attachment = None if data is None else _attachment_of(data)
        if attachment is not None:
            out.append(attachment)
    return out
