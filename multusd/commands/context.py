"""What every command receives: the request's CNI arguments and the daemon services it may use.

Commands take their world as arguments (no globals), so tests can build a ``Services`` with a
recording executor or a real one, and the server builds one per daemon.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from multusd.cni.api import CNI
from multusd.cni.invoke import PluginExecutor, plugin_deadline
from multusd.k8s.events import EventRecorder
from multusd.k8s.pods import PodLookup
from multusd.metrics import Recorder
from multusd.networks.nad_delegates import KubeNetworks
from multusd.networks.netconf import NetConf

_request_ids = itertools.count(1)


def next_request_id() -> str:
    return f"r{next(_request_ids):06d}"


@dataclass(frozen=True, slots=True)
class CmdArgs:
    """The CNI invocation as the runtime made it (skel's ``CmdArgs``)."""

    command: str
    container_id: str
    netns: str
    ifname: str
    args: str
    config: bytes
    """The Multus config after the server-config override."""
    request_id: str = field(default_factory=next_request_id)
    deadline: float | None = None
    """When the request must be over (event-loop time; ``None``: never). The server sets it
    from ``requestTimeoutSeconds`` and runs the command in :func:`request_scope`, so every
    plugin run on its behalf is killed when it passes; other waits may bound themselves by it."""

    def describe(self) -> str:
        """Upstream's error-context prefix: every non-CNI error of a pod command carries it."""
        return (
            f'ContainerID:"{self.container_id}" Netns:"{self.netns}" IfName:"{self.ifname}" '
            f'Args:"{self.args}" Path:"" ERRORED: '
        )


@contextlib.contextmanager
def request_scope(cmd: CmdArgs) -> Iterator[None]:
    """Run a command for ``cmd``: its plugins stop at ``cmd.deadline``, however deep they are
    started (a context variable of the request's task, see ``multusd.cni.invoke``)."""
    with plugin_deadline(cmd.deadline):
        yield


@dataclass(frozen=True, slots=True)
class Services:
    """Long-lived daemon collaborators shared by all requests."""

    executor: PluginExecutor
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    plugin_timeout: float | None = None
    pods: PodLookup | None = None
    """Kubernetes pod reads and status writes; ``None`` in the no-Kubernetes mode."""
    events: EventRecorder | None = None
    """Kubernetes events, posted in the background; ``None`` in the no-Kubernetes mode."""
    networks: KubeNetworks | None = None
    """NAD lookups and device maps for pod networks; ``None`` in the no-Kubernetes mode."""
    metrics: Recorder = field(default_factory=Recorder)
    """Phase timings for the Prometheus endpoint (a no-op without ``metricsPort``)."""

    def cni_for(self, netconf: NetConf) -> CNI:
        """A libcni handle for this request: ``binDir`` first, then the daemon's ``CNI_PATH``.

        The runtime's ``CNI_PATH`` is deliberately not used (upstream thick behaviour).
        """
        paths = [netconf.bin_dir]
        paths += [p for p in self.environ.get("CNI_PATH", "").split(":") if p]
        return CNI(
            paths=paths,
            executor=self.executor,
            cache_dir=netconf.cni_dir,
            exec_timeout=self.plugin_timeout,
            environ=self.environ,
        )
