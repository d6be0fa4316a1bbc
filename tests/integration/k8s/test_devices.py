"""Device maps against a real gRPC server playing the kubelet, and the device-info files.

The fake kubelet is a grpc.aio server on a unix socket with a generic handler, so the client
goes through the real HTTP/2 + protobuf-framing path. Its replies are encoded by hand below,
independently of the decoder under test, and carry fields the decoder must skip (CPU ids,
topology, memory, dynamic resources, fields from the future).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypedDict

import grpc
import grpc.aio
import pytest

from cni_shim.errors import (
    DECODING_FAILURE,
    INTERNAL,
    INVALID_ENVIRONMENT,
    IO_FAILURE,
    TRY_AGAIN_LATER,
    CNIError,
)
from multusd.k8s.devices import DeviceMap, device_map_for_pod_object, kubelet_devices
from multusd.k8s.devinfo import (
    copy_device_plugin_info,
    device_info_file_path,
    load_device_info,
    remove_device_info,
)

SRIOV = "intel.com/sriov"
GPU = "nvidia.com/gpu"
CLIENT_PREFIX = (
    "getKubernetesDelegate: failed to get a ResourceClient instance: "
    "getKubeletClient: error getting pod resources from client: "
    "getPodResources: failed to list pod resources, "
)


# ---- a protobuf encoder, just enough to write ListPodResourcesResponse ----------------------


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def length_field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def text(number: int, value: str) -> bytes:
    return length_field(number, value.encode())


def varint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def fixed32_field(number: int) -> bytes:
    return varint(number << 3 | 5) + b"\x01\x02\x03\x04"


def fixed64_field(number: int) -> bytes:
    return varint(number << 3 | 1) + bytes(8)


def container_devices(resource: str, ids: list[str], numa: int = 0) -> bytes:
    topology = length_field(1, varint_field(1, numa))  # TopologyInfo{nodes: [NUMANode{ID}]}
    return text(1, resource) + b"".join(text(2, i) for i in ids) + length_field(3, topology)


def container(name: str, *devices: bytes) -> bytes:
    packed_cpus = length_field(3, varint(2) + varint(3))  # cpu_ids, packed
    memory = length_field(4, text(1, "memory") + varint_field(2, 1 << 30))
    dynamic = length_field(5, text(2, "claim") + text(3, "ns"))
    return (
        text(1, name)
        + b"".join(length_field(2, d) for d in devices)
        + packed_cpus
        + memory
        + dynamic
        + fixed32_field(17)  # a field from a future kubelet
    )


def pod(name: str, namespace: str, *containers: bytes, namespace_first: bool = False) -> bytes:
    head = (
        text(2, namespace) + text(1, name)
        if namespace_first
        else text(1, name) + text(2, namespace)
    )
    return head + b"".join(length_field(3, c) for c in containers) + fixed64_field(99)


def list_response(*pods: bytes) -> bytes:
    return b"".join(length_field(1, p) for p in pods)


REPLY = list_response(
    pod("web", "other-ns", container("app", container_devices(SRIOV, ["0000:09:00.0"]))),
    pod(
        "web",
        "default",
        container(
            "app",
            container_devices(SRIOV, ["0000:03:00.3", "0000:03:00.1"], numa=1),
            container_devices(GPU, ["gpu-b"]),
        ),
        container("sidecar", container_devices(SRIOV, ["0000:03:00.2"])),
        namespace_first=True,
    ),
    pod("db", "default", container("db", container_devices(GPU, ["gpu-a"]))),
    pod("web", "default", container("late", container_devices(GPU, ["gpu-0"]))),
)


# ---- the fake kubelet ------------------------------------------------------------------------

Handler = Callable[[bytes, grpc.aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]


@asynccontextmanager
async def fake_kubelet(socket_path: Path, handler: Handler) -> AsyncIterator[list[bytes]]:
    """A PodResourcesLister serving ``List`` with ``handler``; yields the requests received."""
    requests: list[bytes] = []

    async def list_handler(
        request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]
    ) -> bytes:
        requests.append(request)
        return await handler(request, context)

    method = grpc.unary_unary_rpc_method_handler(
        list_handler, request_deserializer=bytes, response_serializer=bytes
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": method}),)
    )
    server.add_insecure_port(f"unix:{socket_path}")
    await server.start()
    try:
        yield requests
    finally:
        await server.stop(None)


def replying(data: bytes) -> Handler:
    async def handler(_request: bytes, _context: Any) -> bytes:
        return data

    return handler


class Paths(TypedDict):
    socket_path: str
    checkpoint_path: str


def paths(tmp: Path) -> Paths:
    return {
        "socket_path": str(tmp / "kubelet.sock"),
        "checkpoint_path": str(tmp / "kubelet_internal_checkpoint"),
    }


# ---- the kubelet source ----------------------------------------------------------------------


async def test_kubelet_map_concatenates_containers_and_sorts(short_tmp: Path) -> None:
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(REPLY)) as requests:
        devices = await _device_map("default", "web", "uid-ignored", **paths(short_tmp))
    assert requests == [b""]  # ListPodResourcesRequest{} encodes as nothing
    assert devices.resources == {
        SRIOV: ("0000:03:00.1", "0000:03:00.2", "0000:03:00.3"),
        GPU: ("gpu-0", "gpu-b"),  # both entries of default/web, sorted together
    }


async def test_next_device_walks_each_resource_on_its_own(short_tmp: Path) -> None:
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(REPLY)):
        devices = await _device_map("default", "web", "", **paths(short_tmp))
    assert devices.next_device(SRIOV) == "0000:03:00.1"
    assert devices.next_device(GPU) == "gpu-0"
    assert devices.next_device(SRIOV) == "0000:03:00.2"
    assert devices.next_device(SRIOV) == "0000:03:00.3"
    assert devices.next_device(SRIOV) == ""  # exhausted: no device, no error
    assert devices.next_device(SRIOV) == ""
    assert devices.next_device(GPU) == "gpu-b"
    assert devices.next_device("example.com/none") == ""
    assert devices.devices(SRIOV) == ("0000:03:00.1", "0000:03:00.2", "0000:03:00.3")


async def test_pod_not_listed_gives_an_empty_map(short_tmp: Path) -> None:
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(REPLY)):
        devices = await _device_map("default", "nobody", "", **paths(short_tmp))
        empty = await _device_map("default", "web", "", **paths(short_tmp))
    assert len(devices) == 0
    assert devices.next_device(SRIOV) == ""
    assert len(empty) == 2


async def test_pod_object_reads_metadata(short_tmp: Path) -> None:
    obj = {"metadata": {"namespace": "default", "name": "db", "uid": "u"}}
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(REPLY)):
        devices = await device_map_for_pod_object(obj, **paths(short_tmp))
    assert devices.resources == {GPU: ("gpu-a",)}


async def test_pod_without_name_fails_after_the_list_as_upstream(short_tmp: Path) -> None:
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(REPLY)) as requests:
        with pytest.raises(CNIError) as failure:
            await _device_map("default", "", "uid", **paths(short_tmp))
    assert len(requests) == 1
    assert failure.value.code == INVALID_ENVIRONMENT
    assert failure.value.msg == (
        "getKubernetesDelegate: failed to get resourceMap from ResourceClient: "
        "GetPodResourceMap: Pod name or namespace cannot be empty"
    )


def rpc_failure(code: str, desc: str) -> re.Pattern[str]:
    tail = re.escape(f", rpc error: code = {code} desc = {desc}\n")
    return re.compile(re.escape(CLIENT_PREFIX) + r"&\{0x[0-9a-f]+\}\.Get\(_\) = _" + tail)


async def test_a_failing_kubelet_gives_upstreams_error_text(short_tmp: Path) -> None:
    async def deny(_request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not for you")
        raise AssertionError("abort returned")

    async with fake_kubelet(short_tmp / "kubelet.sock", deny):
        with pytest.raises(CNIError) as failure:
            await _device_map("default", "web", "", **paths(short_tmp))
    assert failure.value.code == INTERNAL
    assert rpc_failure("PermissionDenied", "not for you").fullmatch(failure.value.msg)


async def test_a_slow_kubelet_hits_the_deadline(short_tmp: Path) -> None:
    release = asyncio.Event()

    async def stall(_request: bytes, _context: Any) -> bytes:
        await release.wait()
        return REPLY

    async with fake_kubelet(short_tmp / "kubelet.sock", stall):
        with pytest.raises(CNIError) as failure:
            await _device_map("default", "web", "", timeout=0.3, **paths(short_tmp))
        release.set()
    assert failure.value.code == TRY_AGAIN_LATER
    assert rpc_failure("DeadlineExceeded", "context deadline exceeded").fullmatch(failure.value.msg)


async def test_a_socket_nobody_listens_on_is_unavailable(short_tmp: Path) -> None:
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(short_tmp / "kubelet.sock"))
    stale.close()  # the file stays, as after a kubelet crash
    (short_tmp / "kubelet_internal_checkpoint").write_text('{"Data": {}}')
    with pytest.raises(CNIError) as failure:
        await _device_map("default", "web", "", **paths(short_tmp))
    # The socket existing is what counts (upstream's os.Stat): no checkpoint fallback.
    assert failure.value.code == TRY_AGAIN_LATER
    assert failure.value.msg.startswith(CLIENT_PREFIX)
    assert ", rpc error: code = Unavailable desc = " in failure.value.msg


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        # The reasons are the texts of the project's one protobuf reader (multusd.protobuf).
        (list_response(pod("web", "default"))[:-2], "truncated protobuf message"),
        (
            list_response(text(1, "web") + text(2, "default") + text(1, "")[:1]),
            "truncated protobuf message",
        ),
        (list_response(pod("web", "default")) + varint(1 << 3 | 7), "protobuf wire type 7"),
        (list_response(length_field(1, b"w\xff") + text(2, "default")), "invalid UTF-8"),
    ],
)
async def test_a_malformed_reply_is_a_decoding_failure(
    short_tmp: Path, reply: bytes, reason: str
) -> None:
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(reply)):
        with pytest.raises(CNIError) as failure:
            await _device_map("default", "web", "", **paths(short_tmp))
    assert failure.value.code == DECODING_FAILURE
    assert failure.value.msg.startswith(CLIENT_PREFIX)
    assert "rpc error: code = Internal desc = grpc: failed to unmarshal the received message: " in (
        failure.value.msg
    )
    assert reason in failure.value.msg


async def test_groups_and_unknown_wire_types_are_skipped(short_tmp: Path) -> None:
    group = varint(40 << 3 | 3) + varint_field(1, 5) + text(2, "x") + varint(40 << 3 | 4)
    reply = group + list_response(
        pod("web", "default", container("c", container_devices(GPU, ["g1"]))) + group
    )
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(reply)):
        devices = await _device_map("default", "web", "", **paths(short_tmp))
    assert devices.resources == {GPU: ("g1",)}


async def test_big_replies_fit_in_16_mib(short_tmp: Path) -> None:
    filler = pod("filler", "default", container("c", container_devices(GPU, ["x" * 1000] * 5000)))
    reply = list_response(
        filler, pod("web", "default", container("c", container_devices(GPU, ["g"])))
    )
    assert 4 * 1024 * 1024 < len(reply) < 16 * 1024 * 1024  # above grpc's default 4 MiB limit
    async with fake_kubelet(short_tmp / "kubelet.sock", replying(reply)):
        devices = await _device_map("default", "web", "", **paths(short_tmp))
    assert devices.resources == {GPU: ("g",)}


# ---- the checkpoint fallback -----------------------------------------------------------------


def checkpoint(entries: list[dict[str, Any]]) -> str:
    """The device manager's checkpoint as kubelet >= 1.20 writes it."""
    return json.dumps(
        {
            "Data": {
                "PodDeviceEntries": entries,
                "RegisteredDevices": {SRIOV: ["0000:03:00.1", "0000:03:00.2", "0000:03:00.3"]},
            },
            "Checksum": 3854436589,
        }
    )


def entry(
    uid: str, container_name: str, resource: str, ids: dict[str, list[str]]
) -> dict[str, Any]:
    return {
        "PodUID": uid,
        "ContainerName": container_name,
        "ResourceName": resource,
        "DeviceIDs": ids,
        "AllocResp": "CiIKHVNSSU9WLU5FVFdPUks=",
    }


CHECKPOINT = checkpoint(
    [
        entry("uid-1", "app", SRIOV, {"1": ["0000:03:00.3"], "0": ["0000:03:00.1"]}),
        entry("uid-1", "sidecar", SRIOV, {"0": ["0000:03:00.2"]}),
        entry("uid-1", "app", GPU, {"-1": ["gpu-b", "gpu-a"]}),
        entry("uid-2", "app", SRIOV, {"0": ["0000:09:00.0"]}),
    ]
)


async def test_checkpoint_when_there_is_no_socket(short_tmp: Path) -> None:
    (short_tmp / "kubelet_internal_checkpoint").write_text(CHECKPOINT)
    devices = await _device_map("default", "web", "uid-1", **paths(short_tmp))
    assert devices.resources == {
        SRIOV: ("0000:03:00.1", "0000:03:00.2", "0000:03:00.3"),
        GPU: ("gpu-a", "gpu-b"),
    }
    assert devices.next_device(SRIOV) == "0000:03:00.1"
    other = await _device_map("default", "web", "uid-3", **paths(short_tmp))
    assert len(other) == 0


async def test_checkpoint_keys_match_as_go_does(short_tmp: Path) -> None:
    # encoding/json matches keys case-insensitively; null members are no-ops.
    doc = (
        '{"data": {"podDeviceEntries": [{"poduid": "u", "resourcename": "r",'
        ' "deviceids": {"0": ["b", "a"]}}, null]}, "Checksum": null}'
    )
    (short_tmp / "kubelet_internal_checkpoint").write_text(doc)
    devices = await _device_map("default", "web", "u", **paths(short_tmp))
    assert devices.resources == {"r": ("a", "b")}


async def test_checkpoint_needs_the_pod_uid(short_tmp: Path) -> None:
    (short_tmp / "kubelet_internal_checkpoint").write_text(CHECKPOINT)
    with pytest.raises(CNIError) as failure:
        await _device_map("default", "web", "", **paths(short_tmp))
    assert failure.value.code == INVALID_ENVIRONMENT
    assert failure.value.msg == (
        "getKubernetesDelegate: failed to get resourceMap from ResourceClient: "
        "GetPodResourceMap: invalid Pod cannot be empty"
    )


@pytest.mark.parametrize(
    ("doc", "go_error"),
    [
        (
            checkpoint([{"PodUID": "u", "ResourceName": "r", "DeviceIDs": ["a", "b"]}]),
            "json: cannot unmarshal array into Go struct field "
            "PodDevicesEntry.Data.PodDeviceEntries.DeviceIDs of type map[int64][]string",
        ),
        (
            checkpoint([{"PodUID": 7}]),
            "json: cannot unmarshal number into Go struct field "
            "PodDevicesEntry.Data.PodDeviceEntries.PodUID of type string",
        ),
        (
            checkpoint([{"DeviceIDs": {"numa0": ["a"]}}]),
            "json: cannot unmarshal number numa0 into Go value of type int64",
        ),
        (
            '{"Data": []}',
            "json: cannot unmarshal array into Go struct field "
            "checkpointFileData.Data of type checkpoint.checkpointData",
        ),
        ("[]", "json: cannot unmarshal array into Go value of type checkpoint.checkpointFileData"),
    ],
)
async def test_a_checkpoint_go_cannot_decode_fails_the_same_way(
    short_tmp: Path, doc: str, go_error: str
) -> None:
    (short_tmp / "kubelet_internal_checkpoint").write_text(doc)
    with pytest.raises(CNIError) as failure:
        await _device_map("default", "web", "u", **paths(short_tmp))
    assert failure.value.code == DECODING_FAILURE
    assert failure.value.msg == (
        "getKubernetesDelegate: failed to get a ResourceClient instance: "
        f"getPodEntries: error unmarshalling raw bytes {go_error}"
    )


async def test_invalid_json_checkpoint_fails(short_tmp: Path) -> None:
    (short_tmp / "kubelet_internal_checkpoint").write_text('{"Data": NaN}')
    with pytest.raises(CNIError) as failure:
        await _device_map("default", "web", "u", **paths(short_tmp))
    assert failure.value.code == DECODING_FAILURE
    assert failure.value.msg.startswith(
        "getKubernetesDelegate: failed to get a ResourceClient instance: "
        "getPodEntries: error unmarshalling raw bytes "
    )


async def test_an_unreadable_checkpoint_fails_with_the_path_error(short_tmp: Path) -> None:
    target = short_tmp / "kubelet_internal_checkpoint"
    target.mkdir()
    with pytest.raises(CNIError) as failure:
        await _device_map("default", "web", "u", **paths(short_tmp))
    assert failure.value.code == IO_FAILURE
    assert failure.value.msg == (
        "getKubernetesDelegate: failed to get a ResourceClient instance: "
        f"getPodEntries: error reading file {target}\nread {target}: is a directory\n"
    )


async def test_neither_socket_nor_checkpoint_is_an_empty_map(short_tmp: Path) -> None:
    devices = await _device_map("default", "web", "", **paths(short_tmp))
    assert isinstance(devices, DeviceMap)
    assert len(devices) == 0
    assert devices.next_device(SRIOV) == ""


def test_grpc_is_imported_only_when_needed() -> None:
    code = "import sys, multusd.k8s.devices; sys.exit('grpc' in sys.modules)"
    repo = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-c", code], cwd=repo, check=False, timeout=60)
    assert run.returncode == 0


# ---- device-info files -----------------------------------------------------------------------


def test_device_info_file_path_rules() -> None:
    assert device_info_file_path("default/sriov-net", "0123abcd", "net1") == (
        "/var/run/k8s.cni.cncf.io/devinfo/cni/default-sriov-net-0123abcd_net1"
    )
    assert device_info_file_path("a/b/c", "cid", "eth0", base="/x/") == "/x/cni/a-b-c-cid_eth0"


def write_dp_file(base: Path, resource: str, device: str, content: str) -> Path:
    name = f"{resource}-{device}-device.json".replace("/", "-")
    path = base / "dp" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


DP_INFO = (
    '{"pci": {"pf-pci-address": "0000:03:00.0", "pci-address": "0000:03:00.1", "extra": 1},'
    ' "version": "1.1.0", "type": "pci", "vendor-field": {"x": [1]}, "vdpa": null, "memif": {}}'
)


async def test_copy_device_plugin_info(short_tmp: Path) -> None:
    write_dp_file(short_tmp, SRIOV, "0000:03:00.1", DP_INFO)
    copied = await copy_device_plugin_info(
        SRIOV, "0000:03:00.1", "default/sriov-net", "cid1", "net1", base=str(short_tmp)
    )
    target = short_tmp / "cni" / "default-sriov-net-cid1_net1"
    assert copied == str(target)
    # Decoded into DeviceInfo and encoded again: Go's field order, unknown keys dropped.
    assert target.read_text() == (
        '{"type":"pci","version":"1.1.0",'
        '"pci":{"pci-address":"0000:03:00.1","pf-pci-address":"0000:03:00.0"},"memif":{}}'
    )
    assert stat.S_IMODE(target.stat().st_mode) == 0o444
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp file left
    assert await load_device_info(str(target)) == {
        "type": "pci",
        "version": "1.1.0",
        "pci": {"pci-address": "0000:03:00.1", "pf-pci-address": "0000:03:00.0"},
        "memif": {},
    }

    # An existing file is never replaced (upstream: "already exists", ignored).
    write_dp_file(short_tmp, SRIOV, "0000:03:00.1", '{"type": "changed"}')
    again = await copy_device_plugin_info(
        SRIOV, "0000:03:00.1", "default/sriov-net", "cid1", "net1", base=str(short_tmp)
    )
    assert again == str(target)
    assert '"type":"pci"' in target.read_text()

    await remove_device_info(str(target))
    assert not target.exists()
    await remove_device_info(str(target))  # idempotent


async def test_missing_or_bad_device_plugin_file_is_ignored(short_tmp: Path) -> None:
    missing = await copy_device_plugin_info(
        SRIOV, "0000:03:00.9", "default/net", "cid", "net1", base=str(short_tmp)
    )
    assert missing is None
    assert not (short_tmp / "cni" / "default-net-cid_net1").exists()

    write_dp_file(short_tmp, SRIOV, "0000:03:00.8", '{"type": 5}')  # Go's decoder rejects it
    bad = await copy_device_plugin_info(
        SRIOV, "0000:03:00.8", "default/net", "cid", "net2", base=str(short_tmp)
    )
    assert bad is None
    assert await load_device_info(str(short_tmp / "nothing")) is None


async def test_device_ids_with_slashes_name_the_plugin_file(short_tmp: Path) -> None:
    write_dp_file(
        short_tmp,
        "vendor.io/vdpa",
        "dev/1",
        '{"type": "vdpa", "vdpa": {"path": "/dev/vhost-vdpa-0"}}',
    )
    copied = await copy_device_plugin_info(
        "vendor.io/vdpa", "dev/1", "ns/net", "cid", "net1", base=str(short_tmp)
    )
    assert copied is not None
    assert os.path.basename(copied) == "ns-net-cid_net1"
    assert await load_device_info(copied) == {"type": "vdpa", "vdpa": {"path": "/dev/vhost-vdpa-0"}}


async def _device_map(namespace: str, name: str, uid: str, **paths: str) -> DeviceMap:
    """The kubelet's devices for one pod, as the map the daemon builds of them."""
    return DeviceMap(await kubelet_devices(namespace, name, uid, **paths))
