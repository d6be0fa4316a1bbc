"""kubectl against the emulator: apply, get, annotate, delete, get --watch, and the typed
commands that send protobuf (create namespace, debug --copy-to), read from the request log.

Each test runs with the newest and the oldest kubectl the machine has (``kubectl_bin``'s
parametrization, tests/kubesim/conftest.py): what differs between them is in
``KubectlBinary``'s properties."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from multusd.kubesim import KubeSim
from tests.kubesim.conftest import JSON, KubectlBinary

Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]

MANIFESTS = """\
apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: macvlan-conf
  namespace: demo
spec:
  config: '{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}'
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: demo
  labels: {app: web}
  annotations:
    k8s.v1.cni.cncf.io/networks: macvlan-conf
spec:
  nodeName: node1
  containers:
  - name: c
    image: busybox
"""


async def test_apply_get_annotate_delete(
    kubesim: KubeSim, kubeconfig: Path, kubectl: Kubectl, kubectl_bin: KubectlBinary
):
    manifest = kubeconfig.parent / "demo.yaml"
    apply = ["apply", *kubectl_bin.apply_flags, "-f", str(manifest)]
    manifest.write_text(MANIFESTS)

    rc, out, err = await kubectl(kubeconfig, *apply)
    assert rc == 0, err
    assert "namespace/demo created" in out
    assert "pod/web created" in out
    assert "networkattachmentdefinition.k8s.cni.cncf.io/macvlan-conf created" in out

    # Applying again is a no-op; changing a label goes through a strategic merge PATCH.
    rc, out, err = await kubectl(kubeconfig, *apply)
    assert rc == 0, err
    assert "pod/web unchanged" in out
    manifest.write_text(MANIFESTS.replace("app: web", "app: web2"))
    rc, out, err = await kubectl(kubeconfig, *apply)
    assert rc == 0, err
    assert "pod/web configured" in out
    assert kubesim.get("pods", "demo", "web")["metadata"]["labels"] == {"app": "web2"}
    assert kubesim.stats.count("patch", "pods") == 1

    rc, out, err = await kubectl(kubeconfig, "get", "pods", "-n", "demo")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["web", "0/1", "Pending", "0"]

    rc, out, err = await kubectl(kubeconfig, "get", "net-attach-def", "-n", "demo", "-o", "json")
    assert rc == 0, err
    nads = json.loads(out)
    assert [n["metadata"]["name"] for n in nads["items"]] == ["macvlan-conf"]

    rc, out, err = await kubectl(
        kubeconfig, "annotate", "pod", "web", "-n", "demo", "example.com/x=1"
    )
    assert rc == 0, err
    annotations = kubesim.get("pods", "demo", "web")["metadata"]["annotations"]
    assert annotations["example.com/x"] == "1"
    assert annotations["k8s.v1.cni.cncf.io/networks"] == "macvlan-conf"

    rc, out, err = await kubectl(kubeconfig, "delete", "pod", "web", "-n", "demo")
    assert rc == 0, err
    assert 'pod "web" deleted' in out
    rc, out, err = await kubectl(kubeconfig, "get", "pod", "web", "-n", "demo")
    assert rc == 1
    assert 'pods "web" not found' in err


async def test_get_watch_sees_changes_and_ends_on_timeout(
    kubesim: KubeSim, kubeconfig: Path, kubectl: Kubectl
):
    kubesim.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "spec": {}})

    async def change_later() -> None:
        while kubesim.stats.count("watch", "pods") == 0:
            await asyncio.sleep(0.05)
        kubesim.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}, "spec": {}})

    changer = asyncio.create_task(change_later())
    rc, out, err = await kubectl(kubeconfig, "get", "pods", "--watch", "--request-timeout=3s")
    await changer
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert names == ["a", "b"], (out, err)
    # The watch ended because of the client timeout, not because the server closed it.
    assert kubesim.stats.count("watch", "pods") == 1
    assert rc in (0, 1)


def _bodies(kubesim: KubeSim, since: int) -> list[tuple[str, str, str, str]]:
    """(method, path, request body type, response type) of the resource requests logged
    after the first ``since`` ones."""
    return [
        (r.method, r.path, r.body_type.split(";")[0], r.content_type.split(";")[0])
        for r in kubesim.stats.requests()[since:]
        if r.verb
    ]


POD_YAML = """\
apiVersion: v1
kind: Pod
metadata: {name: from-file, namespace: demo}
spec: {containers: [{name: c, image: busybox}]}
"""


async def test_imperative_commands_and_their_encodings(
    kubesim: KubeSim, kubeconfig: Path, kubectl: Kubectl, kubectl_bin: KubectlBinary
):
    """kubectl's imperative commands against the emulator, with the encoding each one really
    uses (read from the request log): since kubectl 1.32 the typed commands send protobuf
    bodies and ask for protobuf answers (before, JSON; 1.20's ``create namespace`` sends no
    Content-Type at all, which the API server reads as JSON); the rest send JSON."""
    typed = kubectl_bin.typed_media_type
    mark = len(kubesim.stats.requests())
    rc, out, err = await kubectl(kubeconfig, "create", "namespace", "demo")
    assert rc == 0, err
    assert out.strip() == "namespace/demo created"
    create_ns = ("POST", "/api/v1/namespaces", kubectl_bin.create_namespace_body_type, typed)
    assert create_ns in _bodies(kubesim, mark)
    namespace = kubesim.get("namespaces", "", "demo")
    assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": "demo"}
    assert namespace["spec"] == {"finalizers": ["kubernetes"]}
    assert namespace["status"] == {"phase": "Active"}
    assert set(namespace["metadata"]) == {
        "name", "uid", "resourceVersion", "creationTimestamp", "labels",
    }  # fmt: skip

    mark = len(kubesim.stats.requests())
    rc, out, err = await kubectl(
        kubeconfig, "run", "web", "-n", "demo", "--restart=Never", "--image=x"
    )
    assert rc == 0, err
    assert ("POST", "/api/v1/namespaces/demo/pods", JSON, JSON) in _bodies(kubesim, mark)
    web = kubesim.get("pods", "demo", "web")
    assert web["metadata"]["labels"] == {"run": "web"}
    assert web["spec"]["containers"][0]["image"] == "x"
    assert web["spec"]["restartPolicy"] == "Never"

    manifest = kubeconfig.parent / "pod.yaml"
    manifest.write_text(POD_YAML)
    mark = len(kubesim.stats.requests())
    rc, out, err = await kubectl(
        kubeconfig, "create", *kubectl_bin.apply_flags, "-f", str(manifest)
    )
    assert rc == 0, err
    assert out.strip() == "pod/from-file created"
    assert ("POST", "/api/v1/namespaces/demo/pods", JSON, JSON) in _bodies(kubesim, mark)

    for verb, change in (("label", "tier=front"), ("annotate", "example.com/x=1")):
        rc, out, err = await kubectl(kubeconfig, verb, "pod", "web", "-n", "demo", change)
        assert rc == 0, err
    meta = kubesim.get("pods", "demo", "web")["metadata"]
    assert meta["labels"] == {"run": "web", "tier": "front"}
    assert meta["annotations"] == {"example.com/x": "1"}

    rc, out, err = await kubectl(kubeconfig, "get", "pod", "web", "-n", "demo", "-o", "json")
    assert rc == 0, err
    assert json.loads(out)["metadata"]["labels"] == {"run": "web", "tier": "front"}
    rc, out, err = await kubectl(kubeconfig, "get", "ns", "demo", "-o", "yaml")
    assert rc == 0, err
    assert "kubernetes.io/metadata.name: demo" in out and "phase: Active" in out

    # describe and events read the pod and its events in protobuf (typed clients).
    kubesim.create({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "demo"},
        "involvedObject": {"kind": "Pod", "namespace": "demo", "name": "web",
                           "uid": web["metadata"]["uid"], "apiVersion": "v1"},
        "reason": "AddedInterface", "message": "Add eth0 [10.0.0.5/24] from cbr0",
        "type": "Normal", "count": 1, "source": {"component": "multus"},
        "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T10:00:00Z",
    })  # fmt: skip
    mark = len(kubesim.stats.requests())
    rc, out, err = await kubectl(kubeconfig, "describe", "pod", "web", "-n", "demo")
    assert rc == 0, err
    assert "AddedInterface" in out and "Add eth0 [10.0.0.5/24] from cbr0" in out
    seen = _bodies(kubesim, mark)
    assert ("GET", "/api/v1/namespaces/demo/pods/web", "", typed) in seen
    assert ("GET", "/api/v1/namespaces/demo/events", "", typed) in seen
    rc, out, err = await kubectl(kubeconfig, *kubectl_bin.events_command, "-n", "demo")
    assert rc == 0, err
    assert "AddedInterface" in out

    # debug --copy-to --replace: a protobuf pod create, then a protobuf DeleteOptions.
    mark = len(kubesim.stats.requests())
    rc, out, err = await kubectl(
        kubeconfig, "debug", "web", "-n", "demo", "--copy-to=web-debug", "--image=busybox",
        "--attach=false", "--replace",
    )  # fmt: skip
    assert rc == 0, err
    seen = _bodies(kubesim, mark)
    assert ("POST", "/api/v1/namespaces/demo/pods", typed, typed) in seen
    assert ("DELETE", "/api/v1/namespaces/demo/pods/web", typed, typed) in seen
    copy = kubesim.get("pods", "demo", "web-debug")
    images = [c["image"] for c in copy["spec"]["containers"]]
    assert images == ["x", "busybox"]
    assert copy["spec"]["restartPolicy"] == "Never"
    assert "hostNetwork" not in copy["spec"]  # Go's zero on the wire is not kept

    rc, out, err = await kubectl(kubeconfig, "delete", "pod", "web-debug", "-n", "demo")
    assert rc == 0, err
    assert 'pod "web-debug" deleted' in out
    rc, out, err = await kubectl(kubeconfig, "delete", "namespace", "demo")
    assert rc == 0, err
    assert 'namespace "demo" deleted' in out
    rc, out, err = await kubectl(kubeconfig, "get", "pods", "-n", "demo", "-o", "name")
    assert rc == 0, err
    assert out == ""
