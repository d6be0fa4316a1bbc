"""``manifests/kind``: the base plus what a stock kind cluster needs, and nothing else.

kind's node image ships only host-local, ptp, portmap and loopback, so the example NADs
(bridge, tuning, macvlan, static) would fail with ``failed to find plugin "bridge"``. The
overlay adds one init container that copies the missing plugins from the image; here it is
built with the machine's kubectl, validated, and its command run against a temp "node".
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest

from multusd.config.daemon import parse_daemon_config
from tests.image.build import IMAGE  # what docs/quickstart.md builds and loads into kind
from tests.kubesim.conftest import KubectlBinary
from tests.manifests.helpers import (
    BASE,
    DEPLOYED,
    EXAMPLES,
    K8S_VERSIONS,
    KIND,
    MULTUSD,
    Obj,
    host_path,
    kustomize,
    load,
)

KIND_NODE_PLUGINS = ("host-local", "ptp", "portmap", "loopback")
INIT = "install-cni-plugins"


@pytest.fixture(scope="module")
def built(
    kustomize_bin: KubectlBinary | None, tmp_path_factory: pytest.TempPathFactory
) -> list[Obj]:
    return kustomize(kustomize_bin, KIND, tmp_path_factory.mktemp("home"))


def daemonset(objects: list[Obj]) -> Obj:
    (found,) = [o for o in objects if o["kind"] == "DaemonSet"]
    return found


def spec(objects: list[Obj]) -> Obj:
    pod: Obj = daemonset(objects)["spec"]["template"]["spec"]
    return pod


def init_container(objects: list[Obj], name: str = INIT) -> Obj:
    return next(c for c in spec(objects)["initContainers"] if c["name"] == name)


def example_plugins() -> set[str]:
    """Every plugin the example NADs run, IPAM plugins included."""
    needed = set()
    for path in sorted(EXAMPLES.glob("*-nad.yaml")):
        for doc in load(path):
            config = json.loads(doc["spec"]["config"])
            for plugin in config.get("plugins", [config]):
                needed.add(plugin["type"])
                if "ipam" in plugin:
                    needed.add(plugin["ipam"]["type"])
    return needed


def test_the_overlay_is_the_base_plus_the_init_container_and_the_image(
    built: list[Obj],
) -> None:
    """Undo the two changes and the base comes back exactly: the overlay changes nothing else."""
    base = {(d["kind"], d["metadata"]["name"]): d for n in DEPLOYED for d in load(BASE / n)}
    undone = copy.deepcopy(built)
    pod = spec(undone)
    pod["initContainers"] = [c for c in pod["initContainers"] if c["name"] != INIT]
    for ctr in pod["initContainers"] + pod["containers"]:
        assert ctr["image"] == IMAGE
        ctr["image"] = "ghcr.io/example/multusd:0.1.0"
    assert {(d["kind"], d["metadata"]["name"]): d for d in undone} == base
    # The base image name is what the overlay replaces (else the transformer silently no-ops).
    assert {c["image"] for c in spec(list(base.values()))["containers"]} == {
        "ghcr.io/example/multusd:0.1.0"
    }


def test_the_init_container_fills_the_daemons_bin_dir(built: list[Obj]) -> None:
    init = init_container(built)
    # Before the shim's installer (docs/quickstart.md describes them in this order).
    assert [c["name"] for c in spec(built)["initContainers"]] == [INIT, "install-multus-shim"]
    command = init["command"]
    assert command[:2] == [MULTUSD, "install-plugins"]
    assert command[command.index("--src") + 1] == "/usr/lib/cni"  # the image's Debian plugins
    assert "--only" not in command  # every missing plugin, not just the examples'
    dest = command[command.index("--dest") + 1]
    (configmap,) = [o for o in built if o["kind"] == "ConfigMap"]
    daemon_config, _ = parse_daemon_config(configmap["data"]["daemon-config.json"].encode())
    assert host_path(spec(built), init, dest)[0] == daemon_config.bin_dir == "/opt/cni/bin"
    # Mounted exactly as the shim installer's mount of the same directory.
    shim = init_container(built, "install-multus-shim")
    assert init["volumeMounts"] == shim["volumeMounts"]
    assert init["securityContext"] == {"privileged": True}  # Bidirectional propagation needs it
    assert init["image"] == shim["image"] == spec(built)["containers"][0]["image"] == IMAGE


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_built_objects_validate(built: list[Obj], version: str) -> None:
    for obj in built:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Path]:
    """A stock kind node's /opt/cni/bin (stand-ins with their own bytes)."""
    bin_dir = tmp_path / "node" / "opt" / "cni" / "bin"
    bin_dir.mkdir(parents=True)
    for name in KIND_NODE_PLUGINS:
        (bin_dir / name).write_bytes(f"kind's {name}\n".encode())
        (bin_dir / name).chmod(0o755)
    yield bin_dir


def test_the_init_command_gives_a_kind_node_what_the_examples_need(
    built: list[Obj], node: Path
) -> None:
    """The overlay's command as it is, but for --dest (the node's dir is a temp dir here) and
    the program (this checkout's multusd rather than the image's /opt/multusd/bin one)."""
    command = list(init_container(built)["command"])
    command[command.index("--dest") + 1] = str(node)
    kept = {name: (node / name).read_bytes() for name in KIND_NODE_PLUGINS}
    assert not example_plugins() <= set(kept)  # the failure the overlay is for
    done = subprocess.run(
        [sys.executable, "-m", "multusd", *command[1:]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in KIND_NODE_PLUGINS:
        assert f"kept existing {node / name}" in lines
        assert (node / name).read_bytes() == kept[name]
    assert f"installed {node / 'bridge'}" in lines
    present = {p.name for p in node.iterdir()}
    assert example_plugins() <= present, example_plugins() - present
    assert not [p for p in present if p.startswith(".")]  # no temp file left
