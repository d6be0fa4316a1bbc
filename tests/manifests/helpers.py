"""Where the manifests are and how the tests read them, shared by the manifest tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes_validate.utils import all_versions

from tests.image.containerfile import entrypoint
from tests.manifests.kustomize import build as kustomize_build

if TYPE_CHECKING:
    from tests.kubesim.conftest import KubectlBinary

Obj = dict[str, Any]

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
BASE = MANIFESTS / "base"
KIND = MANIFESTS / "kind"
EXAMPLES = MANIFESTS / "examples"
PACKAGED_EXAMPLES = ROOT / "multusd" / "demo_examples"
DEPLOYED = ("crd.yaml", "rbac.yaml", "configmap.yaml", "daemonset.yaml")
NAD_KIND = ("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition")
MULTUSD = entrypoint()[0]
"""The image's program (its ENTRYPOINT): the path every container's command names."""


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


# Every Kubernetes minor from 1.29 (the oldest still served by a kind node image) to the newest
# whose schemas the installed kubernetes-validate ships.
K8S_VERSIONS = sorted({v for v in all_versions() if _minor(v) >= (1, 29)}, key=_minor)


def load(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomize(kubectl: KubectlBinary | None, directory: Path, home: Path) -> list[Obj]:
    """``kubectl kustomize DIRECTORY``: what ``kubectl apply -k`` sends (built offline); with
    no kubectl 1.21+ on the machine (``None``), the Python build of the same
    (``tests/manifests/kustomize.py``, held to kubectl's where both exist)."""
    if kubectl is None:
        return kustomize_build(directory)
    done = subprocess.run(
        [kubectl.path, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc is not None]


def host_path(spec: Obj, ctr: Obj, path: str) -> tuple[str, Obj]:
    """The host path behind ``path`` in container ``ctr`` of pod ``spec`` (longest covering
    mount), and that mount."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    target = PurePosixPath(path)
    best: Obj | None = None
    for mount in ctr["volumeMounts"]:
        mount_path = PurePosixPath(mount["mountPath"])
        if (target == mount_path or mount_path in target.parents) and (
            best is None or len(mount_path.parts) > len(PurePosixPath(best["mountPath"]).parts)
        ):
            best = mount
    assert best is not None, f"{path} is not under any mount of {ctr['name']}"
    volume = volumes[best["name"]]
    assert "hostPath" in volume, f"{path} is mounted from {volume}, not from the host"
    rest = target.relative_to(best["mountPath"])
    return str(PurePosixPath(volume["hostPath"]["path"]) / rest), best
