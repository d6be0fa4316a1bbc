"""The deployment manifests: valid for the API server, consistent with the daemon they run.

A misspelt field or a mount that misses the socket directory would only show on a real
cluster; here they fail in a second. Kubernetes objects are checked against the JSON schemas
kubernetes-validate ships (strict: unknown fields are errors), NetworkAttachmentDefinitions
against the CRD's own schema, and the examples are applied to the API emulator with kubectl.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cni_shim.shim import DEFAULT_SOCKET_DIR as SHIM_SOCKET_DIR
from multusd.config.daemon import DEFAULT_CONFIG_PATH, DaemonConfig, parse_daemon_config
from multusd.k8s.nads import NADS
from multusd.kubesim import KubeSim
from tests.kubesim.conftest import KubectlBinary
from tests.manifests import helpers
from tests.manifests.helpers import (
    BASE,
    DEPLOYED,
    EXAMPLES,
    K8S_VERSIONS,
    MANIFESTS,
    MULTUSD,
    NAD_KIND,
    ROOT,
    Obj,
    load,
)

Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]


def all_files() -> list[Path]:
    return [BASE / name for name in DEPLOYED] + sorted(EXAMPLES.glob("*.yaml"))


def find(kind: str, name: str) -> Obj:
    for path in all_files():
        for doc in load(path):
            if doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
    raise AssertionError(f"no {kind} {name} in the manifests")


def daemon_config() -> DaemonConfig:
    data = find("ConfigMap", "multus-daemon-config")["data"]["daemon-config.json"]
    config, _raw = parse_daemon_config(data.encode(), "configmap.yaml")
    return config


def pod_spec() -> Obj:
    spec: Obj = find("DaemonSet", "kube-multus-ds")["spec"]["template"]["spec"]
    return spec


def container(name: str, *, init: bool = False) -> Obj:
    items = pod_spec()["initContainers" if init else "containers"]
    return next(c for c in items if c["name"] == name)


def host_path(ctr: Obj, path: str) -> tuple[str, Obj]:
    """The host path behind ``path`` in ``ctr`` (longest covering mount), and that mount."""
    return helpers.host_path(pod_spec(), ctr, path)


# --- schemas -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schema(version: str) -> None:
    checked = []
    for path in all_files():
        for doc in load(path):
            if (doc["apiVersion"], doc["kind"]) == NAD_KIND:
                continue  # a custom resource: checked against the CRD below
            kubernetes_validate.validate(doc, version, strict=True)
            checked.append(doc["kind"])
    assert sorted(checked) == sorted(
        ["CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
         "ConfigMap", "DaemonSet", "Pod"]
    )  # fmt: skip


def test_strict_validation_rejects_a_misspelt_field() -> None:
    """The check above is worth something: an unknown field fails it."""
    daemonset = find("DaemonSet", "kube-multus-ds")
    daemonset["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, K8S_VERSIONS[-1], strict=True)


def nad_schema() -> Obj:
    crd = find("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io")
    (version,) = crd["spec"]["versions"]
    schema: Obj = version["schema"]["openAPIV3Schema"]
    return schema


def test_example_nads_validate_against_the_crd_schema() -> None:
    validator = jsonschema.Draft7Validator(nad_schema())
    nads = [doc for path in all_files() for doc in load(path)
            if (doc["apiVersion"], doc["kind"]) == NAD_KIND]  # fmt: skip
    assert {nad["metadata"]["name"] for nad in nads} == {"bridge-conf", "macvlan-conf"}
    for nad in nads:
        validator.validate(nad)
        json.loads(nad["spec"]["config"])  # the CNI config inside is JSON too
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**nads[0], "spec": {"config": {"type": "bridge"}}})


def test_crd_is_the_one_the_daemon_reads() -> None:
    """The URL the daemon lists and gets NADs at is built from the group, version and plural."""
    crd = find("CustomResourceDefinition", "network-attachment-definitions.k8s.cni.cncf.io")
    spec = crd["spec"]
    (version,) = spec["versions"]
    assert (NADS.group, NADS.version, NADS.plural) == (
        spec["group"],
        version["name"],
        spec["names"]["plural"],
    )
    assert NADS.path == f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == NAD_KIND[1]
    assert set(spec["names"]["shortNames"]) == {"nad", "net-attach-def"}
    assert (version["served"], version["storage"]) == (True, True)
    assert nad_schema()["properties"]["spec"]["properties"]["config"]["type"] == "string"


def test_kustomization_lists_every_deployed_manifest() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert kustomization["resources"] == list(DEPLOYED)
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(DEPLOYED)
    # `kubectl apply -k manifests/` is the base, nothing more (manifests/kind is opt-in).
    top = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert set(top) == {"apiVersion", "kind", "resources"}
    assert top["resources"] == ["base"]
    assert [p.name for p in MANIFESTS.glob("*.yaml")] == ["kustomization.yaml"]


# --- consistency with the daemon ---------------------------------------------------------------


def test_configmap_parses_with_the_daemons_parser() -> None:
    config = daemon_config()
    assert config.is_auto
    assert (config.chroot_dir, config.cni_version) == ("/hostroot", "0.3.1")
    assert (config.log_level, config.log_to_stderr) == ("verbose", True)
    assert config.cni_config_dir == config.multus_autoconfig_dir == "/host/etc/cni/net.d"
    assert config.socket_dir == "/host/run/multus/"
    assert config.extra == {}  # no misspelt key slipped through as an unknown one


def test_daemon_reads_the_mounted_configmap() -> None:
    daemon = container("kube-multus")
    assert daemon["command"] == [MULTUSD, "--config", DEFAULT_CONFIG_PATH]
    config_dir = str(PurePosixPath(DEFAULT_CONFIG_PATH).parent)
    mount = next(m for m in daemon["volumeMounts"] if m["mountPath"] == config_dir)
    assert mount["readOnly"] is True
    volume = next(v for v in pod_spec()["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "multus-daemon-config"
    assert volume["configMap"]["items"] == [
        {"key": "daemon-config.json", "path": PurePosixPath(DEFAULT_CONFIG_PATH).name}
    ]


def test_daemon_paths_reach_the_host_where_the_host_side_expects_them() -> None:
    config = daemon_config()
    daemon = container("kube-multus")
    # The shim runs on the host and finds the socket at its default daemonSocketDir.
    assert host_path(daemon, config.socket_dir)[0] == SHIM_SOCKET_DIR.rstrip("/")
    # The runtime reads 00-multus.conf, and the primary config lives, in the host's conf dir.
    assert host_path(daemon, config.cni_config_dir)[0] == "/etc/cni/net.d"
    assert host_path(daemon, config.multus_autoconfig_dir)[0] == "/etc/cni/net.d"
    # Delegates run chrooted into the host's root, read-only propagation of new host mounts.
    chroot, mount = host_path(daemon, config.chroot_dir)
    assert (chroot, mount.get("mountPropagation")) == ("/", "HostToContainer")
    # binDir is searched by path, both in the container and (chrooted) on the host.
    assert host_path(daemon, config.bin_dir)[0] == config.bin_dir
    # The delegate cache, the confDir networks and the device information survive restarts.
    assert host_path(daemon, config.cni_dir)[0] == config.cni_dir
    assert host_path(daemon, config.conf_dir)[0] == config.conf_dir
    assert host_path(daemon, "/run/k8s.cni.cncf.io")[0] == "/run/k8s.cni.cncf.io"
    for kubelet_file in (config.kubelet_pod_resources_socket, config.device_checkpoint_file):
        path, mount = host_path(daemon, kubelet_file)
        assert (path, mount.get("mountPropagation")) == (kubelet_file, "HostToContainer")
    # Network namespaces the runtime creates after the daemon started must be visible in it.
    # (The runtime may say /var/run/netns/...: /var/run is a symlink to /run, there and here.)
    netns, mount = host_path(daemon, "/run/netns/cni-1234")
    assert (netns, mount.get("mountPropagation")) == ("/run/netns/cni-1234", "HostToContainer")


def test_init_container_installs_the_shim_into_the_daemons_bin_dir() -> None:
    init = container("install-multus-shim", init=True)
    assert init["command"][:3] == [MULTUSD, "install-shim", "--bundle"]  # hosts without Python
    dest = init["command"][init["command"].index("--dest") + 1]
    host_dir = init["command"][init["command"].index("--host-dir") + 1]
    assert host_path(init, dest)[0] == host_dir == daemon_config().bin_dir == "/opt/cni/bin"
    assert init["image"] == container("kube-multus")["image"]


def test_node_name_comes_from_the_downward_api() -> None:
    env = {e["name"]: e for e in container("kube-multus")["env"]}
    assert env["MULTUS_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_probes_are_the_kubelets_http_requests_to_the_health_port() -> None:
    daemon = container("kube-multus")
    port = daemon_config().health_port
    assert port is not None
    expected = {"host": "127.0.0.1", "port": port}
    assert daemon["livenessProbe"]["httpGet"] == {**expected, "path": "/healthz"}
    assert daemon["readinessProbe"]["httpGet"] == {**expected, "path": "/readyz"}
    assert daemon["startupProbe"]["httpGet"] == daemon["livenessProbe"]["httpGet"]
    # Start-up may wait 45 s (readiness indicator) + 120 s (primary config) + 20 s (caches).
    startup = daemon["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 45 + 120 + 20
    # 127.0.0.1 is the node's loopback only because the pod shares the node's network.
    assert find("DaemonSet", "kube-multus-ds")["spec"]["template"]["spec"]["hostNetwork"] is True


def test_resources_are_the_measured_limit_which_the_measurements_hold() -> None:
    """requests = limits, set from docs/performance.md: the idle daemon fits the limit, and
    every 200-ADD burst of ours published at that limit had no OOM kill and no failed ADD."""
    daemon = container("kube-multus")
    resources = daemon["resources"]
    limit = resources["limits"]["memory"]
    assert resources == {"requests": {"cpu": "100m", "memory": limit}, "limits": {"memory": limit}}
    assert limit.endswith("Mi")
    limit_mib = int(limit.removesuffix("Mi"))
    performance = (ROOT / "docs" / "performance.md").read_text()
    block = performance.split("<!-- bench:memory -->")[1].split("<!-- /bench:memory -->")[0]
    measured = [float(m) for m in re.findall(r"\|\s*([\d.]+)\s*\|\s*$", block, re.MULTILINE)]
    assert measured, "no daemon RSS in docs/performance.md"
    assert max(measured) <= limit_mib  # the limit holds the idle daemon (probes are no processes)
    bursts = performance.split("<!-- bench:memory_limit -->")[1].split("<!-- /bench:memory_limit")[
        0
    ]
    assert f"limit {limit_mib} MiB" in " ".join(bursts.split()), "no run of ours at the limit"
    ours = [row for row in bursts.splitlines() if row.startswith("| ours | 200 |")]
    assert ours, f"no 200-ADD burst of ours under {limit} in docs/performance.md"
    # No OOM kill and no failed ADD in any of them: the limit holds the bursts too.
    cells = [[cell.strip() for cell in row.split("|")] for row in ours]
    assert all(c[3] == "0" and c[5] == "0/200" for c in cells), ours  # OOM kills, failed ADDs


def test_runs_privileged_on_every_node_as_upstream_thick() -> None:
    daemonset = find("DaemonSet", "kube-multus-ds")
    assert daemonset["metadata"]["namespace"] == "kube-system"
    assert daemonset["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    spec = pod_spec()
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["terminationGracePeriodSeconds"] == 30
    assert {"operator": "Exists"} in spec["tolerations"]
    assert container("kube-multus")["securityContext"] == {"privileged": True}
    assert spec["serviceAccountName"] == "multus"


# --- RBAC --------------------------------------------------------------------------------------

# (API group, resource, verb) for every call multusd makes; nothing else is granted.
DAEMON_CALLS = {
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "watch"),
    ("", "pods/status", "patch"),
    ("k8s.cni.cncf.io", "network-attachment-definitions", "get"),
    ("k8s.cni.cncf.io", "network-attachment-definitions", "list"),
    ("k8s.cni.cncf.io", "network-attachment-definitions", "watch"),
    ("", "events", "create"),
    # DRA (multusd/k8s/dra.py) calls get on resourceclaims and list on resourceslices; the
    # role grants the resource.k8s.io reads exactly as upstream HEAD's does (its deployments/).
    *(
        ("resource.k8s.io", resource, verb)
        for resource in ("resourceclaims", "resourceclaims/status", "resourceslices")
        for verb in ("get", "list")
    ),
}


def test_cluster_role_grants_exactly_what_the_daemon_calls() -> None:
    role = find("ClusterRole", "multus")
    granted = set()
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}  # no resourceNames, no URLs
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {rule}"
        granted |= {
            (group, resource, verb)
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
    assert granted == DAEMON_CALLS


def test_binding_gives_the_role_to_the_daemons_service_account() -> None:
    account = find("ServiceAccount", "multus")
    binding = find("ClusterRoleBinding", "multus")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": find("ClusterRole", "multus")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "multus", "namespace": account["metadata"]["namespace"]}
    ]
    assert account["metadata"]["namespace"] == "kube-system"


# --- kubectl -----------------------------------------------------------------------------------


async def test_kustomize_builds_the_deployment(
    kubectl: Kubectl, kubeconfig: Path, kubectl_bin: KubectlBinary
) -> None:
    """`kubectl apply -k manifests/` sends the four base files' objects unchanged (built
    offline). It takes kubectl 1.21 or newer: 1.20's kustomize v2.0.3 (Debian 12's
    kubectl) refuses ``resources: [base]``, the directory that keeps the kind overlay out of
    a cycle (manifests/kustomization.yaml); docs/quickstart.md says so."""
    rc, out, err = await kubectl(kubeconfig, "kustomize", str(MANIFESTS))
    if not kubectl_bin.kustomize_loads_directories:
        assert rc != 0
        assert "'base' must be a file" in err, err
        return
    assert rc == 0, err
    built = sorted(yaml.safe_load_all(out), key=_identity)
    expected = sorted((d for n in DEPLOYED for d in load(BASE / n)), key=_identity)
    assert built == expected


def _identity(obj: Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


async def test_examples_apply_to_the_emulator_and_read_back(
    kubesim: KubeSim, kubeconfig: Path, kubectl: Kubectl, kubectl_bin: KubectlBinary
) -> None:
    rc, out, err = await kubectl(kubeconfig, "apply", *kubectl_bin.apply_flags, "-f", str(EXAMPLES))
    assert rc == 0, err
    assert "networkattachmentdefinition.k8s.cni.cncf.io/bridge-conf created" in out
    assert "networkattachmentdefinition.k8s.cni.cncf.io/macvlan-conf created" in out
    assert "pod/multus-example created" in out

    rc, out, err = await kubectl(kubeconfig, "get", "net-attach-def", "-o", "json")
    assert rc == 0, err
    stored = {n["metadata"]["name"]: n["spec"]["config"] for n in json.loads(out)["items"]}
    written = {
        doc["metadata"]["name"]: doc["spec"]["config"]
        for path in sorted(EXAMPLES.glob("*-nad.yaml"))
        for doc in load(path)
    }
    assert stored == written

    networks = "k8s.v1.cni.cncf.io/networks"
    jsonpath = "{.metadata.annotations." + networks.replace(".", r"\.") + "}"
    rc, out, err = await kubectl(
        kubeconfig, "get", "pod", "multus-example", "-o", f"jsonpath={jsonpath}"
    )
    assert rc == 0, err
    assert json.loads(out) == [
        {"name": "bridge-conf"},
        {"name": "macvlan-conf", "ips": ["10.88.20.10/24"]},
    ]
    assert json.loads(out) == json.loads(
        find("Pod", "multus-example")["metadata"]["annotations"][networks]
    )

    rc, out, err = await kubectl(kubeconfig, "apply", *kubectl_bin.apply_flags, "-f", str(EXAMPLES))
    assert rc == 0, err
    assert out.count("unchanged") == 3
