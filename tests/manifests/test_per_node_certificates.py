"""``manifests/per-node-certificates``: the base with each daemon talking to the API server as
its node (``perNodeCertificate``), and the ``multusd cert-approver`` that approves its requests.

Built with the machine's kubectl (and with the Python build, which must give the same objects),
validated for every Kubernetes minor, its daemon config read by the daemon's own parser, its
paths followed to the host, its approver's role held to the calls the approver makes, and the
base's objects shown to be changed by nothing else.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate
import pytest

from multusd.config.daemon import parse_daemon_config
from multusd.k8s.certs.approver import ORGANIZATION
from multusd.k8s.certs.config import per_node_settings
from multusd.k8s.certs.csr import KUBE_APISERVER_CLIENT
from tests.kubesim.conftest import KubectlBinary
from tests.manifests.helpers import (
    BASE,
    DEPLOYED,
    K8S_VERSIONS,
    MANIFESTS,
    MULTUSD,
    Obj,
    host_path,
    kustomize,
    load,
)
from tests.manifests.kustomize import build

OVERLAY = MANIFESTS / "per-node-certificates"
IMAGE = "ghcr.io/example/multusd:0.1.0"  # the base's: the overlay retags nothing
GROUP = ORGANIZATION[0]  # the certificate's O: the daemons' group, system:multus
APPROVER = "multus-cert-approver"
NEW_VOLUMES = {"host-etc-kubernetes", "host-var-lib-multus-certs"}
ADDED = {
    ("ClusterRoleBinding", "", "multus-per-node"),
    ("ClusterRole", "", "multus-per-node-certificates"),
    ("ClusterRoleBinding", "", "multus-per-node-certificates"),
    ("ServiceAccount", "kube-system", APPROVER),
    ("ClusterRole", "", APPROVER),
    ("ClusterRoleBinding", "", APPROVER),
    ("Deployment", "kube-system", APPROVER),
}
CERTS = "certificates.k8s.io"
# What multusd/k8s/certs/approver.py calls: its reflector lists and watches the requests, an
# approval is a PUT of the approval subresource (which the API server lets through only with
# `approve` on the signer), and events are posted with the core v1 API. `get` is the one verb
# granted beyond the calls, as every controller's role grants it (and upstream's).
APPROVER_CALLS = {
    (CERTS, "certificatesigningrequests", "", "get"),
    (CERTS, "certificatesigningrequests", "", "list"),
    (CERTS, "certificatesigningrequests", "", "watch"),
    (CERTS, "certificatesigningrequests/approval", "", "update"),
    (CERTS, "signers", KUBE_APISERVER_CLIENT, "approve"),
    ("", "events", "", "create"),
}
# A daemon's renewal (multusd/k8s/certs/csr.py): create the request, then list and watch it.
RENEWAL_CALLS = {
    (CERTS, "certificatesigningrequests", "", verb) for verb in ("create", "get", "list", "watch")
}


def keyed(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }


@pytest.fixture(scope="module")
def built(
    kustomize_bin: KubectlBinary | None, tmp_path_factory: pytest.TempPathFactory
) -> list[Obj]:
    return kustomize(kustomize_bin, OVERLAY, tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="module")
def objects(built: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return keyed(built)


def pod_spec(objects: dict[tuple[str, str, str], Obj], kind: str, name: str) -> Obj:
    spec: Obj = objects[(kind, "kube-system", name)]["spec"]["template"]["spec"]
    return spec


def daemon_json(objects: dict[tuple[str, str, str], Obj]) -> str:
    data: str = objects[("ConfigMap", "kube-system", "multus-daemon-config")]["data"][
        "daemon-config.json"
    ]
    return data


def granted(objects: dict[tuple[str, str, str], Obj], role: str) -> set[tuple[str, ...]]:
    found = set()
    for rule in objects[("ClusterRole", "", role)]["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "resourceNames", "verbs"}, rule
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[field], f"wildcard in {rule}"
        found |= {
            (group, resource, name, verb)
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for name in rule.get("resourceNames", [""])
            for verb in rule["verbs"]
        }
    return found


def bound(objects: dict[tuple[str, str, str], Obj], binding: str) -> tuple[str, list[Obj]]:
    obj = objects[("ClusterRoleBinding", "", binding)]
    assert obj["roleRef"]["kind"] == "ClusterRole"
    return obj["roleRef"]["name"], obj["subjects"]


def test_the_python_build_is_kubectls(kustomize_bin: KubectlBinary | None, tmp_path: Path) -> None:
    if kustomize_bin is None:
        pytest.skip("no kubectl 1.21+ here to compare with (Debian's 1.20 cannot build these)")
    assert keyed(build(OVERLAY)) == keyed(kustomize(kustomize_bin, OVERLAY, tmp_path))


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_built_objects_validate(built: list[Obj], version: str) -> None:
    for obj in built:
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_overlay_is_the_base_plus_only_these_changes(
    objects: dict[tuple[str, str, str], Obj],
) -> None:
    """Drop the new objects, the perNodeCertificate key and the two volumes: the base is back."""
    base = keyed([d for n in DEPLOYED for d in load(BASE / n)])
    undone = copy.deepcopy(objects)
    assert set(undone) - set(base) == ADDED
    for key in ADDED:
        del undone[key]
    configmap = undone[("ConfigMap", "kube-system", "multus-daemon-config")]
    config = json.loads(configmap["data"]["daemon-config.json"])
    base_json = daemon_json(base)
    assert set(config.pop("perNodeCertificate")) == {
        "enabled", "bootstrapKubeconfig", "certDir", "certDuration",
    }  # fmt: skip
    assert config == json.loads(base_json)
    configmap["data"]["daemon-config.json"] = base_json
    pod = pod_spec(undone, "DaemonSet", "kube-multus-ds")
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in NEW_VOLUMES]
    (daemon,) = pod["containers"]
    daemon["volumeMounts"] = [m for m in daemon["volumeMounts"] if m["name"] not in NEW_VOLUMES]
    assert undone == base


def test_the_daemon_config_enables_per_node_certificates(
    objects: dict[tuple[str, str, str], Obj],
) -> None:
    config, _raw = parse_daemon_config(daemon_json(objects).encode(), "daemon-config.yaml")
    pnc = config.per_node_certificate
    assert pnc is not None and pnc.enabled
    # The daemon's own start-up check (the node name comes from the downward API, as in base).
    settings = per_node_settings(pnc, {"MULTUS_NODE_NAME": "node-1"})
    assert settings is not None
    assert settings.bootstrap_kubeconfig == "/etc/kubernetes/kubelet.conf"  # kubeadm's
    assert settings.cert_dir == "/var/lib/multus/certs"
    assert settings.duration_ns == 10 * 60 * 10**9
    assert settings.common_name == "system:multus:node-1"


def test_the_daemon_sees_its_certificate_paths_where_the_host_has_them(
    objects: dict[tuple[str, str, str], Obj],
) -> None:
    config, _raw = parse_daemon_config(daemon_json(objects).encode(), "daemon-config.yaml")
    pnc = config.per_node_certificate
    assert pnc is not None
    pod = pod_spec(objects, "DaemonSet", "kube-multus-ds")
    (daemon,) = pod["containers"]
    assert {"name": "MULTUS_NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in daemon["env"]  # fmt: skip
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    # kubeadm's kubelet.conf, read-only, and the client certificate it names, which the base's
    # /var/lib/kubelet mount already gives at the same path.
    for path in (pnc.bootstrap_kubeconfig, "/var/lib/kubelet/pki/kubelet-client-current.pem"):
        assert host_path(pod, daemon, path)[0] == path
    _, mount = host_path(pod, daemon, pnc.bootstrap_kubeconfig)
    assert mount["readOnly"] is True
    assert volumes[mount["name"]] == {"path": "/etc/kubernetes", "type": "Directory"}
    # The certificates, written by the daemon, on the host so a new pod reuses a valid pair.
    assert host_path(pod, daemon, pnc.cert_dir)[0] == pnc.cert_dir
    _, mount = host_path(pod, daemon, pnc.cert_dir)
    assert not mount.get("readOnly")
    assert volumes[mount["name"]] == {"path": pnc.cert_dir, "type": "DirectoryOrCreate"}


def test_the_certificates_group_has_the_daemons_role_and_its_renewals(
    objects: dict[tuple[str, str, str], Obj],
) -> None:
    group = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}]
    assert bound(objects, "multus-per-node") == ("multus", group)
    role, subjects = bound(objects, "multus-per-node-certificates")
    assert subjects == group
    assert granted(objects, role) == RENEWAL_CALLS


def test_the_approver_runs_the_image_with_exactly_the_access_it_uses(
    objects: dict[tuple[str, str, str], Obj],
) -> None:
    deployment = objects[("Deployment", "kube-system", APPROVER)]
    assert deployment["spec"]["replicas"] == 1  # one controller: two would race on approvals
    pod = pod_spec(objects, "Deployment", APPROVER)
    (ctr,) = pod["containers"]
    assert ctr["command"] == [MULTUSD, "cert-approver"]
    assert ctr["image"] == IMAGE
    assert {"cpu", "memory"} <= set(ctr["resources"]["requests"])
    assert "memory" in ctr["resources"]["limits"]
    assert pod["serviceAccountName"] == APPROVER
    assert ("ServiceAccount", "kube-system", APPROVER) in objects
    role, subjects = bound(objects, APPROVER)
    assert subjects == [{"kind": "ServiceAccount", "name": APPROVER, "namespace": "kube-system"}]
    assert granted(objects, role) == APPROVER_CALLS
