"""What the emulator's tests and the API-client tests share: a minimal pod manifest and the
events of a JSON watch stream. One copy, so a change to what a test pod looks like (or to how
a watch line is read) is made once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp


def pod(name: str, namespace: str = "default", node: str = "node1") -> dict[str, Any]:
    """The smallest pod the emulator (and kube-apiserver) accepts, scheduled on ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }


async def watch_events(resp: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    """Up to ``count`` events of a watch response (fewer if the server ends it first); the
    timeout only keeps a broken test from hanging."""
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        while len(events) < count:
            line = await resp.content.readline()
            if not line:
                break
            events.append(json.loads(line))
    return events
