"""The device manager's checkpoint file: which devices each pod got, by pod UID.

Upstream (``pkg/checkpoint``) reads the kubelet's ``kubelet_internal_checkpoint`` when the
pod-resources socket does not exist, and decodes it with Go's ``encoding/json`` into its own
struct. This is that reader, with Go's type checks and error texts for the fields it reads;
``multusd.k8s.devices`` decides when to read it and turns its entries into the pod's device map.

Errors are ``CNIError`` values with upstream's message chain from ``getPodEntries`` on; the
caller puts ``getKubernetesDelegate``'s prefix in front.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cni_shim.errors import DECODING_FAILURE, IO_FAILURE, CNIError
from cni_shim.gosyscall import errno_text
from multusd.fileread import read_bytes_if_exists
from multusd.k8s.gostruct import GoObject, go_json, json_kind

__all__ = ["CHECKPOINT_PATH", "CheckpointEntry", "pod_devices", "read_checkpoint"]

CHECKPOINT_PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


@dataclass(frozen=True, slots=True)
class CheckpointEntry:
    """One ``PodDeviceEntries`` item: the devices of one resource for one container of a pod."""

    pod_uid: str
    resource_name: str
    device_ids: tuple[str, ...]


async def read_checkpoint(path: str) -> list[CheckpointEntry] | None:
    """The checkpoint's pod entries; ``None`` when the file does not exist.

    Read through ``multusd.fileread``, decoded on the loop: even 250 pods' entries with their
    allocation responses (141 KiB) decode in under a millisecond.
    """
    try:
        raw = await read_bytes_if_exists(path)
    except OSError as exc:
        raise CNIError(
            IO_FAILURE, f"getPodEntries: error reading file {path}\n{_go_path_error(exc)}\n"
        ) from exc
    if raw is None:
        return None
    try:
        return _checkpoint_entries(go_json(raw))
    except ValueError as exc:
        raise CNIError(
            DECODING_FAILURE, f"getPodEntries: error unmarshalling raw bytes {exc}"
        ) from exc


def _go_path_error(exc: OSError) -> str:
    """Go's ``*PathError`` text: ``open <path>: permission denied`` (a directory fails at read)."""
    op = "read" if isinstance(exc, IsADirectoryError) else "open"
    reason = errno_text(exc.errno) if exc.errno else str(exc)
    return f"{op} {exc.filename}: {reason}"


def pod_devices(entries: list[CheckpointEntry], uid: str) -> dict[str, list[str]]:
    """The device IDs of every entry of pod ``uid``, concatenated per resource."""
    devices: dict[str, list[str]] = {}
    for entry in entries:
        if entry.pod_uid == uid:
            devices.setdefault(entry.resource_name, []).extend(entry.device_ids)
    return devices


def _type_error(value: Any, struct: str, path: str, go_type: str) -> ValueError:
    """Go's ``UnmarshalTypeError`` text."""
    return ValueError(
        f"json: cannot unmarshal {json_kind(value)} into Go struct field {struct}.{path} "
        f"of type {go_type}"
    )


def _checkpoint_entries(doc: Any) -> list[CheckpointEntry]:
    """``Data.PodDeviceEntries`` of the checkpoint, with Go's type checks for what we read.

    ``DeviceIDs`` is ``map[int64][]string`` (NUMA node -> IDs) since kubelet 1.20; the older
    flat list fails here as it does in upstream's decoder.
    """
    if doc is None:
        return []
    if not isinstance(doc, GoObject):
        raise ValueError(
            f"json: cannot unmarshal {json_kind(doc)} into Go value of type "
            "checkpoint.checkpointFileData"
        )
    data = doc.field("Data")
    if data is None:
        return []
    if not isinstance(data, GoObject):
        raise _type_error(data, "checkpointFileData", "Data", "checkpoint.checkpointData")
    raw_entries = data.field("PodDeviceEntries")
    if raw_entries is None:
        return []
    where = "Data.PodDeviceEntries"
    if not isinstance(raw_entries, list) or isinstance(raw_entries, GoObject):
        raise _type_error(raw_entries, "checkpointData", where, "[]checkpoint.PodDevicesEntry")
    entries = []
    for raw in raw_entries:
        if raw is None:
            entries.append(CheckpointEntry("", "", ()))
            continue
        if not isinstance(raw, GoObject):
            raise _type_error(raw, "checkpointData", where, "checkpoint.PodDevicesEntry")
        texts = {}
        for key in ("PodUID", "ContainerName", "ResourceName"):
            value = raw.field(key)
            if value is not None and not isinstance(value, str):
                raise _type_error(value, "PodDevicesEntry", f"{where}.{key}", "string")
            texts[key] = value or ""
        ids = _numa_device_ids(raw.field("DeviceIDs"), f"{where}.DeviceIDs")
        entries.append(CheckpointEntry(texts["PodUID"], texts["ResourceName"], ids))
    return entries


_INT64 = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt's syntax (no spaces, no underscores)


def _numa_device_ids(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, GoObject):
        raise _type_error(value, "PodDevicesEntry", where, "map[int64][]string")
    ids: list[str] = []
    for numa, numa_ids in value:
        if not _INT64.fullmatch(numa) or not -(2**63) <= int(numa) < 2**63:
            raise ValueError(f"json: cannot unmarshal number {numa} into Go value of type int64")
        if numa_ids is None:
            continue
        if not isinstance(numa_ids, list) or isinstance(numa_ids, GoObject):
            raise _type_error(numa_ids, "PodDevicesEntry", where, "[]string")
        for device in numa_ids:
            if device is not None and not isinstance(device, str):
                raise _type_error(device, "PodDevicesEntry", where, "string")
            ids.append(device or "")
    return tuple(ids)
