"""What the kubelet makes of a pod template: the CRI configs of its sandbox and containers.

Why: the image tests run the DaemonSet's containers as a node would, so the configs must come
from the manifests themselves (``kubectl kustomize``), not from a copy of them in a test: a
path, mount, command or argument changed in one place and not the other fails there. The
translation covers what ``manifests/`` uses and refuses anything else (a new kind of volume, an
env source, a security setting) so that nothing in the manifests is silently left out:

- ``hostNetwork``/``hostPID`` and ``privileged`` -> the sandbox's and containers' Linux
  security contexts; ``command``/``args`` as they are (the kubelet passes both to CRI);
- ``env`` values and the ``fieldRef``s the kubelet resolves (``spec.nodeName``,
  ``metadata.name``, ``metadata.namespace``), plus the API server's service variables every
  pod gets (``KUBERNETES_SERVICE_HOST``/``_PORT``);
- ``hostPath`` volumes at their paths as the runtime sees them, ``configMap`` volumes written
  into a directory of the test (the items' keys to their paths), the service account's token
  directory at ``/var/run/secrets/kubernetes.io/serviceaccount`` (read-only, as projected);
- ``mountPropagation`` None / HostToContainer / Bidirectional -> CRI's private / rslave / rshared.

Not translated (and not needed to start a container): resources, probes (the test sends the
probes' HTTP GETs itself, :func:`probes`), tolerations, priority and the update strategy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.cri.criapi import (
    PROPAGATION_BIDIRECTIONAL,
    PROPAGATION_HOST_TO_CONTAINER,
    PROPAGATION_PRIVATE,
    ContainerConfig,
    Mount,
    SandboxConfig,
)

Obj = dict[str, Any]
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PROPAGATION = {
    None: PROPAGATION_PRIVATE,
    "None": PROPAGATION_PRIVATE,
    "HostToContainer": PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": PROPAGATION_BIDIRECTIONAL,
}
CONTAINER_KEYS = {
    "name", "image", "command", "args", "env", "resources", "securityContext",
    "terminationMessagePolicy", "volumeMounts", "startupProbe", "livenessProbe",
    "readinessProbe",
}  # fmt: skip
"""The container fields this translation knows; any other fails :func:`pod_configs`."""
POD_KEYS = {
    "hostNetwork", "hostPID", "priorityClassName", "serviceAccountName",
    "terminationGracePeriodSeconds", "tolerations", "initContainers", "containers", "volumes",
}  # fmt: skip


@dataclass(frozen=True)
class Pod:
    """Who the pod is, and what the node provides to it."""

    name: str
    uid: str
    namespace: str
    node: str
    log_directory: Path
    volume_dir: Path  # configMap volumes are written here
    service_account: Path  # token, ca.crt, namespace
    api_env: Mapping[str, str]  # KUBERNETES_SERVICE_HOST / _PORT


@dataclass(frozen=True)
class PodConfigs:
    sandbox: SandboxConfig
    init_containers: list[ContainerConfig]
    containers: list[ContainerConfig]


def pod_configs(
    template: Obj, pod: Pod, config_maps: Mapping[str, Mapping[str, str]]
) -> PodConfigs:
    """The CRI configs for ``template`` (a pod template: ``metadata`` and ``spec``)."""
    spec = template["spec"]
    unknown = set(spec) - POD_KEYS
    assert not unknown, f"the pod spec has fields the test's kubelet does not know: {unknown}"
    everything = [*spec.get("initContainers", []), *spec["containers"]]
    privileged = any(c.get("securityContext", {}).get("privileged") for c in everything)
    sandbox = SandboxConfig(
        pod.name,
        pod.uid,
        pod.namespace,
        labels={
            **template["metadata"].get("labels", {}),
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.pod.uid": pod.uid,
        },
        log_directory=str(pod.log_directory),
        host_network=bool(spec.get("hostNetwork")),
        host_pid=bool(spec.get("hostPID")),
        privileged=privileged,
    )
    volumes = _volumes(spec.get("volumes", []), pod, config_maps)

    def container(ctr: Obj) -> ContainerConfig:
        unknown = set(ctr) - CONTAINER_KEYS
        assert not unknown, f"{ctr['name']}: fields the test's kubelet does not know: {unknown}"
        security = ctr.get("securityContext", {})
        assert set(security) <= {"privileged"}, f"{ctr['name']}: securityContext {security}"
        mounts = [_mount(m, volumes) for m in ctr.get("volumeMounts", [])]
        mounts.append(Mount(SERVICE_ACCOUNT_DIR, str(pod.service_account), readonly=True))
        return ContainerConfig(
            name=ctr["name"],
            image=ctr["image"],
            command=list(ctr.get("command", [])),
            args=list(ctr.get("args", [])),
            envs={**pod.api_env, **_env(ctr, pod)},
            mounts=mounts,
            labels={"io.kubernetes.container.name": ctr["name"]},
            log_path=f"{ctr['name']}/0.log",
            host_network=sandbox.host_network,
            host_pid=sandbox.host_pid,
            privileged=bool(security.get("privileged")),
        )

    return PodConfigs(
        sandbox,
        [container(c) for c in spec.get("initContainers", [])],
        [container(c) for c in spec["containers"]],
    )


def _env(ctr: Obj, pod: Pod) -> dict[str, str]:
    fields = {"spec.nodeName": pod.node, "metadata.name": pod.name}
    fields["metadata.namespace"] = pod.namespace
    env: dict[str, str] = {}
    for var in ctr.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        path = var["valueFrom"]["fieldRef"]["fieldPath"]
        assert path in fields, f"{ctr['name']}: env {var['name']} from {path}: not translated"
        env[var["name"]] = fields[path]
    return env


def _volumes(
    volumes: list[Obj], pod: Pod, config_maps: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """``{volume name: host path}``: a hostPath as it is, a configMap written out."""
    found: dict[str, str] = {}
    for volume in volumes:
        if "hostPath" in volume:
            found[volume["name"]] = volume["hostPath"]["path"]
        elif "configMap" in volume:
            source = volume["configMap"]
            data = config_maps[source["name"]]
            directory = pod.volume_dir / volume["name"]
            directory.mkdir(parents=True)
            items = source.get("items") or [{"key": key, "path": key} for key in data]
            for item in items:
                (directory / item["path"]).write_text(data[item["key"]])
            found[volume["name"]] = str(directory)
        else:
            raise AssertionError(f"volume {volume['name']}: a kind the test's kubelet lacks")
    return found


def _mount(mount: Obj, volumes: Mapping[str, str]) -> Mount:
    propagation = mount.get("mountPropagation")
    assert propagation in PROPAGATION, f"{mount['name']}: mountPropagation {propagation}"
    return Mount(
        mount["mountPath"],
        volumes[mount["name"]],
        readonly=bool(mount.get("readOnly")),
        propagation=PROPAGATION[propagation],
    )


def probes(ctr: Obj) -> dict[str, tuple[str, int, str]]:
    """``{startupProbe: (host, port, path), ...}``: the container's HTTP GET probes."""
    found: dict[str, tuple[str, int, str]] = {}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in ctr:
            get = ctr[kind]["httpGet"]
            found[kind] = (get["host"], int(get["port"]), get["path"])
    return found
