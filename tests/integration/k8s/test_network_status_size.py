"""The network-status write and the API server's limit on a pod's annotations (262,144 bytes
for every key and value together, kube-apiserver's ``TotalAnnotationSizeLimitB``).

The daemon counts as the server counts, so a value it refuses is one the server would refuse
(and it is refused with no request), and a value it lets through at the very limit is one the
server takes. Against the API emulator, which refuses such writes as kube-apiserver does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cni_shim.errors import CNIError
from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import ClientSettings, KubeClient
from multusd.k8s.pods import ANNOTATIONS_LIMIT, NETWORK_STATUS, AnnotationsTooLarge, PodLookup
from multusd.k8s.store import Store
from multusd.kubesim import KubeSim, Settings
from tests.kubeapi import pod as _pod

KEY = "example.com/blob"


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    async with KubeSim(Settings(bookmark_interval=5.0)) as s:
        yield s


@pytest.fixture
async def lookup(sim: KubeSim, short_tmp: Path) -> AsyncIterator[PodLookup]:
    cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "kubeconfig")), {})
    async with KubeClient(cfg, ClientSettings()) as client:
        yield PodLookup(client, Store())


def _crowded(sim: KubeSim, name: str, size: int) -> dict[str, Any]:
    """A pod whose one annotation, key and value, holds ``size`` bytes."""
    manifest = _pod(name)
    manifest["metadata"]["annotations"] = {KEY: "x" * (size - len(KEY))}
    return sim.create(manifest)


def _room(pod: dict[str, Any]) -> int:
    """How long a network-status value may be, in bytes, to fill the pod up to the limit."""
    return (
        ANNOTATIONS_LIMIT
        - len(NETWORK_STATUS)
        - sum(len(k.encode()) + len(v.encode()) for k, v in pod["metadata"]["annotations"].items())
    )


async def test_a_value_up_to_the_limit_is_written_and_one_byte_more_is_refused(
    sim: KubeSim, lookup: PodLookup
) -> None:
    pod = _crowded(sim, "web", 200_000)
    sim.stats.reset()
    with pytest.raises(AnnotationsTooLarge) as info:
        await lookup.set_network_status("default", "web", "s" * (_room(pod) + 1), pod=pod)
    assert info.value.code == 999
    assert info.value.msg == (
        "SetNetworkStatus: refusing to write the network-status annotation of pod default/web: "
        f"with it the pod's annotations would hold {ANNOTATIONS_LIMIT + 1} bytes "
        f"({ANNOTATIONS_LIMIT + 1 - 200_000} of them network-status, 200000 the others), over "
        f"the API server's limit of {ANNOTATIONS_LIMIT} bytes for all of a pod's annotations"
    )
    assert sim.stats.count("patch") == 0, "refused before any request"
    # Bytes, not characters: "é" is two of them.
    wide = "é" * (_room(pod) // 2 + 1)
    with pytest.raises(AnnotationsTooLarge):
        await lookup.set_network_status("default", "web", wide, pod=pod)
    assert sim.stats.count("patch") == 0
    # At the limit exactly: written, and the server agrees.
    assert await lookup.set_network_status("default", "web", "s" * _room(pod), pod=pod)
    stored = sim.get("pods", "default", "web")["metadata"]["annotations"]
    assert sum(len(k) + len(v) for k, v in stored.items()) == ANNOTATIONS_LIMIT


async def test_the_old_network_status_does_not_count_and_a_value_alone_can_be_too_large(
    sim: KubeSim, lookup: PodLookup
) -> None:
    """The PATCH replaces the pod's network-status, so its old value is not counted; without
    a pod, the value and its key alone are judged."""
    manifest = _pod("again")
    manifest["metadata"]["annotations"] = {NETWORK_STATUS: "o" * 150_000, KEY: "x" * 50_000}
    pod = sim.create(manifest)
    assert await lookup.set_network_status("default", "again", "n" * 150_000, pod=pod)
    with pytest.raises(AnnotationsTooLarge):
        await lookup.set_network_status("default", "again", "n" * ANNOTATIONS_LIMIT)


async def test_an_annotation_added_since_the_lookup_meets_the_servers_own_refusal(
    sim: KubeSim, lookup: PodLookup
) -> None:
    """The pod as the ADD read it had room; one annotation added since takes the room away:
    the server's 422 fails the write (not retried: it would be refused again)."""
    pod = _crowded(sim, "stale", 100_000)
    now = sim.get("pods", "default", "stale")
    now["metadata"]["annotations"]["example.com/late"] = "l" * 100_000
    sim.update(now)
    sim.stats.reset()
    with pytest.raises(CNIError) as info:
        await lookup.set_network_status("default", "stale", "s" * _room(pod), pod=pod)
    assert not isinstance(info.value, AnnotationsTooLarge)
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in info.value.msg
    assert sim.stats.count("patch") == 1
