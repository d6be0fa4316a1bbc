"""The few CRI v1 (``runtime.v1.RuntimeService``) messages the tests send, and a gRPC client.

Why by hand: the tests drive containerd exactly as the kubelet does, over the CRI gRPC API, but
only through seven calls of it, and the project carries no protobuf runtime or generated code
(see ``multusd/k8s/podresources.py``, which talks to the kubelet the same way). Writing uses
the emulator's field writers (``multusd.kubesim.protoencode``); reading uses the project's one
protobuf reader (``multusd.protobuf``), whose field scanner skips everything we do not ask for,
so containerd may send fields this file never heard of.

Field numbers are those of ``k8s.io/cri-api`` ``pkg/apis/runtime/v1/api.proto``::

    VersionRequest           { string version = 1; }
    VersionResponse          { string version = 1; string runtime_name = 2;
                               string runtime_version = 3; string runtime_api_version = 4; }
    PodSandboxMetadata       { string name = 1; string uid = 2; string namespace = 3;
                               uint32 attempt = 4; }
    PodSandboxConfig         { PodSandboxMetadata metadata = 1; string hostname = 2;
                               string log_directory = 3; map<string,string> labels = 6;
                               map<string,string> annotations = 7; ... }
    RunPodSandboxRequest     { PodSandboxConfig config = 1; string runtime_handler = 2; }
    RunPodSandboxResponse    { string pod_sandbox_id = 1; }
    Stop/RemovePodSandboxRequest { string pod_sandbox_id = 1; }
    PodSandboxStatusRequest  { string pod_sandbox_id = 1; bool verbose = 2; }
    PodSandboxStatusResponse { PodSandboxStatus status = 1; map<string,string> info = 2; }
    PodSandboxStatus         { string id = 1; PodSandboxMetadata metadata = 2;
                               PodSandboxState state = 3; int64 created_at = 4;
                               PodSandboxNetworkStatus network = 5; ... }
    PodSandboxNetworkStatus  { string ip = 1; repeated PodIP additional_ips = 2; }
    PodIP                    { string ip = 1; }
    ListPodSandboxRequest    { PodSandboxFilter filter = 1; }
    ListPodSandboxResponse   { repeated PodSandbox items = 1; }
    PodSandbox               { string id = 1; PodSandboxMetadata metadata = 2;
                               PodSandboxState state = 3; ... }
    StatusRequest            { bool verbose = 1; }
    StatusResponse           { RuntimeStatus status = 1; map<string,string> info = 2; }
    RuntimeStatus            { repeated RuntimeCondition conditions = 1; }
    RuntimeCondition         { string type = 1; bool status = 2; string reason = 3;
                               string message = 4; }
    ImageStatusRequest       { ImageSpec image = 1; bool verbose = 2; }   (ImageService)
    ImageSpec                { string image = 1; }
    ImageStatusResponse      { Image image = 1; }
    Image                    { string id = 1; repeated string repo_tags = 2; }

Maps are repeated entries (key = 1, value = 2); ``PodSandboxState`` is SANDBOX_READY = 0,
SANDBOX_NOTREADY = 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import grpc
import grpc.aio

from multusd import protobuf
from multusd.kubesim.protoencode import put_bytes, put_int, put_map, put_str
from multusd.protobuf import LEN, VARINT, tag

SERVICE = "/runtime.v1.RuntimeService/"
IMAGE_SERVICE = "/runtime.v1.ImageService/"
SANDBOX_READY, SANDBOX_NOTREADY = 0, 1
_CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]  # a proxy must never capture a unix socket


def _t(number: int, wire: int = LEN) -> int:
    """A field's tag; most fields here are length-delimited."""
    return tag(number, wire)


# --- writing -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxConfig:
    """What the kubelet puts in a ``PodSandboxConfig`` for a pod, minus what CNI never sees."""

    name: str
    uid: str
    namespace: str = "default"
    attempt: int = 0
    hostname: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def message(self) -> bytes:
        meta = bytearray()
        put_str(meta, 1, self.name)
        put_str(meta, 2, self.uid)
        put_str(meta, 3, self.namespace)
        if self.attempt:
            put_int(meta, 4, self.attempt)
        out = bytearray()
        put_bytes(out, 1, bytes(meta))
        put_str(out, 2, self.hostname or self.name)
        put_map(out, 6, dict(self.labels))
        put_map(out, 7, dict(self.annotations))
        return bytes(out)


def run_request(config: SandboxConfig, runtime_handler: str = "") -> bytes:
    out = bytearray()
    put_bytes(out, 1, config.message())
    put_str(out, 2, runtime_handler)
    return bytes(out)


def id_request(sandbox_id: str, *, verbose: bool = False) -> bytes:
    """Stop, Remove and PodSandboxStatus requests: the id is field 1, ``verbose`` field 2."""
    out = bytearray()
    put_str(out, 1, sandbox_id)
    if verbose:
        put_int(out, 2, 1)
    return bytes(out)


def version_request(version: str = "v1") -> bytes:
    out = bytearray()
    put_str(out, 1, version)
    return bytes(out)


def status_request(*, verbose: bool) -> bytes:
    out = bytearray()
    if verbose:
        put_int(out, 1, 1)
    return bytes(out)


def image_status_request(image: str) -> bytes:
    spec = bytearray()
    put_str(spec, 1, image)
    out = bytearray()
    put_bytes(out, 1, bytes(spec))
    return bytes(out)


# --- reading -------------------------------------------------------------------------------


def _fields(buf: bytes, wanted: Mapping[int, str], a: int = 0, b: int | None = None) -> Any:
    """``[(name, a, b), ...]`` of the fields of ``buf[a:b]`` with a tag in ``wanted``."""
    end = len(buf) if b is None else b
    return [(wanted[key], x, y) for key, x, y in protobuf.scan(buf, a, end, frozenset(wanted))]


def _text(buf: bytes, a: int, b: int) -> str:
    return protobuf.text(buf, a, b)


def _number(buf: bytes, a: int, b: int) -> int:
    return protobuf.signed(buf, a, b, 64)


@dataclass(frozen=True)
class Version:
    version: str = ""
    runtime_name: str = ""
    runtime_version: str = ""
    runtime_api_version: str = ""


_VERSION = {_t(1): "version", _t(2): "runtime_name", _t(3): "runtime_version"}
_VERSION[_t(4)] = "runtime_api_version"


def decode_version(buf: bytes) -> Version:
    return Version(**{name: _text(buf, a, b) for name, a, b in _fields(buf, _VERSION)})


def decode_run(buf: bytes) -> str:
    """``RunPodSandboxResponse``: the new sandbox's id."""
    return "".join(_text(buf, a, b) for _, a, b in _fields(buf, {_t(1): "id"}))


@dataclass(frozen=True)
class Metadata:
    name: str = ""
    uid: str = ""
    namespace: str = ""
    attempt: int = 0


_METADATA = {_t(1): "name", _t(2): "uid", _t(3): "namespace", _t(4, VARINT): "attempt"}


def _metadata(buf: bytes, a: int, b: int) -> Metadata:
    values: dict[str, Any] = {}
    for name, x, y in _fields(buf, _METADATA, a, b):
        values[name] = _number(buf, x, y) if name == "attempt" else _text(buf, x, y)
    return Metadata(**values)


@dataclass(frozen=True)
class SandboxStatus:
    """``PodSandboxStatusResponse``, flattened: ``info`` is the verbose map (JSON values)."""

    id: str
    metadata: Metadata
    state: int
    ip: str
    additional_ips: tuple[str, ...]
    info: dict[str, str]

    def verbose_info(self) -> dict[str, Any]:
        """containerd's ``info`` entry (the sandbox's record, runtime spec and CNI result)."""
        return dict(json.loads(self.info["info"]))

    def netns_path(self) -> str:
        """The network namespace the CNI plugins were given (from the sandbox's runtime spec)."""
        spec = self.verbose_info()["runtimeSpec"]
        for namespace in spec["linux"]["namespaces"]:
            if namespace["type"] == "network":
                return str(namespace["path"])
        raise AssertionError(f"sandbox {self.id} has no network namespace: {spec['linux']}")


_STATUS_RESPONSE = {_t(1): "status", _t(2): "info"}
_SANDBOX_STATUS = {_t(1): "id", _t(2): "metadata", _t(3, VARINT): "state", _t(5): "network"}
_NETWORK = {_t(1): "ip", _t(2): "additional"}
_POD_IP = {_t(1): "ip"}


def _info_map(buf: bytes, a: int, b: int, into: dict[str, str]) -> None:
    key, value = protobuf.map_entry(buf, a, b)
    into[key] = value


def decode_sandbox_status(buf: bytes) -> SandboxStatus:
    info: dict[str, str] = {}
    sandbox_id, state, ip = "", SANDBOX_READY, ""
    metadata = Metadata()
    additional: list[str] = []
    for name, a, b in _fields(buf, _STATUS_RESPONSE):
        if name == "info":
            _info_map(buf, a, b, info)
            continue
        for inner, x, y in _fields(buf, _SANDBOX_STATUS, a, b):
            if inner == "id":
                sandbox_id = _text(buf, x, y)
            elif inner == "metadata":
                metadata = _metadata(buf, x, y)
            elif inner == "state":
                state = _number(buf, x, y)
            else:
                for net, p, q in _fields(buf, _NETWORK, x, y):
                    if net == "ip":
                        ip = _text(buf, p, q)
                    else:  # a PodIP message
                        additional += [_text(buf, r, s) for _, r, s in _fields(buf, _POD_IP, p, q)]
    return SandboxStatus(sandbox_id, metadata, state, ip, tuple(additional), info)


@dataclass(frozen=True)
class Sandbox:
    id: str
    metadata: Metadata
    state: int


_SANDBOX = {_t(1): "id", _t(2): "metadata", _t(3, VARINT): "state"}


def decode_list(buf: bytes) -> list[Sandbox]:
    items: list[Sandbox] = []
    for _, a, b in _fields(buf, {_t(1): "item"}):
        values: dict[str, Any] = {"id": "", "metadata": Metadata(), "state": SANDBOX_READY}
        for name, x, y in _fields(buf, _SANDBOX, a, b):
            if name == "id":
                values["id"] = _text(buf, x, y)
            elif name == "metadata":
                values["metadata"] = _metadata(buf, x, y)
            else:
                values["state"] = _number(buf, x, y)
        items.append(Sandbox(**values))
    return items


@dataclass(frozen=True)
class RuntimeStatus:
    conditions: dict[str, tuple[bool, str]]  # type -> (status, message)
    info: dict[str, str]

    def cni_config(self) -> dict[str, Any]:
        """containerd's loaded CNI configuration (verbose ``cniconfig``)."""
        return dict(json.loads(self.info.get("cniconfig", "{}")))


_CONDITION = {_t(1): "type", _t(2, VARINT): "status", _t(4): "message"}


def decode_status(buf: bytes) -> RuntimeStatus:
    conditions: dict[str, tuple[bool, str]] = {}
    info: dict[str, str] = {}
    for name, a, b in _fields(buf, _STATUS_RESPONSE):
        if name == "info":
            _info_map(buf, a, b, info)
            continue
        for _, x, y in _fields(buf, {_t(1): "condition"}, a, b):
            values = {"type": "", "status": False, "message": ""}
            for key, p, q in _fields(buf, _CONDITION, x, y):
                values[key] = bool(_number(buf, p, q)) if key == "status" else _text(buf, p, q)
            conditions[str(values["type"])] = (bool(values["status"]), str(values["message"]))
    return RuntimeStatus(conditions, info)


def decode_image_status(buf: bytes) -> str:
    """``ImageStatusResponse``: the image's id, "" when the CRI plugin does not know it."""
    for _, a, b in _fields(buf, {_t(1): "image"}):
        return "".join(_text(buf, x, y) for _, x, y in _fields(buf, {_t(1): "id"}, a, b))
    return ""


# --- calling -------------------------------------------------------------------------------


def _raw(data: bytes) -> bytes:
    return data


class CriClient:
    """An asyncio CRI client on containerd's unix socket; one channel, closed on exit.

    Replies are decoded after the call rather than by grpc: grpc.aio turns an exception raised
    in a deserializer into a ``None`` reply.
    """

    def __init__(self, socket_path: str, timeout: float = 60) -> None:
        self._channel = grpc.aio.insecure_channel(f"unix:{socket_path}", options=_CHANNEL_OPTIONS)
        self._timeout = timeout

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._channel.close()

    async def _call(self, method: str, request: bytes, timeout: float | None = None) -> bytes:
        call = self._channel.unary_unary(
            SERVICE + method, request_serializer=_raw, response_deserializer=_raw
        )
        reply = await call(request, timeout=timeout or self._timeout)
        assert isinstance(reply, bytes), f"{method}: no reply"
        return reply

    async def version(self, timeout: float | None = None) -> Version:
        return decode_version(await self._call("Version", version_request(), timeout))

    async def status(self, *, verbose: bool = True) -> RuntimeStatus:
        return decode_status(await self._call("Status", status_request(verbose=verbose)))

    async def run(self, config: SandboxConfig) -> str:
        return decode_run(await self._call("RunPodSandbox", run_request(config)))

    async def sandbox_status(self, sandbox_id: str, *, verbose: bool = True) -> SandboxStatus:
        reply = await self._call("PodSandboxStatus", id_request(sandbox_id, verbose=verbose))
        return decode_sandbox_status(reply)

    async def stop(self, sandbox_id: str) -> None:
        await self._call("StopPodSandbox", id_request(sandbox_id))

    async def remove(self, sandbox_id: str) -> None:
        await self._call("RemovePodSandbox", id_request(sandbox_id))

    async def list(self) -> list[Sandbox]:
        return decode_list(await self._call("ListPodSandbox", b""))


def call_sync(
    socket_path: str, method: str, request: bytes, timeout: float = 30, service: str = SERVICE
) -> bytes:
    """One blocking call on a fresh channel: for the rig's set-up and teardown, which run
    outside any event loop (the containerd fixture is module-scoped, the loops are not)."""
    with grpc.insecure_channel(f"unix:{socket_path}", options=_CHANNEL_OPTIONS) as channel:
        call: Callable[..., bytes] = channel.unary_unary(
            service + method, request_serializer=_raw, response_deserializer=_raw
        )
        return call(request, timeout=timeout)


def rpc_error(exc: BaseException) -> str:
    """``CODE: details`` of a gRPC error (what containerd said), for assertions and messages."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)
