"""A node for the image tests: containerd whose host paths are the DaemonSet's own.

The kubelet hands containerd a ``hostPath`` as it is written in the manifest, and runc binds
it from containerd's mount namespace. So the rig's containerd (:class:`~tests.e2e.cri.
containerd.Containerd`) runs in a mount namespace in which every host path the DaemonSet names
(``/etc/cni/net.d``, ``/opt/cni/bin``, ``/var/lib/cni/multus``, ``/var/lib/kubelet``,
``/run/netns``, ...) and the daemon's socket directory on the host (``/run/multus``) are
directories of the test: the manifests' paths are used verbatim, and nothing is written on the
real node. containerd itself uses the node's default CNI paths (``/etc/cni/net.d``,
``/opt/cni/bin``) and keeps the pods' network namespaces in ``/var/run/netns``, as on a kubelet
node; that directory is shared with the test (the host sees the namespaces in
:attr:`NodeContainerd.netns_dir`) and propagates into the daemon's container, which the
manifests mount with ``HostToContainer``. The host's ``/`` (the daemon's ``/hostroot``, where
delegate plugins run chrooted) is the namespace's root: the real one, with these paths in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests import mountns
from tests.e2e.cri.containerd import HOST_CNI_CACHE, HOST_RUN, Containerd

NOT_PRIVATE = (Path("/"), Path("/run"))
"""Host paths the DaemonSet mounts whole: the namespace's own (private entries inside)."""


@dataclass
class NodeContainerd(Containerd):
    """``host_paths``: the node paths that are test directories (under ``base/node``)."""

    host_paths: tuple[Path, ...] = field(default=())

    def node_path(self, path: str | Path) -> Path:
        """Where the test finds the node's ``path`` (one of, or under, ``host_paths``)."""
        return self.base / "node" / str(path).strip("/")

    @property
    def conf_dir(self) -> Path:
        return self.node_path("/etc/cni/net.d")

    @property
    def bin_dir(self) -> Path:
        return self.node_path("/opt/cni/bin")

    @property
    def seen_conf_dir(self) -> Path:
        return Path("/etc/cni/net.d")

    @property
    def seen_bin_dir(self) -> Path:
        return Path("/opt/cni/bin")

    netns_under_state = False

    @property
    def netns_dir(self) -> Path:
        return self.node_path("/run/netns")

    def private_paths(self) -> dict[Path, Path]:
        paths = {Path(p) for p in self.host_paths if Path(p) not in NOT_PRIVATE}
        paths |= {Path("/etc/cni/net.d"), Path("/opt/cni/bin"), Path("/run/netns")}
        private = {path: self.node_path(path) for path in paths}
        return {HOST_CNI_CACHE: self.cni_cache, HOST_RUN: self.run_dir, **private}

    def namespace(self) -> mountns.MountNamespace:
        private = self.private_paths()
        return mountns.MountNamespace(
            stage=self.base / "mountns",
            private=private,
            shared=[self.netns_dir],
            # The DaemonSet mounts / and the kubelet dir HostToContainer, the CNI bin dir
            # Bidirectional: a kubelet node's / is shared (systemd makes it so).
            shared_inside=[Path("/"), *sorted(private, key=lambda p: len(p.parts))],
        )

    def start(self, timeout: float = 60) -> None:
        for directory in self.private_paths().values():
            directory.mkdir(parents=True, exist_ok=True)
        super().start(timeout)
