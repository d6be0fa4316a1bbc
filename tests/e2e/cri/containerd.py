"""A private containerd (1.6, built-in CRI plugin, runc) for the tests: config, start, teardown.

Why a real runtime: under the kubelet it is containerd, not a test, that execs the shim. It
reads the daemon's generated ``00-multus.conf`` from its CNI ``conf_dir`` (and reloads it on its
own when the file changes), creates the pod's network namespace, sets the CNI environment, runs
its own loopback plugin beside our network, caches results in libcni's cache, and calls DEL
twice per sandbox. Only a real containerd shows that all of that works with us.

Everything containerd owns lives under one temp dir (``base``): its root and state, its
sockets, the runc state (``Root`` of the runc options), the pod network namespaces
(``netns_mounts_under_state_dir``), its ``/opt`` plugin dir, the CNI ``conf_dir`` and
``bin_dir``. Two paths cannot be configured: the runc shims put their sockets in
``/run/containerd/s``, and containerd gives go-cni no cache dir, so libcni writes
``/var/lib/cni/results``. So containerd (and with it its shims and the CNI plugins it execs)
runs in a mount namespace of its own (:mod:`tests.mountns`) in which those two are
``base/run-containerd`` and ``base/var-lib-cni``; nothing is created on the host, and the
namespace's mounts (rootfs, ``/dev/shm`` of sandboxes) die with its last process. The one
exception is the pods' network namespaces: the daemon, on the host, opens them, so their
directory is a shared mount whose mounts reach the host. The cgroups runc creates are the
host's, and go with each container.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from tests import mountns
from tests.e2e.cri import criapi
from tests.e2e.cri.image import IMAGE

NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace
HOST_CNI_CACHE = Path("/var/lib/cni")  # libcni's default cache dir (results/ in it)
HOST_RUN = Path("/run/containerd")  # the runc shim puts its sockets in s/ there, always
HOST_PATHS = (HOST_CNI_CACHE, HOST_CNI_CACHE / "results", HOST_RUN, HOST_RUN / "s")
"""The host paths containerd would write without its namespace: the rig checks them."""
SETUP_HINT = "install containerd, runc and busybox-static: `bash .ci/setup --dev` (as root)"


def check_installed() -> None:
    """Fail (never skip: CI installs them) with the command that installs what is missing."""
    missing = [tool for tool in ("containerd", "ctr", "runc") if shutil.which(tool) is None]
    if not shutil.which("containerd-shim-runc-v2"):
        missing.append("containerd-shim-runc-v2")
    if not os.path.isfile("/bin/busybox"):
        missing.append("/bin/busybox")
    assert not missing, f"missing {', '.join(missing)}: {SETUP_HINT}"


@dataclass
class Containerd:
    """One containerd process and everything it created, under ``base``."""

    base: Path
    proc: subprocess.Popen[bytes] | None = None
    mount_namespace: str = ""  # containerd's (``mnt:[inode]``), once it serves

    @property
    def socket(self) -> str:
        return str(self.base / "containerd.sock")

    @property
    def conf_dir(self) -> Path:
        """The CRI plugin's CNI ``conf_dir``: the daemon's ``cniConfigDir``."""
        return self.base / "net.d"

    @property
    def bin_dir(self) -> Path:
        """The CRI plugin's single CNI ``bin_dir``: our shim and links to the real plugins."""
        return self.base / "bin"

    @property
    def seen_conf_dir(self) -> Path:
        """:attr:`conf_dir` as containerd sees it (in its mount namespace)."""
        return self.conf_dir

    @property
    def seen_bin_dir(self) -> Path:
        return self.bin_dir

    netns_under_state = True
    """The pods' network namespaces in :attr:`netns_dir` under containerd's state dir, rather
    than at ``/var/run/netns`` (of its mount namespace)."""

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def netns_dir(self) -> Path:
        return self.state / "io.containerd.grpc.v1.cri" / "netns"

    @property
    def runc_root(self) -> Path:
        return self.state / "runc"

    @property
    def cni_cache(self) -> Path:
        """What containerd sees as ``/var/lib/cni``: libcni's cache, ``results/`` in it."""
        return self.base / "var-lib-cni"

    @property
    def cni_results(self) -> Path:
        return self.cni_cache / "results"

    @property
    def run_dir(self) -> Path:
        """What containerd and its shims see as ``/run/containerd`` (the shims' ``s/``)."""
        return self.base / "run-containerd"

    def namespace(self) -> mountns.MountNamespace:
        """containerd's mount namespace: the two private paths, the pods' network namespaces
        shared with the host (the daemon opens them by the path containerd hands the shim)."""
        return mountns.MountNamespace(
            stage=self.base / "mountns",
            private={HOST_CNI_CACHE: self.cni_cache, HOST_RUN: self.run_dir},
            shared=[self.netns_dir],
        )

    @property
    def log_path(self) -> Path:
        return self.base / "containerd.log"

    def log(self, tail: int = 60) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-tail:])

    def config_toml(self) -> str:
        """containerd 1.6 config (version 2): CRI plugin keys as in ``containerd config default``.

        ``restrict_oom_score_adj``: the tests' root may lack CAP_SYS_RESOURCE, and the sandbox
        would otherwise ask for a lower OOM score than containerd's own.
        ``netns_mounts_under_state_dir`` and the runc ``Root`` keep the pods' namespaces and
        runc's state under ``base`` instead of ``/var/run/netns`` and ``/run/containerd/runc``
        (the latter would be private anyway, but runc is also run from the host at teardown).
        ``native`` snapshots need no overlay support under the temp dir. What containerd does
        with this config is in docs/development.md ("Tests with a real container runtime").
        """
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{self.base / "root"}"
state = "{self.state}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{self.socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{self.base / "opt"}"

{cri}]
  sandbox_image = "{IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = {str(self.netns_under_state).lower()}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true

{cri}.containerd]
  snapshotter = "native"
  default_runtime_name = "runc"

{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

{cri}.containerd.runtimes.runc.options]
  Root = "{self.runc_root}"
  SystemdCgroup = false

{cri}.cni]
  bin_dir = "{self.seen_bin_dir}"
  conf_dir = "{self.seen_conf_dir}"
  max_conf_num = 1
"""

    # ----------------------------------------------------------------------------------------
    # start-up

    def start(self, timeout: float = 60) -> None:
        """Start containerd in its mount namespace and wait until its CRI service answers
        ``Version``."""
        mine = (self.conf_dir, self.bin_dir, self.netns_dir, self.cni_cache, self.run_dir)
        for directory in mine:
            directory.mkdir(parents=True, exist_ok=True)
        mountns.make_shared_mount(self.netns_dir)
        config = self.base / "config.toml"
        config.write_text(self.config_toml())
        argv = ["containerd", "--config", str(config), "--log-level", "debug"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.namespace().argv(argv),  # unshare and sh exec: the pid is containerd's
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a ^C of the test run must not reach it first
            )
        deadline = time.monotonic() + timeout
        host_namespace = mountns.namespace_of(os.getpid())
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"containerd exited {self.proc.returncode}:\n{self.log()}")
            if not self.mount_namespace:  # known as soon as unshare made it: stop() needs it
                with contextlib.suppress(OSError):
                    namespace = mountns.namespace_of(self.proc.pid)
                    if namespace != host_namespace:
                        self.mount_namespace = namespace
            try:
                reply = criapi.call_sync(self.socket, "Version", criapi.version_request(), 5)
            except grpc.RpcError as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"containerd CRI not serving after {timeout}s "
                        f"({criapi.rpc_error(exc)}):\n{self.log()}"
                    ) from exc
                time.sleep(0.1)
                continue
            version = criapi.decode_version(reply)
            assert version.runtime_name == "containerd", version
            assert self.mount_namespace == mountns.namespace_of(self.proc.pid) != host_namespace
            return

    def import_image(self, tar: Path, image: str = IMAGE, timeout: float = 60) -> None:
        """``ctr images import`` of ``image`` (an OCI layout or docker archive holding it) into
        the CRI namespace, then wait until the CRI plugin (which learns of it from an event)
        knows the image, so no sandbox or container triggers a pull."""
        subprocess.run(
            ["ctr", "--address", self.socket, "-n", NAMESPACE, "images", "import",
             "--snapshotter", "native", "--base-name", image.rsplit(":", 1)[0], str(tar)],
            check=True, capture_output=True, timeout=timeout,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        request = criapi.image_status_request(image)
        while True:
            reply = criapi.call_sync(
                self.socket, "ImageStatus", request, 5, service=criapi.IMAGE_SERVICE
            )
            if criapi.decode_image_status(reply):
                return
            assert time.monotonic() < deadline, f"CRI never saw {image}:\n{self.log()}"
            time.sleep(0.1)

    # ----------------------------------------------------------------------------------------
    # teardown

    def stop(self) -> list[str]:
        """Remove every sandbox, stop containerd, kill its shims and anything else left in its
        mount namespace (the namespace and its mounts die with the last of them), undo the
        host's mounts under ``base``, delete ``base``. Returns what had to be cleaned up by
        force (empty when the tests cleaned up after themselves)."""
        leftovers: list[str] = []
        if self.proc is not None and self.proc.poll() is None:
            leftovers += self._remove_sandboxes()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        leftovers += self._kill_shims()
        leftovers += self._delete_runc_containers()
        leftovers += self._empty_namespace()
        leftovers += self._unmount_all()
        shutil.rmtree(self.base, ignore_errors=True)
        return leftovers

    def _remove_sandboxes(self) -> list[str]:
        found: list[str] = []
        try:
            sandboxes = criapi.decode_list(criapi.call_sync(self.socket, "ListPodSandbox", b""))
        except grpc.RpcError as exc:
            return [f"ListPodSandbox failed: {criapi.rpc_error(exc)}"]
        for sandbox in sandboxes:
            found.append(f"sandbox {sandbox.id} ({sandbox.metadata.name})")
            for method in ("StopPodSandbox", "RemovePodSandbox"):
                with contextlib.suppress(grpc.RpcError):
                    criapi.call_sync(self.socket, method, criapi.id_request(sandbox.id))
        return found

    def _kill_shims(self) -> list[str]:
        """SIGKILL each runc shim serving *our* containerd (its ``-address`` is our socket)."""
        found: list[str] = []
        for pid in _pids_with_args("-address", self.socket):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                found.append(f"shim pid {pid}")
        deadline = time.monotonic() + 10
        while _pids_with_args("-address", self.socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        return found

    def _delete_runc_containers(self) -> list[str]:
        """Kill and delete what runc still runs for us (a shim killed above leaves its pause)."""
        root = self.runc_root / NAMESPACE
        if not root.is_dir():
            return []
        found: list[str] = []
        for entry in root.iterdir():
            found.append(f"runc container {entry.name}")
            subprocess.run(
                ["runc", "--root", str(root), "delete", "--force", entry.name],
                capture_output=True, check=False, timeout=30,
            )  # fmt: skip
        return found

    def _empty_namespace(self, timeout: float = 10) -> list[str]:
        """SIGKILL whatever still runs in containerd's mount namespace (nothing should: the
        shims are gone), and wait until nothing does, so no process keeps its mounts alive."""
        if not self.mount_namespace:
            return []
        found: list[str] = []
        for pid in mountns.processes_in(self.mount_namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                found.append(f"process {pid} in containerd's mount namespace")
        deadline = time.monotonic() + timeout
        while alive := mountns.processes_in(self.mount_namespace):
            if time.monotonic() > deadline:
                return [*found, f"still in containerd's mount namespace: {alive}"]
            time.sleep(0.05)
        return found

    def _unmount_all(self) -> list[str]:
        """Detach every host mount under ``base``, deepest first, so removing the directory
        cannot fail on or descend into one. The only one expected is the shared mount of the
        network namespaces' directory (the rig's own): a namespace left in it is a leftover.
        Everything else containerd mounted (rootfs binds, /dev/shm) was in its namespace."""
        found: list[str] = []
        for mount_point in sorted(_mounts_under(self.base), key=len, reverse=True):
            if mount_point != str(self.netns_dir):
                found.append(f"mount {mount_point}")
            subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
        return found


def host_snapshot() -> dict[Path, frozenset[str] | None]:
    """The entries of each of :data:`HOST_PATHS` (``None``: missing)."""
    snapshot: dict[Path, frozenset[str] | None] = {}
    for path in HOST_PATHS:
        try:
            snapshot[path] = frozenset(os.listdir(path))
        except FileNotFoundError:
            snapshot[path] = None
    return snapshot


def host_writes(
    before: dict[Path, frozenset[str] | None], after: dict[Path, frozenset[str] | None]
) -> list[str]:
    """What appeared in :data:`HOST_PATHS` between two snapshots: a directory that was missing
    and exists now, or new entries (a missing directory counts as an empty one)."""
    found: list[str] = []
    for path in HOST_PATHS:
        was, now = before[path], after[path]
        if was is None and now is not None:
            found.append(f"{path} was created")
        found += [f"{path / name} appeared" for name in sorted((now or set()) - (was or set()))]
    return found


def _pids_with_args(flag: str, value: str) -> list[int]:
    """Processes whose argv has ``flag value`` (read from /proc; no pattern kill)."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (flag.encode(), value.encode()) in itertools.pairwise(argv):
            pids.append(int(entry.name))
    return pids


def _mounts_under(base: Path) -> list[str]:
    prefix = str(base).rstrip("/") + "/"
    points: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return points
