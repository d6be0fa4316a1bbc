"""kubectl against the emulator: apply, get, annotate, delete, get --watch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from multusd.kubesim import KubeSim

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
    kubesim: KubeSim, kubeconfig: Path, kubectl: Kubectl, kubectl_bin: Any
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
