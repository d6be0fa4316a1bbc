"""The demo's example rig: its directories, its configs, and the example manifests it loads.

What ``multusd demo`` sets up, apart from how it runs it (``multusd/demo.py``), so that
``tests/e2e/test_demo.py`` can check these configs and the packaged examples without running
the demo.

Why every path is spelled out: the demo runs on a developer's machine, not on a node, so it
must write nothing outside its temp dir. The daemon's defaults (``cniConfigDir``
``/etc/cni/net.d``, ``cniDir`` ``/var/lib/cni/multus``, ``socketDir`` ``/run/multus``) and the
plugins' (host-local's ``dataDir`` ``/var/lib/cni/networks``, tuning's ``/run/cni/tuning``) are
all node paths, so the daemon config and every network config the demo uses name a directory
of the temp dir instead; the example NADs keep the plugins' defaults, which are right on a node.
"""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUBNET = "10.250.77.0/24"
EXAMPLES = "demo_examples"  # package data of multusd (pyproject.toml)
NODE = "demo-node"


def example(name: str) -> dict[str, Any]:
    """One of the packaged example manifests, parsed."""
    resource = importlib.resources.files("multusd").joinpath(EXAMPLES, name)
    if not resource.is_file():
        raise RuntimeError(f"{resource} is missing: the multusd package is incomplete")
    loaded: dict[str, Any] = yaml.safe_load(resource.read_text(encoding="utf-8"))
    return loaded


@dataclass(frozen=True)
class DemoDirs:
    """Where the demo keeps what the daemon, the runtime and the plugins keep on a node: all of
    it in the temp dir (see the module doc)."""

    workdir: Path

    @property
    def conf_dir(self) -> Path:  # the runtime's CNI conf dir: cniConfigDir
        return self.workdir / "net.d"

    @property
    def run(self) -> Path:  # socketDir
        return self.workdir / "run"

    @property
    def ipam(self) -> Path:  # host-local: one subdirectory per network
        return self.workdir / "ipam"

    @property
    def tuning(self) -> Path:  # tuning: the interfaces' original settings
        return self.workdir / "tuning"

    @property
    def netns(self) -> Path:  # the pod's namespace, pinned on this file
        return self.workdir / "netns"

    @property
    def kubelet(self) -> Path:  # never created: the daemon finds no devices there
        return self.workdir / "kubelet"


def daemon_config(dirs: DemoDirs, plugin_dir: str, cluster: Path) -> dict[str, Any]:
    """The daemon config: every directory and file the daemon reads or writes named explicitly
    (docs/configuration.md lists each key and its node default)."""
    workdir = dirs.workdir
    return {
        "cniVersion": "1.0.0",
        # Non-auto mode: the daemon installs this file into cniConfigDir, as on a node.
        "multusConfigFile": str(workdir / "00-multus.conf"),
        "cniConfigDir": str(dirs.conf_dir),
        "socketDir": str(dirs.run),
        "binDir": plugin_dir,
        "cniDir": str(workdir / "cache"),
        "confDir": str(workdir / "multus.d"),
        "clusterNetwork": str(cluster),
        "kubeconfig": str(workdir / "kubeconfig"),
        "kubeletPodResourcesSocket": str(dirs.kubelet / "pod-resources" / "kubelet.sock"),
        "deviceCheckpointFile": str(
            dirs.kubelet / "device-plugins" / "kubelet_internal_checkpoint"
        ),
        "logLevel": "verbose",
        "logToStderr": True,
    }


def cluster_network(dirs: DemoDirs, bridge: str) -> dict[str, Any]:
    """The cluster network: a bridge with host-local addresses from ``SUBNET``."""
    return confine(
        {
            "cniVersion": "1.0.0",
            "name": "demo-net",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": SUBNET}]],
                        "routes": [{"dst": "0.0.0.0/0", "gw": "10.250.77.1"}],
                    },
                }
            ],
        },
        dirs,
    )


def confine(config: dict[str, Any], dirs: DemoDirs) -> dict[str, Any]:
    """``config`` (a CNI config or conflist) with its plugins' state under the demo's dirs."""
    for plugin in config.get("plugins", [config]):
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "host-local":
            ipam["dataDir"] = str(dirs.ipam)
        if plugin.get("type") == "tuning":
            plugin["dataDir"] = str(dirs.tuning)
    return config


def nad(name: str, dirs: DemoDirs, **changes: str) -> dict[str, Any]:
    """An example NAD with ``changes`` made in the plugins that have those keys, confined."""
    nad = example(name)
    config = json.loads(nad["spec"]["config"])
    unused = set(changes)
    for plugin in config.get("plugins", [config]):
        plugin.update({k: v for k, v in changes.items() if k in plugin})
        unused -= set(plugin)
    if unused:  # the example changed under the demo: say so rather than run it unchanged
        raise RuntimeError(f"{name}: no plugin has {', '.join(sorted(unused))}")
    nad["spec"]["config"] = json.dumps(confine(config, dirs))
    return nad
