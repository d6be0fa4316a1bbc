"""An API server that comes back older (an etcd restore), and the resourceVersion errors and
streaming lists around it, worded as kube-apiserver words them."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.client import ControlClient
from tests.kubeapi import pod, watch_events

PODS = "/api/v1/namespaces/default/pods"
STREAM = "watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
NOT_OLDER_THAN = "resourceVersionMatch=NotOlderThan"


def too_large_status(requested: int, current: int) -> dict[str, Any]:
    """kube-apiserver's Status for a version it has not reached (``storage.
    NewTooLargeResourceVersionError`` on ``errors.NewTimeoutError``), retry after 1 s as the
    watch cache asks."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {requested}, current: {current}",
        "reason": "Timeout",
        "details": {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }


def uids(kubesim: KubeSim) -> dict[str, str]:
    rt = kubesim.state.registry.by_path("", "v1", "pods")
    assert rt is not None
    return {e.name: e.uid for e in kubesim.store.iter_entries(rt)}


# --- snapshot and restore ------------------------------------------------------------------


async def test_restore_goes_back_in_versions_and_cuts_every_watch(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    kubesim.create(pod("old"))
    snap = kubesim.snapshot()
    before = kubesim.store.resource_version
    kubesim.create(pod("new"))
    for i in range(5):
        kubesim.patch("pods", "default", "old", {"metadata": {"labels": {"n": str(i)}}})
    seen = kubesim.store.resource_version
    old_uid = uids(kubesim)["old"]
    async with http.get(f"{PODS}?watch=1&resourceVersion={seen}") as watch:
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        assert kubesim.restore(snap) == before
        # A restarted server drops its connections: the stream ends, nothing more comes.
        async with asyncio.timeout(10):
            with pytest.raises(aiohttp.ClientPayloadError):
                await watch.content.read()
    assert kubesim.store.resource_version == before < seen
    assert uids(kubesim) == {"old": old_uid}  # the backup's objects, as they were
    assert kubesim.get("pods", "default", "old")["metadata"].get("labels") is None
    # The client's version is from the server's previous life: from the future, now.
    async with http.get(f"{PODS}?watch=1&resourceVersion={seen}") as resp:
        assert resp.status == 200
        (event,) = await watch_events(resp, 1)
    assert event == {"type": "ERROR", "object": too_large_status(seen, before)}
    # The versions after the restore are new ones, reused numbers included.
    kubesim.create(pod("after"))
    assert kubesim.store.resource_version == before + 1


async def test_restore_with_new_uids_recreates_every_object(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    for name in ("a", "b", "c"):
        kubesim.create(pod(name))
    snap = kubesim.snapshot()
    first = uids(kubesim)
    for i in range(20):
        kubesim.patch("pods", "default", "a", {"metadata": {"labels": {"n": str(i)}}})
    seen = kubesim.store.resource_version
    current = kubesim.restore(snap, new_uids=True)
    second = uids(kubesim)
    assert second.keys() == first.keys()
    assert not set(second.values()) & set(first.values())
    # Each object was deleted and created again after the backup's version: still older than
    # what a client saw before the restore.
    assert snap.resource_version < current < seen
    async with http.get(f"{PODS}?watch=1&resourceVersion={snap.resource_version}") as resp:
        events = await watch_events(resp, 6)
    assert [e["type"] for e in events] == ["DELETED", "ADDED"] * 3
    assert {e["object"]["metadata"]["uid"] for e in events[1::2]} == set(second.values())


async def test_list_at_a_version_from_the_future_times_out(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    kubesim.create(pod("p"))
    current = kubesim.store.resource_version
    async with http.get(f"{PODS}?resourceVersion={current + 7}&limit=10") as resp:
        assert resp.status == 504
        assert await resp.json() == too_large_status(current + 7, current)
    for version in ("", "0", str(current)):
        async with http.get(f"{PODS}?resourceVersion={version}") as resp:
            assert resp.status == 200, version
    async with http.get(f"{PODS}?resourceVersion=abc") as resp:
        assert resp.status == 400


async def test_continue_tokens_from_before_a_restore_expire(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    for i in range(3):
        kubesim.create(pod(f"p{i}"))
    snap = kubesim.snapshot()
    kubesim.create(pod("later"))
    async with http.get(f"{PODS}?limit=1") as resp:
        token = (await resp.json())["metadata"]["continue"]
    kubesim.restore(snap)
    async with http.get(f"{PODS}?limit=1&continue={token}") as resp:
        assert resp.status == 410
        assert (await resp.json())["reason"] == "Expired"


async def test_restore_without_a_snapshot_is_a_clear_error(kubesim: KubeSim) -> None:
    from multusd.kubesim.errors import ApiError

    with pytest.raises(ApiError, match="no snapshot"):
        kubesim.restore()


async def test_snapshot_and_restore_through_the_control_api(
    kubesim: KubeSim, control: ControlClient
) -> None:
    kubesim.create(pod("x"))
    taken = await control.snapshot()
    assert taken == kubesim.store.resource_version
    old = uids(kubesim)["x"]
    for i in range(4):
        kubesim.patch("pods", "default", "x", {"metadata": {"labels": {"n": str(i)}}})
    restored = await control.restore(new_uids=True)
    assert restored == kubesim.store.resource_version == taken + 2
    assert uids(kubesim)["x"] != old


# --- streaming lists (sendInitialEvents) -----------------------------------------------------


async def test_streaming_list_at_a_version_from_the_future(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    kubesim.create(pod("p"))
    current = kubesim.store.resource_version
    url = f"{PODS}?{STREAM}&{NOT_OLDER_THAN}&resourceVersion={current + 3}"
    async with http.get(url) as resp:
        (event,) = await watch_events(resp, 1)
    assert event == {"type": "ERROR", "object": too_large_status(current + 3, current)}
    # Not older than a version it has: the current state, then the marked bookmark.
    async with http.get(f"{PODS}?{STREAM}&{NOT_OLDER_THAN}&resourceVersion={current}") as resp:
        events = await watch_events(resp, 2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_streaming_list_needs_not_older_than(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    async with http.get(f"{PODS}?{STREAM}") as resp:
        assert resp.status == 422
        body = await resp.json()
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
            "NotOlderThan",
            "field": "resourceVersionMatch",
        }
    ]
    async with http.get(f"{PODS}?watch=1&{NOT_OLDER_THAN}") as resp:
        assert resp.status == 422
        assert (await resp.json())["message"].endswith(
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
        )


async def test_send_initial_events_false_starts_from_now(
    kubesim: KubeSim, http: aiohttp.ClientSession
) -> None:
    kubesim.create(pod("before"))
    url = f"{PODS}?watch=1&sendInitialEvents=false&{NOT_OLDER_THAN}&resourceVersion=0"
    async with http.get(url) as resp:
        while kubesim.stats.open_watches == 0:
            await asyncio.sleep(0.01)
        kubesim.create(pod("after"))
        (event,) = await watch_events(resp, 1)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "after")


async def test_a_server_without_watch_list_refuses_streaming() -> None:
    async with KubeSim(Settings(watch_list=False)) as sim:
        headers = {"Authorization": f"Bearer {sim.token}"}
        async with (
            aiohttp.ClientSession(sim.url, headers=headers) as http,
            http.get(f"{PODS}?{STREAM}&{NOT_OLDER_THAN}") as resp,
        ):
            assert resp.status == 422
            body = await resp.json()
    assert body["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: '
        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
    )
    assert body["details"]["group"] == "meta.k8s.io"
    assert body["details"]["kind"] == "ListOptions"


async def test_watch_cache_answers_resource_version_0_lists_whole() -> None:
    """kube-apiserver serves a list at resourceVersion 0 from its watch cache and ignores
    ``limit`` there; any other version with a limit is paged (from etcd)."""
    async with KubeSim(Settings(watch_cache_ignores_limit=True)) as sim:
        for i in range(5):
            sim.create(pod(f"p{i}"))
        headers = {"Authorization": f"Bearer {sim.token}"}
        async with aiohttp.ClientSession(sim.url, headers=headers) as http:
            async with http.get(f"{PODS}?resourceVersion=0&limit=2") as resp:
                whole = await resp.json()
            async with http.get(f"{PODS}?limit=2") as resp:
                paged = await resp.json()
    assert len(whole["items"]) == 5 and "continue" not in whole["metadata"]
    assert len(paged["items"]) == 2 and paged["metadata"]["continue"]


async def test_snapshot_and_restore_from_the_command_line(
    kubesim: KubeSim, kubeconfig: Path
) -> None:
    async def cli(*args: str) -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "multusd.kubesim", *args, "--kubeconfig", str(kubeconfig),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        assert proc.returncode == 0, err
        result: dict[str, Any] = json.loads(out)
        return result

    kubesim.create(pod("x"))
    old = uids(kubesim)["x"]
    taken = await cli("snapshot")
    assert taken == {"resourceVersion": str(kubesim.store.resource_version)}
    kubesim.create(pod("y"))
    restored = await cli("restore", "--new-uids")
    assert restored == {"resourceVersion": str(kubesim.store.resource_version)}
    assert uids(kubesim).keys() == {"x"} and uids(kubesim)["x"] != old
