"""The few CRI v1 (``runtime.v1.RuntimeService``) messages the tests send, and a gRPC client.

Why by hand: the tests drive containerd exactly as the kubelet does, over the CRI gRPC API, but
only through a dozen calls of it, and the project carries no protobuf runtime or generated code
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
                               map<string,string> annotations = 7;
                               LinuxPodSandboxConfig linux = 8; ... }
    LinuxPodSandboxConfig    { string cgroup_parent = 1;
                               LinuxSandboxSecurityContext security_context = 2; ... }
    LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; bool privileged = 6;
                               ... }
    NamespaceOption          { NamespaceMode network = 1; NamespaceMode pid = 2;
                               NamespaceMode ipc = 3; ... }
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

    ContainerConfig          { ContainerMetadata metadata = 1; ImageSpec image = 2;
                               repeated string command = 3; repeated string args = 4;
                               string working_dir = 5; repeated KeyValue envs = 6;
                               repeated Mount mounts = 7; map<string,string> labels = 9;
                               map<string,string> annotations = 10; string log_path = 11;
                               LinuxContainerConfig linux = 15; ... }
    ContainerMetadata        { string name = 1; uint32 attempt = 2; }
    KeyValue                 { string key = 1; string value = 2; }
    Mount                    { string container_path = 1; string host_path = 2;
                               bool readonly = 3; bool selinux_relabel = 4;
                               MountPropagation propagation = 5; ... }
    LinuxContainerConfig     { LinuxContainerResources resources = 1;
                               LinuxContainerSecurityContext security_context = 2; }
    LinuxContainerSecurityContext { bool privileged = 2; NamespaceOption namespace_options = 3;
                               Int64Value run_as_user = 5; ... }
    Int64Value               { int64 value = 1; }
    CreateContainerRequest   { string pod_sandbox_id = 1; ContainerConfig config = 2;
                               PodSandboxConfig sandbox_config = 3; }
    CreateContainerResponse  { string container_id = 1; }
    Start/RemoveContainerRequest { string container_id = 1; }
    StopContainerRequest     { string container_id = 1; int64 timeout = 2; }
    ContainerStatusRequest   { string container_id = 1; bool verbose = 2; }
    ContainerStatusResponse  { ContainerStatus status = 1; map<string,string> info = 2; }
    ContainerStatus          { string id = 1; ContainerMetadata metadata = 2;
                               ContainerState state = 3; int64 created_at = 4;
                               int64 started_at = 5; int64 finished_at = 6;
                               int32 exit_code = 7; ImageSpec image = 8; string image_ref = 9;
                               string reason = 10; string message = 11;
                               map<string,string> labels = 12;
                               map<string,string> annotations = 13; repeated Mount mounts = 14;
                               string log_path = 15; ... }
    ListContainersRequest    { ContainerFilter filter = 1; }
    ContainerFilter          { string id = 1; ContainerStateValue state = 2;
                               string pod_sandbox_id = 3; ... }
    ListContainersResponse   { repeated Container containers = 1; }
    Container                { string id = 1; string pod_sandbox_id = 2;
                               ContainerMetadata metadata = 3; ImageSpec image = 4;
                               string image_ref = 5; ContainerState state = 6; ... }

Maps are repeated entries (key = 1, value = 2); ``PodSandboxState`` is SANDBOX_READY = 0,
SANDBOX_NOTREADY = 1; ``NamespaceMode`` POD = 0, CONTAINER = 1, NODE = 2 (TARGET = 3);
``MountPropagation`` PROPAGATION_PRIVATE = 0, PROPAGATION_HOST_TO_CONTAINER = 1,
PROPAGATION_BIDIRECTIONAL = 2; ``ContainerState`` CONTAINER_CREATED = 0, CONTAINER_RUNNING = 1,
CONTAINER_EXITED = 2, CONTAINER_UNKNOWN = 3. (Beware: ``privileged`` is field 6 of the sandbox's
security context but field 2 of a container's, where 6 is ``run_as_username``.)

A container's log (``log_directory`` joined with its ``log_path``) is written by containerd in
the CRI log format, which :func:`read_container_log` reads back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
NAMESPACE_POD, NAMESPACE_CONTAINER, NAMESPACE_NODE = 0, 1, 2  # NamespaceMode
PROPAGATION_PRIVATE, PROPAGATION_HOST_TO_CONTAINER, PROPAGATION_BIDIRECTIONAL = 0, 1, 2
CONTAINER_CREATED, CONTAINER_RUNNING, CONTAINER_EXITED, CONTAINER_UNKNOWN = 0, 1, 2, 3
_CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]  # a proxy must never capture a unix socket


def _t(number: int, wire: int = LEN) -> int:
    """A field's tag; most fields here are length-delimited."""
    return tag(number, wire)


# --- writing -------------------------------------------------------------------------------


def _flag(out: bytearray, number: int, value: bool) -> None:
    """A ``bool`` field, left out when false (as proto3 writes its default)."""
    if value:
        put_int(out, number, 1)


def _strings(out: bytearray, number: int, values: Sequence[str]) -> None:
    """A ``repeated string``: every item, even an empty one (``put_str`` would drop it and
    shift a command's arguments)."""
    for value in values:
        put_bytes(out, number, value.encode())


def _namespace_options(network: int, pid: int, ipc: int = NAMESPACE_POD) -> bytes:
    """A ``NamespaceOption`` of three ``NamespaceMode``s (POD, the default, left out)."""
    out = bytearray()
    for number, mode in ((1, network), (2, pid), (3, ipc)):
        if mode:
            put_int(out, number, mode)
    return bytes(out)


@dataclass(frozen=True)
class SandboxConfig:
    """What the kubelet puts in a ``PodSandboxConfig`` for a pod, minus what CNI never sees.

    The Linux part (``linux = 8``) is written only when one of its settings is: a pod network
    sandbox sends the very bytes it sent before they existed. ``host_network`` is what makes
    containerd skip the network namespace and CNI altogether; ``privileged`` must be set for a
    privileged container to be allowed in the sandbox (containerd refuses it otherwise), and
    the same config must then be passed again to :meth:`CriClient.create_container`.
    ``log_directory`` is where containerd writes the logs of the sandbox's containers (each at
    its ``ContainerConfig.log_path``, relative to it).
    """

    name: str
    uid: str
    namespace: str = "default"
    attempt: int = 0
    hostname: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    log_directory: str = ""
    host_network: bool = False
    host_pid: bool = False
    privileged: bool = False
    cgroup_parent: str = ""

    def linux_message(self) -> bytes | None:
        """``LinuxPodSandboxConfig``, ``None`` when nothing of it is set."""
        if not (self.host_network or self.host_pid or self.privileged or self.cgroup_parent):
            return None
        security = bytearray()
        namespaces = _namespace_options(
            NAMESPACE_NODE if self.host_network else NAMESPACE_POD,
            NAMESPACE_NODE if self.host_pid else NAMESPACE_POD,
        )
        if namespaces:
            put_bytes(security, 1, namespaces)
        _flag(security, 6, self.privileged)
        out = bytearray()
        put_str(out, 1, self.cgroup_parent)
        if security:
            put_bytes(out, 2, bytes(security))
        return bytes(out)

    def message(self) -> bytes:
        meta = bytearray()
        put_str(meta, 1, self.name)
        put_str(meta, 2, self.uid)
        put_str(meta, 3, self.namespace)
        if self.attempt:
            put_int(meta, 4, self.attempt)
        out = bytearray()
        put_bytes(out, 1, bytes(meta))
        # The kubelet sends no hostname for a host-network pod: runc refuses to set one
        # without a UTS namespace of the container's own, which such a sandbox does not get.
        put_str(out, 2, self.hostname or ("" if self.host_network else self.name))
        put_str(out, 3, self.log_directory)
        put_map(out, 6, dict(self.labels))
        put_map(out, 7, dict(self.annotations))
        linux = self.linux_message()
        if linux is not None:
            put_bytes(out, 8, linux)
        return bytes(out)


@dataclass(frozen=True)
class Mount:
    """A host path bound into a container (``Mount``); also what ``ContainerStatus`` reports."""

    container_path: str
    host_path: str
    readonly: bool = False
    selinux_relabel: bool = False
    propagation: int = PROPAGATION_PRIVATE

    def message(self) -> bytes:
        out = bytearray()
        put_str(out, 1, self.container_path)
        put_str(out, 2, self.host_path)
        _flag(out, 3, self.readonly)
        _flag(out, 4, self.selinux_relabel)
        if self.propagation:
            put_int(out, 5, self.propagation)
        return bytes(out)


@dataclass(frozen=True)
class ContainerConfig:
    """What the kubelet puts in a ``ContainerConfig`` for one container of a pod.

    ``command`` replaces the image's entrypoint and ``args`` its cmd, as in a pod spec. The
    Linux security context is always written, as the kubelet does, with the namespaces it
    derives from the pod: the network and IPC of the pod (or the node's with
    ``host_network``), and a PID namespace of the container's own unless ``host_pid`` (the
    kubelet's default for a pod that does not share its process namespace). containerd takes
    a container's network and IPC namespaces from its sandbox whatever is asked here, but its
    PID namespace from here: host PID needs ``host_pid`` on both configs. ``run_as_user``
    ``None`` leaves the user to the image.
    """

    name: str
    image: str
    attempt: int = 0
    command: Sequence[str] = ()
    args: Sequence[str] = ()
    working_dir: str = ""
    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: Sequence[Mount] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    log_path: str = ""
    host_network: bool = False
    host_pid: bool = False
    privileged: bool = False
    run_as_user: int | None = None

    def linux_message(self) -> bytes:
        """``LinuxContainerConfig`` (no resources: containerd applies none then)."""
        security = bytearray()
        _flag(security, 2, self.privileged)
        namespaces = _namespace_options(
            NAMESPACE_NODE if self.host_network else NAMESPACE_POD,
            NAMESPACE_NODE if self.host_pid else NAMESPACE_CONTAINER,
        )
        put_bytes(security, 3, namespaces)
        if self.run_as_user is not None:
            user = bytearray()
            if self.run_as_user:
                put_int(user, 1, self.run_as_user)
            put_bytes(security, 5, bytes(user))  # root: an empty Int64Value, as Go writes it
        out = bytearray()
        put_bytes(out, 2, bytes(security))
        return bytes(out)

    def message(self) -> bytes:
        meta = bytearray()
        put_str(meta, 1, self.name)
        if self.attempt:
            put_int(meta, 2, self.attempt)
        image = bytearray()
        put_str(image, 1, self.image)
        out = bytearray()
        put_bytes(out, 1, bytes(meta))
        put_bytes(out, 2, bytes(image))
        _strings(out, 3, self.command)
        _strings(out, 4, self.args)
        put_str(out, 5, self.working_dir)
        for key, value in self.envs.items():
            pair = bytearray()
            put_str(pair, 1, key)
            put_str(pair, 2, value)
            put_bytes(out, 6, bytes(pair))
        for mount in self.mounts:
            put_bytes(out, 7, mount.message())
        put_map(out, 9, dict(self.labels))
        put_map(out, 10, dict(self.annotations))
        put_str(out, 11, self.log_path)
        put_bytes(out, 15, self.linux_message())
        return bytes(out)


def run_request(config: SandboxConfig, runtime_handler: str = "") -> bytes:
    out = bytearray()
    put_bytes(out, 1, config.message())
    put_str(out, 2, runtime_handler)
    return bytes(out)


def id_request(sandbox_id: str, *, verbose: bool = False) -> bytes:
    """Stop, Remove and PodSandboxStatus requests: the id is field 1, ``verbose`` field 2.
    The container's Start, Remove and ContainerStatus requests are the same message."""
    out = bytearray()
    put_str(out, 1, sandbox_id)
    if verbose:
        put_int(out, 2, 1)
    return bytes(out)


def create_container_request(
    sandbox_id: str, config: ContainerConfig, sandbox_config: SandboxConfig
) -> bytes:
    out = bytearray()
    put_str(out, 1, sandbox_id)
    put_bytes(out, 2, config.message())
    put_bytes(out, 3, sandbox_config.message())
    return bytes(out)


def stop_container_request(container_id: str, timeout_s: int) -> bytes:
    """``timeout`` 0 (left out) is "kill it now"; else SIGTERM, and SIGKILL after it."""
    out = bytearray()
    put_str(out, 1, container_id)
    if timeout_s:
        put_int(out, 2, timeout_s)
    return bytes(out)


def list_containers_request(sandbox_id: str = "") -> bytes:
    """``ListContainersRequest``, filtered to one sandbox's containers when ``sandbox_id``."""
    if not sandbox_id:
        return b""
    selector = bytearray()
    put_str(selector, 3, sandbox_id)
    out = bytearray()
    put_bytes(out, 1, bytes(selector))
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


def decode_create_container(buf: bytes) -> str:
    """``CreateContainerResponse``: the new container's id (field 1, as a sandbox's)."""
    return decode_run(buf)


@dataclass(frozen=True)
class ContainerMetadata:
    name: str = ""
    attempt: int = 0


_CONTAINER_METADATA = {_t(1): "name", _t(2, VARINT): "attempt"}


def _container_metadata(buf: bytes, a: int, b: int) -> ContainerMetadata:
    values: dict[str, Any] = {}
    for name, x, y in _fields(buf, _CONTAINER_METADATA, a, b):
        values[name] = _number(buf, x, y) if name == "attempt" else _text(buf, x, y)
    return ContainerMetadata(**values)


def _image_name(buf: bytes, a: int, b: int) -> str:
    """An ``ImageSpec``'s ``image``."""
    return "".join(_text(buf, x, y) for _, x, y in _fields(buf, {_t(1): "image"}, a, b))


_MOUNT = {_t(1): "container_path", _t(2): "host_path", _t(3, VARINT): "readonly"}
_MOUNT[_t(4, VARINT)] = "selinux_relabel"
_MOUNT[_t(5, VARINT)] = "propagation"


def _mount(buf: bytes, a: int, b: int) -> Mount:
    values: dict[str, Any] = {"container_path": "", "host_path": ""}
    for name, x, y in _fields(buf, _MOUNT, a, b):
        if name in ("container_path", "host_path"):
            values[name] = _text(buf, x, y)
        elif name == "propagation":
            values[name] = _number(buf, x, y)
        else:
            values[name] = bool(_number(buf, x, y))
    return Mount(**values)


@dataclass(frozen=True)
class ContainerStatus:
    """``ContainerStatusResponse``, flattened; times are in nanoseconds (0: not yet), and
    ``exit_code``, ``reason`` and ``message`` mean something once the state is EXITED.
    ``log_path`` is the full path (containerd reports the joined one); ``info`` is the
    verbose map (JSON values)."""

    id: str = ""
    metadata: ContainerMetadata = ContainerMetadata()
    state: int = CONTAINER_CREATED
    created_at: int = 0
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    image: str = ""
    image_ref: str = ""
    reason: str = ""
    message: str = ""
    mounts: tuple[Mount, ...] = ()
    log_path: str = ""
    info: dict[str, str] = field(default_factory=dict)

    def verbose_info(self) -> dict[str, Any]:
        """containerd's ``info`` entry (pid, the runtime spec, ...; needs ``verbose``)."""
        return dict(json.loads(self.info["info"]))


_CONTAINER_STATUS = {
    _t(1): "id",
    _t(2): "metadata",
    _t(3, VARINT): "state",
    _t(4, VARINT): "created_at",
    _t(5, VARINT): "started_at",
    _t(6, VARINT): "finished_at",
    _t(7, VARINT): "exit_code",
    _t(8): "image",
    _t(9): "image_ref",
    _t(10): "reason",
    _t(11): "message",
    _t(14): "mounts",
    _t(15): "log_path",
}


def decode_container_status(buf: bytes) -> ContainerStatus:
    info: dict[str, str] = {}
    values: dict[str, Any] = {}
    mounts: list[Mount] = []
    for name, a, b in _fields(buf, _STATUS_RESPONSE):
        if name == "info":
            _info_map(buf, a, b, info)
            continue
        for inner, x, y in _fields(buf, _CONTAINER_STATUS, a, b):
            if inner == "metadata":
                values[inner] = _container_metadata(buf, x, y)
            elif inner == "image":
                values[inner] = _image_name(buf, x, y)
            elif inner == "mounts":
                mounts.append(_mount(buf, x, y))
            elif inner == "exit_code":  # int32: a negative one arrives sign-extended
                values[inner] = protobuf.signed(buf, x, y, 32)
            elif inner in ("state", "created_at", "started_at", "finished_at"):
                values[inner] = _number(buf, x, y)
            else:
                values[inner] = _text(buf, x, y)
    return ContainerStatus(**values, mounts=tuple(mounts), info=info)


@dataclass(frozen=True)
class Container:
    """One item of ``ListContainersResponse``."""

    id: str
    sandbox_id: str
    metadata: ContainerMetadata
    image: str
    state: int


_CONTAINER = {_t(1): "id", _t(2): "sandbox_id", _t(3): "metadata", _t(4): "image"}
_CONTAINER[_t(6, VARINT)] = "state"


def decode_list_containers(buf: bytes) -> list[Container]:
    items: list[Container] = []
    for _, a, b in _fields(buf, {_t(1): "container"}):
        values: dict[str, Any] = {"id": "", "sandbox_id": "", "image": ""}
        values.update(metadata=ContainerMetadata(), state=CONTAINER_CREATED)
        for name, x, y in _fields(buf, _CONTAINER, a, b):
            if name == "metadata":
                values[name] = _container_metadata(buf, x, y)
            elif name == "image":
                values[name] = _image_name(buf, x, y)
            elif name == "state":
                values[name] = _number(buf, x, y)
            else:
                values[name] = _text(buf, x, y)
        items.append(Container(**values))
    return items


# --- container logs ------------------------------------------------------------------------


def parse_container_log(data: str, stream: str = "") -> str:
    """The text a container wrote, from its CRI-format log: each line there is
    ``<RFC 3339 time> <stdout|stderr> <tag> <text>``, where the tag (``:``-separated, its first
    part the only one defined) is ``F`` for a full line or ``P`` for a partial one, which the
    runtime cut (at its buffer size) and whose rest follows in the next line(s). Partial lines
    are joined, full ones end with a newline; ``stream`` keeps only that stream's lines."""
    out: list[str] = []
    for line in data.split("\n"):
        if not line:
            continue
        parts = line.split(" ", 3)
        if len(parts) < 3:
            raise ValueError(f"not a CRI log line: {line!r}")
        _, source, tags = parts[:3]
        if stream and source != stream:
            continue
        text = parts[3] if len(parts) == 4 else ""
        out.append(text if tags.split(":")[0] == "P" else text + "\n")
    return "".join(out)


def read_container_log(path: str | Path, stream: str = "") -> str:
    """:func:`parse_container_log` of the file (containerd's ``log_directory/log_path``)."""
    return parse_container_log(Path(path).read_bytes().decode(errors="replace"), stream)


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

    async def create_container(
        self, sandbox_id: str, config: ContainerConfig, sandbox_config: SandboxConfig
    ) -> str:
        """``CreateContainer`` in a running sandbox; ``sandbox_config`` must be the one the
        sandbox was run with (containerd reads the log directory and whether privileged
        containers are allowed from it, not from the sandbox). The container's id."""
        request = create_container_request(sandbox_id, config, sandbox_config)
        return decode_create_container(await self._call("CreateContainer", request))

    async def start_container(self, container_id: str) -> None:
        await self._call("StartContainer", id_request(container_id))

    async def stop_container(self, container_id: str, timeout_s: int = 0) -> None:
        """SIGTERM (the image's stop signal), SIGKILL after ``timeout_s``; 0: SIGKILL now."""
        request = stop_container_request(container_id, timeout_s)
        await self._call("StopContainer", request, timeout=self._timeout + timeout_s)

    async def remove_container(self, container_id: str) -> None:
        await self._call("RemoveContainer", id_request(container_id))

    async def container_status(
        self, container_id: str, *, verbose: bool = False
    ) -> ContainerStatus:
        reply = await self._call("ContainerStatus", id_request(container_id, verbose=verbose))
        return decode_container_status(reply)

    async def list_containers(self, sandbox_id: str = "") -> list[Container]:
        """Every container containerd knows (of one sandbox with ``sandbox_id``)."""
        reply = await self._call("ListContainers", list_containers_request(sandbox_id))
        return decode_list_containers(reply)

    async def list(self) -> list[Sandbox]:
        """The sandboxes. (Defined last: below it, ``list`` in an annotation is this method.)"""
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
