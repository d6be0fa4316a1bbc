"""The caches' health view against a real (emulated) API server that goes away and comes back:
``/readyz`` reports it, so it must say "failing" while the server is down, without costing a
request, and be healthy again once the watches are back."""

from __future__ import annotations

from pathlib import Path

from multusd.k8s.apiconfig import load_api_config
from multusd.k8s.client import ClientSettings
from multusd.k8s.cluster import Cluster, running_cluster
from multusd.kubesim import KubeSim, Settings
from tests.waits import eventually


def _all_watching(cluster: Cluster) -> bool:
    health = cluster.health()
    return all(c.watching and c.healthy for c in health.caches)


async def test_health_follows_the_api_server_down_and_back(short_tmp: Path) -> None:
    failures: list[str] = []
    async with KubeSim(Settings(bookmark_interval=0.5)) as sim:
        cfg = await load_api_config(str(await sim.write_kubeconfig(short_tmp / "kubeconfig")), {})
        async with running_cluster(
            cfg, ClientSettings(), node_name="n1", on_failure=failures.append
        ) as cluster:
            changes: list[int] = []
            cluster.client.contacts.on_change = lambda: changes.append(1)
            assert await cluster.wait_synced(30)
            await eventually(lambda: _all_watching(cluster), 60)
            health = cluster.health()
            assert health.synced and health.problems() == []
            assert [c.name for c in health.caches] == ["pods", "network-attachment-definitions"]
            assert all(c.last_contact is not None for c in health.caches)
            requests = sim.stats.count()
            for _ in range(100):
                cluster.health()
            assert sim.stats.count() == requests  # the view costs no request

            await sim.stop()
            await eventually(lambda: len(cluster.health().problems()) == 2, 60)
            health = cluster.health()
            assert health.synced  # the caches still serve what they have
            assert not any(c.watching for c in health.caches)
            for problem in health.problems():
                assert "no watch, failing since" in problem
                assert "TransportError" in problem
            assert changes  # told, so the supervisor can update /readyz
            changes.clear()

            await sim.start()  # same port, same objects and versions
            await eventually(lambda: _all_watching(cluster), 60)
            assert cluster.health().problems() == []
            assert changes
    assert failures == []
