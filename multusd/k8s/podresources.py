"""The kubelet's pod-resources gRPC service: which devices each pod got, by pod name.

Upstream (``pkg/kubeletclient``) calls ``v1.PodResourcesLister/List`` on the kubelet's socket
once per ADD and reads, for the pod being added, the device IDs of every container by resource
name. This is that client; ``multusd.k8s.devices`` decides when to ask it and turns its answer
into the pod's device map.

Two deliberate choices:

* ``grpc`` is imported on the first lookup, never at module import. Measured on CPython 3.11
  with grpcio 1.85: +8 MiB RSS for the import inside the daemon (+20 MiB from a bare
  interpreter); 11 MiB in all and one more thread once a call has run. A node without device
  plugins should not pay that.
* No generated protobuf code: the reply is decoded by hand with the project's protobuf reader
  (``multusd.protobuf``), reading only the five fields Multus uses and skipping the rest, so the
  kubelet can grow its API without breaking us and we carry no ``protobuf`` runtime (or its
  version pinning).

Errors are ``CNIError`` values with upstream's message chain from ``getKubeletClient`` on; the
caller puts ``getKubernetesDelegate``'s prefix in front.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cni_shim.errors import DECODING_FAILURE, INTERNAL, TRY_AGAIN_LATER, CNIError
from multusd.protobuf import LEN, scan, tag, text

if TYPE_CHECKING:
    import grpc

__all__ = ["KUBELET_SOCKET", "list_pod_resources", "pod_devices"]

KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

_LIST_METHOD = "/v1.PodResourcesLister/List"
_MAX_MESSAGE = 16 * 1024 * 1024  # upstream's defaultPodResourcesMaxSize

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
        "getKubeletClient: error getting pod resources from client: "
        + f"getPodResources: failed to list pod resources, {client_repr}.Get(_) = _, {rpc_text}\n",
    )


async def list_pod_resources(
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
            rpc_text = _rpc_error_text(_go_code_name(status), desc)
            raise _list_failure(
                client_repr, TRY_AGAIN_LATER if transient else INTERNAL, rpc_text
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


def pod_devices(reply: bytes, client_repr: str, namespace: str, name: str) -> dict[str, list[str]]:
    """Concatenate the devices of every container of every matching pod entry, per resource.

    Only matching entries have their containers decoded. A malformed reply fails with the text
    of a failed ``List`` call: Go fails while unmarshalling, inside ``List``.
    """
    try:
        return _devices_of(reply, namespace, name)
    except ValueError as exc:
        desc = f"grpc: failed to unmarshal the received message: proto: {exc}"
        rpc_text = _rpc_error_text("Internal", desc)
        raise _list_failure(client_repr, DECODING_FAILURE, rpc_text) from exc


def _devices_of(reply: bytes, namespace: str, name: str) -> dict[str, list[str]]:
    devices: dict[str, list[str]] = {}
    for pod_name, pod_namespace, containers in _decode_list_response(reply):
        if pod_name != name or pod_namespace != namespace:
            continue
        for container in containers:
            for resource, ids in _decode_container_devices(reply, *container):
                devices.setdefault(resource, []).extend(ids)
    return devices


# ---- the reply's messages -----------------------------------------------------------------
#
# ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
# PodResources             { string name = 1; string namespace = 2;
#                            repeated ContainerResources containers = 3; ... }
# ContainerResources       { string name = 1; repeated ContainerDevices devices = 2; ... }
# ContainerDevices         { string resource_name = 1; repeated string device_ids = 2; ... }
#
# Every field we read is length-delimited (wire type 2). A field number we know with another
# wire type is treated as unknown and skipped, as protobuf's own decoders do.

Span = tuple[int, int]

_T_1 = tag(1, LEN)
_T_2 = tag(2, LEN)
_T_3 = tag(3, LEN)
_LIST_RESPONSE = frozenset((_T_1,))
_POD_RESOURCES = frozenset((_T_1, _T_2, _T_3))
_CONTAINER_RESOURCES = frozenset((_T_2,))
_CONTAINER_DEVICES = frozenset((_T_1, _T_2))


def _decode_list_response(buf: bytes) -> Iterator[tuple[str, str, list[Span]]]:
    """Each pod entry's name and namespace, with its containers left undecoded (byte spans)."""
    for _, start, end in scan(buf, 0, len(buf), _LIST_RESPONSE):
        name = namespace = ""
        containers: list[Span] = []
        for field, fstart, fend in scan(buf, start, end, _POD_RESOURCES):
            if field == _T_1:
                name = text(buf, fstart, fend)
            elif field == _T_2:
                namespace = text(buf, fstart, fend)
            else:
                containers.append((fstart, fend))
        yield name, namespace, containers


def _decode_container_devices(buf: bytes, start: int, end: int) -> Iterator[tuple[str, list[str]]]:
    for _, dstart, dend in scan(buf, start, end, _CONTAINER_RESOURCES):
        resource = ""
        ids: list[str] = []
        for field, fstart, fend in scan(buf, dstart, dend, _CONTAINER_DEVICES):
            if field == _T_1:
                resource = text(buf, fstart, fend)
            else:
                ids.append(text(buf, fstart, fend))
        yield resource, ids
