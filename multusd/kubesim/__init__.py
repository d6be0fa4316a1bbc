"""A Kubernetes API emulator: the apiserver the demo, local runs, tests and benchmarks talk to.

It serves core/v1 pods, namespaces and events, events.k8s.io/v1 events and k8s.cni.cncf.io/v1
network-attachment-definitions over the real REST API (discovery, list/watch with bookmarks and
410s, get/create/update/patch/delete, Status errors), with injectable faults and request stats.
"""

from multusd.kubesim.faults import ErrorRule, HiddenObject, LatencyRule
from multusd.kubesim.server import KubeSim
from multusd.kubesim.state import Settings

__all__ = ["ErrorRule", "HiddenObject", "KubeSim", "LatencyRule", "Settings"]
