"""Devices a pod got through DRA (``resource.k8s.io/v1`` ResourceClaims), for NADs with
``k8s.v1.cni.cncf.io/resourceName``: the second half of upstream's resource map.

Upstream HEAD (``pkg/draclient``, which ``getKubernetesDelegate`` calls right after building
the kubelet's map, on the same map) adds:

* for each ``status.resourceClaimStatuses[]`` of the pod, the ResourceClaim it names
  (``resourceClaimName``; an entry without one is skipped), read once per ADD. A claim without
  ``status.allocation.devices.results`` fails the ADD (``claim <name> has no device
  allocation``);
* for each allocated device (``request``, ``driver``, ``pool``, ``device``), the device of that
  name in the pool of that name, among the ResourceSlices listed once per driver with the field
  selector ``spec.nodeName=<the pod's node>,spec.driver=<driver>`` (``spec.driver`` alone for a
  pod without a node). Of a device only two string attributes are kept,
  ``k8s.cni.cncf.io/deviceID`` and ``k8s.cni.cncf.io/resourceName``: the device ID joins the map
  under the resource name, after what the kubelet's map already has there. A device that is in
  no slice, has no device ID (a GPU in the same claim, say) or no resource name is skipped with a
  warning: a claim only partly meant for CNI must not fail the pod;
* for ``status.extendedResourceClaimStatus`` (extended resources backed by DRA), each request
  mapping takes the devices of its request under the mapping's resource name; there every miss
  is an error, and the device's resource-name attribute must equal the mapping's.

All of it within upstream's 20 s (its ``context.WithTimeout``), through the daemon's one client
(its token bucket, its retries of a 429), and only for a pod that has claims: any other pod costs
no request at all. ``multusd.k8s.devices`` then sorts the map per resource (upstream's
``types.SortDeviceIDs``), so each NAD naming a resource takes the next device in sorted order.

Failures are ``CNIError`` values with upstream's text behind :data:`PREFIX`. An API error reads
as client-go prints it: the Status message (``resourceclaims.resource.k8s.io "x" not found``);
the 20 s bound as Go's ``Get "<url>": context deadline exceeded``. Codes: 11 (try again later)
for the bound and a transient API failure, 4 (invalid environment) for what the claims and
slices say, 999 for any other API refusal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cni_shim.errors import INTERNAL, INVALID_ENVIRONMENT, TRY_AGAIN_LATER, CNIError
from cni_shim.goquote import go_quote
from multusd.k8s.client import RESOURCE_SLICES_PATH, resource_claim_path
from multusd.k8s.errors import ApiError, is_transient
from multusd.k8s.names import InvalidName

__all__ = [
    "DEVICE_ID_ATTRIBUTE",
    "DRA_TIMEOUT",
    "PREFIX",
    "RESOURCE_NAME_ATTRIBUTE",
    "ClaimsApi",
    "add_claimed_devices",
    "has_claims",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEVICE_ID_ATTRIBUTE = "k8s.cni.cncf.io/deviceID"
RESOURCE_NAME_ATTRIBUTE = "k8s.cni.cncf.io/resourceName"
DRA_TIMEOUT = 20.0
"""Upstream's bound on all DRA reads of one ADD (``context.WithTimeout(ctx, 20*time.Second)``)."""
PREFIX = "getKubernetesDelegate: failed to get resourceMap from DRA client: "
_SLACK = 1.0
"""Added to each request's own timeout, so that the 20 s bound, not the client's timer, ends a
request that hangs: the error then says what upstream's says."""
_NO_DEVICE = "device not in any matching resource slice"  # upstream's errDeviceNotInAnySlice


class ClaimsApi(Protocol):
    """What the DRA reads need of the API client (``KubeClient`` has it)."""

    async def get_resource_claim(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
    ) -> Obj: ...

    async def list_resource_slices(
        self,
        field_selector: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the request's own deadline
    ) -> Obj: ...

    def request_url(self, path: str, params: Mapping[str, str] | None = None) -> str: ...


def has_claims(pod: Mapping[str, Any]) -> bool:
    """Whether upstream's DRA client would read anything for ``pod``: it has claim statuses, or
    an extended-resource claim. Only then is :func:`add_claimed_devices` worth its requests."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return False
    return bool(status.get("resourceClaimStatuses")) or isinstance(
        status.get("extendedResourceClaimStatus"), Mapping
    )


async def add_claimed_devices(
    api: ClaimsApi,
    pod: Mapping[str, Any],
    devices: dict[str, list[str]],
    *,
    timeout: float = DRA_TIMEOUT,  # noqa: ASYNC109 - upstream's bound, its error text ours
) -> None:
    """Append the device IDs of ``pod``'s DRA claims to ``devices`` (resource name -> IDs, the
    kubelet's map), as upstream's ``GetPodResourceMap`` does; sorting is the caller's.

    ``CNIError`` (:data:`PREFIX` and upstream's text) when a claim cannot be read, is not
    allocated, a slice list fails, an extended-resource mapping does not resolve, or the whole
    takes longer than ``timeout``. ``devices`` may hold some of the claims' devices then: the
    ADD fails anyway.
    """
    meta = pod.get("metadata") or {}
    log.debug(
        "GetPodResourceMap: processing DRA resources for pod %s/%s",
        meta.get("namespace", ""), meta.get("name", ""),
    )  # fmt: skip
    deadline = asyncio.get_running_loop().time() + timeout
    lookup = _Lookup(api, str((pod.get("spec") or {}).get("nodeName") or ""), deadline)
    try:
        await _claims(lookup, str(meta.get("namespace") or ""), pod.get("status") or {}, devices)
    except CNIError as exc:
        raise exc.with_prefix(PREFIX) from exc


async def _claims(
    lookup: _Lookup, namespace: str, status: Mapping[str, Any], devices: dict[str, list[str]]
) -> None:
    for claim_status in _objects(status.get("resourceClaimStatuses")):
        claim_name = claim_status.get("resourceClaimName")
        if claim_name is None:
            log.error("GetPodResourceMap: resource claim status has nil ResourceClaimName")
            continue
        claim_name = str(claim_name)
        results = _allocation(await lookup.claim(namespace, claim_name), claim_name)
        resolved = 0
        for result in results:
            device = await lookup.device(result)
            if device is None or not device.resource_name:
                why = (
                    _not_found(result)
                    if device is None
                    else f"no {go_quote(RESOURCE_NAME_ATTRIBUTE)} (only devices published for "
                    "CNI are mapped)"
                )
                log.warning(
                    "GetPodResourceMap: skipping allocation result for claim %s (driver=%s "
                    "pool=%s device=%s): %s",
                    claim_name, result.driver, result.pool, result.device, why,
                )  # fmt: skip
                continue
            devices.setdefault(device.resource_name, []).append(device.device_id)
            resolved += 1
        if resolved == 0:
            log.warning(
                "GetPodResourceMap: claim %s had no allocation results mapped for Multus "
                "(skipping this claim; existing kubelet/device-plugin map entries are kept). "
                "Fix DRA ResourceSlices or Multus attributes if this claim should contribute "
                "to CNI.",
                claim_name,
            )
    extended = status.get("extendedResourceClaimStatus")
    if isinstance(extended, Mapping):
        await _extended(lookup, namespace, extended, devices)


async def _extended(
    lookup: _Lookup, namespace: str, extended: Mapping[str, Any], devices: dict[str, list[str]]
) -> None:
    """``processExtendedResourceClaimStatus``: keys from the mappings, every miss an error."""
    claim_name = str(extended.get("resourceClaimName") or "")
    results = _allocation(await lookup.claim(namespace, claim_name), claim_name)
    by_request: dict[str, list[_Result]] = {}
    for result in results:
        by_request.setdefault(result.request, []).append(result)
    for mapping in _objects(extended.get("requestMappings")):
        request = str(mapping.get("requestName") or "")
        resource = str(mapping.get("resourceName") or "")
        chosen = by_request.get(request)
        if not chosen:
            raise CNIError(
                INVALID_ENVIRONMENT, f"request {request} not found in claim {claim_name}"
            )
        for result in chosen:
            device = await lookup.device(result)
            if device is None:
                raise CNIError(INVALID_ENVIRONMENT, _not_found(result))
            if not device.resource_name:
                raise CNIError(
                    INVALID_ENVIRONMENT,
                    f"device {result.device} missing required attribute "
                    f"{RESOURCE_NAME_ATTRIBUTE} (must match NAD k8s.v1.cni.cncf.io/resourceName "
                    f"and extended mapping {go_quote(resource)})",
                )
            if device.resource_name != resource:
                raise CNIError(
                    INVALID_ENVIRONMENT,
                    f"device {result.device}: {RESOURCE_NAME_ATTRIBUTE} is "
                    f"{go_quote(device.resource_name)} but extended resource mapping for request "
                    f"{go_quote(request)} is {go_quote(resource)}",
                )
            devices.setdefault(resource, []).append(device.device_id)


@dataclass(frozen=True, slots=True)
class _Result:
    """One ``status.allocation.devices.results[]`` entry of a claim."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class _Device:
    """The two attributes upstream keeps of a slice's device (``deviceInfo``)."""

    device_id: str
    resource_name: str


def _objects(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list (anything else in it, or a non-list, is nothing)."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _allocation(claim: Mapping[str, Any], claim_name: str) -> list[_Result]:
    """The claim's allocated devices; an error when it has none.

    Upstream fails when ``status.allocation`` or its ``devices.results`` is nil. The API server
    never sends an empty ``results`` (``omitempty`` in JSON, nothing at all in protobuf, which
    upstream's client reads), so an empty list is the nil it decodes too.
    """
    allocation = (claim.get("status") or {}).get("allocation")
    raw = (
        (allocation.get("devices") or {}).get("results")
        if isinstance(allocation, Mapping)
        else None
    )
    if not isinstance(raw, list) or not raw:
        log.error("GetPodResourceMap: claim %s has no device allocation", claim_name)
        raise CNIError(INVALID_ENVIRONMENT, f"claim {claim_name} has no device allocation")
    return [
        _Result(_text(r.get("request")), _text(r.get("driver")), _text(r.get("pool")),
                _text(r.get("device")))
        for r in _objects(raw)
    ]  # fmt: skip


def _not_found(result: _Result) -> str:
    return (
        f"{_NO_DEVICE}: device {result.device} not found for claim resource "
        f"{result.driver}/{result.pool} in any matching resource slice"
    )


def _string_attribute(attributes: Mapping[str, Any], name: str) -> str:
    """A v1 device attribute's string value (``{"string": "..."}``); "" when it is absent or of
    another type (``int``, ``bool``, ``version``), as upstream reads only ``StringValue``."""
    attribute = attributes.get(name)
    return _text(attribute.get("string")) if isinstance(attribute, Mapping) else ""


class _Lookup:
    """One ADD's reads: each claim is read once, each driver's slices listed once (upstream's
    caches live as long as its DRA client, which ``getKubernetesDelegate`` makes once per ADD),
    every read bounded by the ADD's one deadline."""

    def __init__(self, api: ClaimsApi, node: str, deadline: float) -> None:
        self.api = api
        self.node = node
        self.deadline = deadline
        self._claims: dict[tuple[str, str], Obj] = {}
        self._listed: set[str] = set()
        self._devices: dict[tuple[str, str, str], _Device] = {}

    async def claim(self, namespace: str, name: str) -> Obj:
        key = (namespace, name)
        if key not in self._claims:
            self._claims[key] = await self._bounded(
                lambda seconds: self.api.get_resource_claim(namespace, name, timeout=seconds),
                lambda: self.api.request_url(resource_claim_path(namespace, name)),
            )
        return self._claims[key]

    async def device(self, result: _Result) -> _Device | None:
        """The device ``result`` names, or ``None`` when no slice of its driver on this node
        has it with a device ID (upstream's ``errDeviceNotInAnySlice``)."""
        if result.driver not in self._listed:
            await self._list(result.driver)
        return self._devices.get((result.driver, result.pool, result.device))

    async def _list(self, driver: str) -> None:
        """``ensureDriverCachePopulated``: one LIST, only the two attributes kept, keyed by the
        slice's own driver and pool (a device without a device ID is not kept at all)."""
        selector = f"spec.driver={driver}"
        if self.node:
            selector = f"spec.nodeName={self.node},{selector}"
        log.debug("ensureDriverCachePopulated: listing ResourceSlices (fieldSelector=%r)", selector)
        listing = await self._bounded(
            lambda seconds: self.api.list_resource_slices(selector, timeout=seconds),
            lambda: self.api.request_url(RESOURCE_SLICES_PATH, {"fieldSelector": selector}),
        )
        for item in _objects(listing.get("items")):
            spec = item.get("spec") or {}
            driver_pool = (_text(spec.get("driver")), _text((spec.get("pool") or {}).get("name")))
            for device in _objects(spec.get("devices")):
                attributes = device.get("attributes") or {}
                if not isinstance(attributes, Mapping):
                    continue
                device_id = _string_attribute(attributes, DEVICE_ID_ATTRIBUTE)
                if device_id:
                    self._devices[(*driver_pool, _text(device.get("name")))] = _Device(
                        device_id, _string_attribute(attributes, RESOURCE_NAME_ATTRIBUTE)
                    )
        self._listed.add(driver)

    async def _bounded(
        self, call: Callable[[float], Awaitable[Obj]], url: Callable[[], str]
    ) -> Obj:
        """One read within the deadline; its failure as upstream's text, with a CNI code."""
        remaining = self.deadline - asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout_at(self.deadline):
                return await call(max(remaining, 0.0) + _SLACK)
        except TimeoutError:
            raise CNIError(
                TRY_AGAIN_LATER, f"Get {go_quote(url())}: context deadline exceeded"
            ) from None
        except ApiError as exc:
            raise _api_failure(exc) from exc


def _api_failure(exc: ApiError) -> CNIError:
    """client-go's text of a failed request: a Status' message as it stands, a refused name as
    ``Request.Name`` words it; transient failures may be retried by the runtime (code 11)."""
    text = exc.message if exc.status and exc.message else str(exc)
    if isinstance(exc, InvalidName):
        return CNIError(INVALID_ENVIRONMENT, text)
    return CNIError(TRY_AGAIN_LATER if is_transient(exc) else INTERNAL, text)
