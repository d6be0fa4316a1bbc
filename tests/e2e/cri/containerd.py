"""A private containerd (1.6, built-in CRI plugin, runc) for the tests: config, start, teardown.

Why a real runtime: under the kubelet it is containerd, not a test, that execs the shim. It
reads the daemon's generated ``00-multus.conf`` from its CNI ``conf_dir`` (and reloads it on its
own when the file changes), creates the pod's network namespace, sets the CNI environment, runs
its own loopback plugin beside our network, caches results in libcni's cache, and calls DEL
twice per sandbox. Only a real containerd shows that all of that works with us.

Everything containerd owns lives under one temp dir (``base``): its root and state, its
sockets, the runc state (``Root`` of the runc options), the pod network namespaces
(``netns_mounts_under_state_dir``), its ``/opt`` plugin dir, the CNI ``conf_dir`` and
``bin_dir``. Three things are shared with the host and cannot be moved: the runc shims' sockets
in ``/run/containerd/s`` (the shim hard-codes it), libcni's result cache in
``/var/lib/cni/results`` (containerd gives go-cni no cache dir), and the cgroups runc creates.
Each sandbox's entries there go away when the sandbox is removed; :meth:`Containerd.stop`
removes what a failed test left behind.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from tests.e2e.cri import criapi
from tests.e2e.cri.image import IMAGE

NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace
CNI_RESULTS = Path("/var/lib/cni/results")  # libcni's default cache: containerd's, not ours
SHIM_SOCKETS = Path("/run/containerd/s")  # where the runc shim puts its sockets, always
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
    sandbox_ids: set[str] = field(default_factory=set)  # every sandbox a test started
    made_run_dir: bool = False  # /run/containerd did not exist before us

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
    def state(self) -> Path:
        return self.base / "state"

    @property
    def netns_dir(self) -> Path:
        return self.state / "io.containerd.grpc.v1.cri" / "netns"

    @property
    def runc_root(self) -> Path:
        return self.state / "runc"

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
        runc's state under ``base`` instead of ``/var/run/netns`` and ``/run/containerd/runc``.
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
  netns_mounts_under_state_dir = true
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
  bin_dir = "{self.bin_dir}"
  conf_dir = "{self.conf_dir}"
  max_conf_num = 1
"""

    # ----------------------------------------------------------------------------------------
    # start-up

    def start(self, timeout: float = 60) -> None:
        """Start containerd and wait until its CRI service answers ``Version``."""
        for directory in (self.conf_dir, self.bin_dir, self.state):
            directory.mkdir(parents=True, exist_ok=True)
        self.made_run_dir = not SHIM_SOCKETS.parent.exists()
        config = self.base / "config.toml"
        config.write_text(self.config_toml())
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                ["containerd", "--config", str(config), "--log-level", "debug"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # a ^C of the test run must not reach it first
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"containerd exited {self.proc.returncode}:\n{self.log()}")
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
            return

    def import_image(self, tar: Path, timeout: float = 60) -> None:
        """``ctr images import`` into the CRI namespace, then wait until the CRI plugin (which
        learns of it from an event) knows the image, so no sandbox triggers a pull."""
        subprocess.run(
            ["ctr", "--address", self.socket, "-n", NAMESPACE, "images", "import",
             "--snapshotter", "native", "--base-name", IMAGE.rsplit(":", 1)[0], str(tar)],
            check=True, capture_output=True, timeout=timeout,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        request = criapi.image_status_request(IMAGE)
        while True:
            reply = criapi.call_sync(
                self.socket, "ImageStatus", request, 5, service=criapi.IMAGE_SERVICE
            )
            if criapi.decode_image_status(reply):
                return
            assert time.monotonic() < deadline, f"CRI never saw {IMAGE}:\n{self.log()}"
            time.sleep(0.1)

    # ----------------------------------------------------------------------------------------
    # teardown

    def stop(self) -> list[str]:
        """Remove every sandbox, stop containerd, kill its shims, undo its mounts, delete
        ``base``. Returns what had to be cleaned up by force (empty when the tests cleaned
        up after themselves)."""
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
        leftovers += self._unmount_all()
        leftovers += self._remove_cni_results()
        shutil.rmtree(self.base, ignore_errors=True)
        if self.made_run_dir:  # only empty directories: a host containerd may have come since
            for directory in (SHIM_SOCKETS, SHIM_SOCKETS.parent):
                with contextlib.suppress(OSError):
                    directory.rmdir()
        return leftovers

    def _remove_sandboxes(self) -> list[str]:
        found: list[str] = []
        try:
            sandboxes = criapi.decode_list(criapi.call_sync(self.socket, "ListPodSandbox", b""))
        except grpc.RpcError as exc:
            return [f"ListPodSandbox failed: {criapi.rpc_error(exc)}"]
        for sandbox in sandboxes:
            found.append(f"sandbox {sandbox.id} ({sandbox.metadata.name})")
            self.sandbox_ids.add(sandbox.id)
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

    def _unmount_all(self) -> list[str]:
        """Detach every mount under ``base`` (rootfs binds, /dev/shm, network namespaces),
        deepest first, so removing the directory cannot fail on or descend into one."""
        found: list[str] = []
        for mount_point in sorted(_mounts_under(self.base), key=len, reverse=True):
            found.append(f"mount {mount_point}")
            subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)
        return found

    def _remove_cni_results(self) -> list[str]:
        """libcni cache entries (``<network>-<sandbox id>-<ifname>``) of our sandboxes."""
        if not self.sandbox_ids or not CNI_RESULTS.is_dir():
            return []
        found: list[str] = []
        for entry in CNI_RESULTS.iterdir():
            if any(f"-{sandbox_id}-" in entry.name for sandbox_id in self.sandbox_ids):
                found.append(f"cni result {entry}")
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
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
