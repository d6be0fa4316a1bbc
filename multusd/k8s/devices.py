"""Devices allocated to a pod by device plugins, for NADs with ``k8s.v1.cni.cncf.io/resourceName``.

Upstream (``pkg/kubeletclient``, ``pkg/checkpoint``, reference §5.7) asks the kubelet's
pod-resources gRPC service (``v1.PodResourcesLister/List``) which devices each pod got and, when
that socket does not exist, reads the device manager's checkpoint file instead. Each NAD naming a
resource then takes the next unused device ID of that resource, in sorted order, so that the
plugins of one pod see a stable device-to-interface assignment.

Two deliberate choices:

* ``grpc`` is imported on the first lookup, never at module import. Measured on CPython 3.11
  with grpcio 1.85: +8 MiB RSS for the import inside the daemon (+20 MiB from a bare
  interpreter); 11 MiB in all and one more thread once a call has run. A node without device
  plugins should not pay that.
* No generated protobuf code: the reply is decoded by hand, reading only the five fields Multus
  uses and skipping the rest, so the kubelet can grow its API without breaking us and we carry no
  ``protobuf`` runtime (or its version pinning).

Where upstream would fail because *neither* source exists (no kubelet socket and no checkpoint)
we return an empty map instead: a node without device plugins simply has no devices to give.

DRA (``resource.k8s.io`` claims, the second half of upstream's map) is not implemented here.

The second half of this module handles the device-info files of the Device Info Spec
(reference §6.9.2): the path a delegate's ``CNIDeviceInfoFile`` gets, and the copy of the device
plugin's file to it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cni_shim import gojson
from cni_shim.errors import (
    DECODING_FAILURE,
    INTERNAL,
    INVALID_ENVIRONMENT,
    IO_FAILURE,
    TRY_AGAIN_LATER,
    CNIError,
)
from cni_shim.gojsonerr import type_name
from multusd.fsutil import atomic_write

if TYPE_CHECKING:
    import grpc

__all__ = [
    "CHECKPOINT_PATH",
    "DEVINFO_BASE",
    "KUBELET_SOCKET",
    "DeviceMap",
    "copy_device_plugin_info",
    "device_info_file_path",
    "device_map_for_pod",
    "device_map_for_pod_object",
    "load_device_info",
    "remove_device_info",
]

log = logging.getLogger(__name__)

KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
CHECKPOINT_PATH = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
DEVINFO_BASE = "/var/run/k8s.cni.cncf.io/devinfo"

_LIST_METHOD = "/v1.PodResourcesLister/List"
_MAX_MESSAGE = 16 * 1024 * 1024  # upstream's defaultPodResourcesMaxSize

_CLIENT_PREFIX = "getKubernetesDelegate: failed to get a ResourceClient instance: "
_MAP_PREFIX = "getKubernetesDelegate: failed to get resourceMap from ResourceClient: "


# --------------------------------------------------------------------------------------------
# The map
# --------------------------------------------------------------------------------------------


class DeviceMap:
    """Resource name -> sorted device IDs of one pod, each with a cursor.

    One map serves all delegates of one ADD, so two NADs naming the same resource get two
    different devices. Asking for an unknown or exhausted resource gives ``""``, not an error,
    exactly as upstream: the delegate then simply runs without a ``deviceID``.
    """

    __slots__ = ("_cursor", "_devices")

    def __init__(self, devices: Mapping[str, Iterable[str]] | None = None) -> None:
        # Python orders str by code point, which for valid UTF-8 is Go's byte order (sort.Strings).
        self._devices = {name: tuple(sorted(ids)) for name, ids in (devices or {}).items()}
        self._cursor = dict.fromkeys(self._devices, 0)

    def next_device(self, resource_name: str) -> str:
        ids = self._devices.get(resource_name, ())
        index = self._cursor.get(resource_name, 0)
        if index >= len(ids):
            return ""
        self._cursor[resource_name] = index + 1
        return ids[index]

    def devices(self, resource_name: str) -> tuple[str, ...]:
        """All device IDs of a resource (sorted), regardless of the cursor."""
        return self._devices.get(resource_name, ())

    @property
    def resources(self) -> dict[str, tuple[str, ...]]:
        return dict(self._devices)

    def __len__(self) -> int:
        return len(self._devices)

    def __repr__(self) -> str:
        return f"DeviceMap({self._devices!r})"


async def device_map_for_pod(
    namespace: str,
    name: str,
    uid: str,
    *,
    socket_path: str = KUBELET_SOCKET,
    checkpoint_path: str = CHECKPOINT_PATH,
    timeout: float = 10.0,  # noqa: ASYNC109 - a gRPC deadline, sent to the kubelet too
) -> DeviceMap:
    """The devices the kubelet allocated to pod ``namespace/name`` (UID ``uid``).

    The kubelet socket is preferred whenever it exists (even if nothing listens on it, as
    upstream: ``os.Stat`` decides); the checkpoint file matches by pod UID, the socket by name.
    Failures raise ``CNIError`` with upstream's message chain.
    """
    if await asyncio.to_thread(os.path.exists, socket_path):
        reply, client_repr = await _list_pod_resources(socket_path, timeout)
        if not name or not namespace:
            raise CNIError(
                INVALID_ENVIRONMENT,
                _MAP_PREFIX + "GetPodResourceMap: Pod name or namespace cannot be empty",
            )
        try:
            return await asyncio.to_thread(_map_from_kubelet, reply, namespace, name)
        except ValueError as exc:
            # Go fails while unmarshalling inside List, so the text is that of a failed call.
            desc = f"grpc: failed to unmarshal the received message: proto: {exc}"
            text = _rpc_error_text("Internal", desc)
            raise _list_failure(client_repr, DECODING_FAILURE, text) from exc

    entries = await asyncio.to_thread(_read_checkpoint, checkpoint_path)
    if entries is None:
        log.debug("no kubelet socket %s and no checkpoint %s", socket_path, checkpoint_path)
        return DeviceMap()
    if not uid:
        raise CNIError(
            INVALID_ENVIRONMENT, _MAP_PREFIX + "GetPodResourceMap: invalid Pod cannot be empty"
        )
    return _map_from_checkpoint(entries, uid)


async def device_map_for_pod_object(pod: Mapping[str, Any], **kwargs: Any) -> DeviceMap:
    """``device_map_for_pod`` for a pod object as the API returns it (``metadata`` read)."""
    meta = pod.get("metadata") or {}
    return await device_map_for_pod(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        **kwargs,
    )


# --------------------------------------------------------------------------------------------
# Source 1: the kubelet pod-resources service
# --------------------------------------------------------------------------------------------

# Go's codes.Code.String() for each status: CamelCase, and "Canceled" with one "l".
_GO_CODE_NAMES = {"OK": "OK", "CANCELLED": "Canceled"}


def _go_code_name(code: grpc.StatusCode) -> str:
    return _GO_CODE_NAMES.get(code.name) or "".join(
        part.capitalize() for part in code.name.split("_")
    )


def _rpc_error_text(code_name: str, desc: str) -> str:
    """What Go's ``status.Error`` prints; upstream wraps it unchanged."""
    return f"rpc error: code = {code_name} desc = {desc}"


def _list_failure(client_repr: str, code: int, rpc_text: str) -> CNIError:
    # The trailing newline is upstream's (a "\n" at the end of its format string).
    return CNIError(
        code,
        _CLIENT_PREFIX
        + "getKubeletClient: error getting pod resources from client: "
        + f"getPodResources: failed to list pod resources, {client_repr}.Get(_) = _, {rpc_text}\n",
    )


async def _list_pod_resources(
    socket_path: str,
    timeout: float,  # noqa: ASYNC109 - a gRPC deadline, sent to the kubelet too
) -> tuple[bytes, str]:
    """One ``List`` call on a fresh channel (as upstream dials per ADD): the raw reply bytes,
    and how to name the client in error messages.

    The reply is deserialized after the call rather than by grpc: grpc.aio swallows an
    exception raised by a deserializer and hands back ``None``.
    """
    import grpc
    import grpc.aio

    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE),
        ("grpc.max_send_message_length", _MAX_MESSAGE),
        ("grpc.enable_http_proxy", 0),  # a node's https_proxy must not capture a unix socket
    ]
    async with grpc.aio.insecure_channel(f"unix:{socket_path}", options=options) as channel:
        # Go prints the client struct pointer ("&{0xc000123456}") in this message; ours is the
        # same shape with our channel's identity.
        client_repr = f"&{{{id(channel):#x}}}"
        call = channel.unary_unary(
            _LIST_METHOD,
            request_serializer=_encode_empty,
            response_deserializer=_raw_bytes,
        )
        try:
            reply = await call(b"", timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            status = exc.code()
            transient = status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            desc = exc.details() or ""
            if status is grpc.StatusCode.DEADLINE_EXCEEDED:
                desc = "context deadline exceeded"  # Go's wording for a client-side deadline
            text = _rpc_error_text(_go_code_name(status), desc)
            raise _list_failure(
                client_repr, TRY_AGAIN_LATER if transient else INTERNAL, text
            ) from exc
    if not isinstance(reply, bytes):
        raise _list_failure(
            client_repr,
            INTERNAL,
            _rpc_error_text("Internal", "grpc: failed to unmarshal the received message"),
        )
    return reply, client_repr


def _encode_empty(_request: bytes) -> bytes:
    return b""  # ListPodResourcesRequest has no fields


def _raw_bytes(data: bytes) -> bytes:
    return data


def _map_from_kubelet(reply: bytes, namespace: str, name: str) -> DeviceMap:
    """Concatenate the devices of every container of every matching pod entry, per resource.

    Only matching entries have their containers decoded; a malformed message raises
    ``ValueError``.
    """
    devices: dict[str, list[str]] = {}
    for pod_name, pod_namespace, containers in _decode_list_response(reply):
        if pod_name != name or pod_namespace != namespace:
            continue
        for container in containers:
            for resource, ids in _decode_container_devices(reply, *container):
                devices.setdefault(resource, []).extend(ids)
    return DeviceMap(devices)


# ---- the protobuf wire format, decoded by hand --------------------------------------------
#
# ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
# PodResources             { string name = 1; string namespace = 2;
#                            repeated ContainerResources containers = 3; ... }
# ContainerResources       { string name = 1; repeated ContainerDevices devices = 2; ... }
# ContainerDevices         { string resource_name = 1; repeated string device_ids = 2; ... }
#
# Every field we read is length-delimited (wire type 2). A field number we know with another
# wire type is treated as unknown and skipped, as protobuf's own decoders do.

_VARINT, _I64, _LEN, _SGROUP, _EGROUP, _I32 = 0, 1, 2, 3, 4, 5
Span = tuple[int, int]


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 64:
            raise ValueError("varint overflow")


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """``(field_number, value_start, value_end)`` of each length-delimited field in a message.

    Other wire types are skipped (groups included, which only old proto2 senders produce).
    """
    pos = start
    open_groups: list[int] = []
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ValueError("invalid field number")
        if wire == _VARINT:
            _, pos = _varint(buf, pos, end)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise ValueError("truncated field")
            if not open_groups:
                yield number, pos, pos + length
            pos += length
        elif wire == _SGROUP:
            open_groups.append(number)
        elif wire == _EGROUP:
            if not open_groups or open_groups.pop() != number:
                raise ValueError("mismatching end group marker")
        else:
            raise ValueError(f"invalid wire type {wire}")
        if pos > end:
            raise ValueError("truncated field")
    if open_groups:
        raise ValueError("unterminated group")


def _string(buf: bytes, start: int, end: int) -> str:
    try:
        return buf[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("string field contains invalid UTF-8") from None


def _decode_list_response(buf: bytes) -> Iterator[tuple[str, str, list[Span]]]:
    """Each pod entry's name and namespace, with its containers left undecoded (byte spans)."""
    for number, start, end in _fields(buf, 0, len(buf)):
        if number != 1:
            continue
        name = namespace = ""
        containers: list[Span] = []
        for field, fstart, fend in _fields(buf, start, end):
            if field == 1:
                name = _string(buf, fstart, fend)
            elif field == 2:
                namespace = _string(buf, fstart, fend)
            elif field == 3:
                containers.append((fstart, fend))
        yield name, namespace, containers


def _decode_container_devices(buf: bytes, start: int, end: int) -> Iterator[tuple[str, list[str]]]:
    for number, dstart, dend in _fields(buf, start, end):
        if number != 2:
            continue
        resource = ""
        ids: list[str] = []
        for field, fstart, fend in _fields(buf, dstart, dend):
            if field == 1:
                resource = _string(buf, fstart, fend)
            elif field == 2:
                ids.append(_string(buf, fstart, fend))
        yield resource, ids


# --------------------------------------------------------------------------------------------
# Source 2: the device manager's checkpoint file
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CheckpointEntry:
    pod_uid: str
    resource_name: str
    device_ids: tuple[str, ...]


def _read_checkpoint(path: str) -> list[_CheckpointEntry] | None:
    """The checkpoint's pod entries; ``None`` when the file does not exist."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CNIError(
            IO_FAILURE,
            _CLIENT_PREFIX + f"getPodEntries: error reading file {path}\n{_go_path_error(exc)}\n",
        ) from exc
    try:
        return _checkpoint_entries(_go_json(raw))
    except ValueError as exc:
        raise CNIError(
            DECODING_FAILURE, _CLIENT_PREFIX + f"getPodEntries: error unmarshalling raw bytes {exc}"
        ) from exc


def _go_path_error(exc: OSError) -> str:
    """Go's ``*PathError`` text: ``open <path>: permission denied`` (a directory fails at read)."""
    op = "read" if isinstance(exc, IsADirectoryError) else "open"
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"{op} {exc.filename}: {reason[:1].lower()}{reason[1:]}"


def _map_from_checkpoint(entries: list[_CheckpointEntry], uid: str) -> DeviceMap:
    devices: dict[str, list[str]] = {}
    for entry in entries:
        if entry.pod_uid == uid:
            devices.setdefault(entry.resource_name, []).extend(entry.device_ids)
    return DeviceMap(devices)


class _Object(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in document order, to decode it as Go does."""

    def field(self, name: str) -> Any:
        """Go's ``encoding/json`` matches keys case-insensitively and the last match wins."""
        found = None
        folded = name.lower()
        for key, value in self:
            if key.lower() == folded:
                found = value
        return found


def _go_json(raw: bytes) -> Any:
    """Parse JSON keeping objects' key order and duplicates; Go's invalid-UTF-8 replacement."""
    return json.loads(
        raw.decode("utf-8", "replace"),
        object_pairs_hook=_Object,
        parse_constant=_reject_constant,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _json_kind(value: Any) -> str:
    """Go's name for the JSON kind; our objects are pair lists, so they are asked about first."""
    return "object" if isinstance(value, _Object) else type_name(value)


def _type_error(value: Any, struct: str, path: str, go_type: str) -> ValueError:
    """Go's ``UnmarshalTypeError`` text."""
    return ValueError(
        f"json: cannot unmarshal {_json_kind(value)} into Go struct field {struct}.{path} "
        f"of type {go_type}"
    )


def _checkpoint_entries(doc: Any) -> list[_CheckpointEntry]:
    """``Data.PodDeviceEntries`` of the checkpoint, with Go's type checks for what we read.

    ``DeviceIDs`` is ``map[int64][]string`` (NUMA node -> IDs) since kubelet 1.20; the older
    flat list fails here as it does in upstream's decoder.
    """
    if doc is None:
        return []
    if not isinstance(doc, _Object):
        raise ValueError(
            f"json: cannot unmarshal {_json_kind(doc)} into Go value of type "
            "checkpoint.checkpointFileData"
        )
    data = doc.field("Data")
    if data is None:
        return []
    if not isinstance(data, _Object):
        raise _type_error(data, "checkpointFileData", "Data", "checkpoint.checkpointData")
    raw_entries = data.field("PodDeviceEntries")
    if raw_entries is None:
        return []
    where = "Data.PodDeviceEntries"
    if not isinstance(raw_entries, list) or isinstance(raw_entries, _Object):
        raise _type_error(raw_entries, "checkpointData", where, "[]checkpoint.PodDevicesEntry")
    entries = []
    for raw in raw_entries:
        if raw is None:
            entries.append(_CheckpointEntry("", "", ()))
            continue
        if not isinstance(raw, _Object):
            raise _type_error(raw, "checkpointData", where, "checkpoint.PodDevicesEntry")
        texts = {}
        for key in ("PodUID", "ContainerName", "ResourceName"):
            value = raw.field(key)
            if value is not None and not isinstance(value, str):
                raise _type_error(value, "PodDevicesEntry", f"{where}.{key}", "string")
            texts[key] = value or ""
        ids = _numa_device_ids(raw.field("DeviceIDs"), f"{where}.DeviceIDs")
        entries.append(_CheckpointEntry(texts["PodUID"], texts["ResourceName"], ids))
    return entries


_INT64 = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt's syntax (no spaces, no underscores)


def _numa_device_ids(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, _Object):
        raise _type_error(value, "PodDevicesEntry", where, "map[int64][]string")
    ids: list[str] = []
    for numa, numa_ids in value:
        if not _INT64.fullmatch(numa) or not -(2**63) <= int(numa) < 2**63:
            raise ValueError(f"json: cannot unmarshal number {numa} into Go value of type int64")
        if numa_ids is None:
            continue
        if not isinstance(numa_ids, list) or isinstance(numa_ids, _Object):
            raise _type_error(numa_ids, "PodDevicesEntry", where, "[]string")
        for device in numa_ids:
            if device is not None and not isinstance(device, str):
                raise _type_error(device, "PodDevicesEntry", where, "string")
            ids.append(device or "")
    return tuple(ids)


# --------------------------------------------------------------------------------------------
# Device-info files (Device Info Spec; reference §6.9.2)
# --------------------------------------------------------------------------------------------

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
    return await asyncio.to_thread(_copy_device_info, source, target)


def _copy_device_info(source: str, target: str) -> str | None:
    try:
        info = _load_device_info(source)
        data = gojson.dumps(info).encode()
        atomic_write(target, data, mode=0o444, dir_mode=0o755, sync_dir=False, replace=False)
    except (OSError, ValueError) as exc:
        log.debug("device-info copy %s -> %s skipped: %s", source, target, exc)
    return target if os.path.exists(target) else None


async def load_device_info(path: str) -> dict[str, Any] | None:
    """A ``CNIDeviceInfoFile`` as a ``device-info`` value for network-status; ``None`` if absent
    or unreadable (the plugin, not only the device plugin, may have written it)."""
    try:
        return await asyncio.to_thread(_load_device_info, path)
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


def _load_device_info(path: str) -> dict[str, Any]:
    """Decode as Go decodes into ``v1.DeviceInfo``; ``ValueError`` where Go would fail."""
    with open(path, "rb") as handle:
        raw = handle.read()
    doc = _go_json(raw)
    if doc is None:
        return {}
    if not isinstance(doc, _Object):
        raise ValueError(f"cannot decode {_json_kind(doc)} as DeviceInfo")
    info: dict[str, Any] = {}
    for key, value in doc:
        name = _match(key, (*_DEVINFO_STRINGS, *_DEVINFO_OBJECTS))
        if name is None or (value is None and name in _DEVINFO_STRINGS):
            continue
        if name in _DEVINFO_STRINGS:
            if not isinstance(value, str):
                raise ValueError(f"DeviceInfo.{name}: {_json_kind(value)} is not a string")
            info[name] = value
        elif value is None:
            info.pop(name, None)
        elif not isinstance(value, _Object):
            raise ValueError(f"DeviceInfo.{name}: {_json_kind(value)} is not an object")
        else:
            # Go decodes into the existing struct, so a repeated key merges into the first.
            info[name] = _sub_object(value, name, info.get(name) or {})
    return _ordered(info)


def _sub_object(obj: _Object, name: str, into: dict[str, str]) -> dict[str, str]:
    known = _DEVINFO_OBJECTS[name]
    out = dict(into)
    for key, value in obj:
        field = _match(key, known)
        if field is None or value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"DeviceInfo.{name}.{field}: {_json_kind(value)} is not a string")
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
