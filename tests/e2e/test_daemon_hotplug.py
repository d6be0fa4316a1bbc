"""``POST /delegate``: hot-plugging one delegate into a running pod's namespace."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from multusd.kubesim import KubeSim
from tests.e2e.conftest import bridge_plugin, tuning_plugin
from tests.e2e.harness import Daemon, addresses, ip
from tests.netns import netns_path

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]
MAC = "0a:58:0a:fb:00:99"


def _body(command: str, netns: str, config: dict[str, Any], **attributes: Any) -> bytes:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "hotplug1",
        "CNI_NETNS": netns_path(netns),
        "CNI_IFNAME": "net1",
        "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_UID=uid1",
    }
    obj: dict[str, Any] = {
        "env": env,
        "config": base64.b64encode(json.dumps(config).encode()).decode(),
    }
    if attributes:
        obj["interfaceAttributes"] = attributes
    return json.dumps(obj).encode()


def _bridge_with_mac(workdir: Path, bridge: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "hotnet",
        "plugins": [
            bridge_plugin(bridge, workdir, subnet="10.251.9.0/24"),
            tuning_plugin(workdir, capabilities={"mac": True}),
        ],
    }


async def test_hotplug_add_check_del(
    start_daemon: StartDaemon, netns: MakeNetns, workdir: Path, bridge_name: str
) -> None:
    daemon = await start_daemon(clusterNetwork="unused")
    name = await netns()
    config = _bridge_with_mac(workdir, bridge_name)
    status, raw = await daemon.request("POST", "/delegate", _body("ADD", name, config, mac=MAC))
    assert status == 200, raw
    result = json.loads(raw)["Result"]
    assert result["cniVersion"] == "1.0.0"  # what every client's libcni decodes (wire.py)
    assert any(i.get("mac") == MAC for i in result["interfaces"])
    links = json.loads(await ip("-n", name, "-j", "link", "show", "net1"))
    assert links[0]["address"] == MAC
    assert any(a.startswith("10.251.9.") for a in (await addresses(name))["net1"])
    assert (await daemon.request("POST", "/delegate", _body("CHECK", name, config)))[0] == 200
    status, raw = await daemon.request("POST", "/delegate", _body("DEL", name, config))
    assert (status, raw) == (200, b"")
    assert "net1" not in await addresses(name)


async def test_hotplug_errors_are_returned(
    start_daemon: StartDaemon, netns: MakeNetns, workdir: Path
) -> None:
    daemon = await start_daemon(clusterNetwork="unused")
    name = await netns()
    missing = {"cniVersion": "1.0.0", "name": "x", "type": "no-such-plugin"}
    status, raw = await daemon.request("POST", "/delegate", _body("DEL", name, missing))
    assert status == 400
    assert 'failed to find plugin "no-such-plugin"' in json.loads(raw)["msg"]
    status, raw = await daemon.request("POST", "/delegate", _body("GC", name, missing))
    assert status == 400 and json.loads(raw)["msg"].endswith("unknown cmd type: GC")


async def test_hotplug_needs_the_pod(
    start_daemon: StartDaemon, netns: MakeNetns, workdir: Path, bridge_name: str
) -> None:
    async with KubeSim() as sim:
        kubeconfig = await sim.write_kubeconfig(workdir / "kubeconfig")
        daemon = await start_daemon(clusterNetwork="unused", kubeconfig=str(kubeconfig))
        name = await netns()
        config = _bridge_with_mac(workdir, bridge_name)
        status, raw = await daemon.request("POST", "/delegate", _body("ADD", name, config))
        assert status == 400
        assert "pod not found" in json.loads(raw)["msg"]
        assert "net1" not in await addresses(name)
        await daemon.stop()
