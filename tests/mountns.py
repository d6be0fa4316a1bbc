"""Run a command in a mount namespace of its own in which some fixed host paths are private
directories under the caller's temp dir, so that a program that insists on writing there
(containerd's libcni cache in ``/var/lib/cni``, its shims' sockets in ``/run/containerd``)
writes nothing on the host.

Why not simply bind a temp dir onto the path: the path usually does not exist, and creating
the mount point would itself be a write on the host. So, for each requested path that does
not exist, the nearest ancestor that does (``/var/lib``, ``/run``) is covered *inside the
namespace* with a tmpfs, every original top-level entry of it is bound back (directories and
files bound, symlinks recreated), and the private directory is mounted at the requested path
inside the tmpfs. A requested path that exists is simply mounted over. Everything else
(``/tmp``, ``/usr``, ``/run/netns``...) is the host's. The mounts vanish with the namespace,
that is with its last process, crash or not; there is nothing to clean up on the host.

``unshare --mount --propagation slave``: mounts made on the host later (``ip netns add``
under ``/run/netns``) still reach the namespace, and none made inside reach the host.
``shared`` paths are the exception, for a program whose mounts the host must see (the pods'
network namespaces, bind-mounted by containerd, are opened by a daemon on the host): such a
path is made a shared mount on the host (:func:`make_shared_mount`), the namespace is made
with propagation unchanged, and the script turns every other mount of the namespace into a
slave before it mounts anything.

Limits: a top-level entry created in a covered directory on the host after the namespace was
made does not appear in it (files created inside a bound-back entry do), and ``/run/mount``
(libmount's record of *this* namespace's mounts) is never bound back.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NOT_BOUND_BACK = frozenset({Path("/run/mount")})
"""Entries of a covered directory left out: libmount keeps its ``utab`` there, which describes
the mounts of one namespace and must not be the host's."""
TMPFS_SIZE = "16m"
"""Each covering tmpfs holds only mount points and whatever a program writes next to them."""


@dataclass(frozen=True)
class MountNamespace:
    """The private paths of one namespace; :meth:`argv` runs a command in it.

    ``private`` maps a path as the command sees it to an existing directory (under the
    caller's temp dir) mounted there; ``read_only`` lists those of them mounted read-only.
    ``stage`` is a directory under the caller's temp dir where the script binds the original of
    each covered directory while it binds the entries back (unmounted again afterwards).
    ``shared``: mount points (see :func:`make_shared_mount`) that stay peers of the host's.
    ``shared_inside``: mount points made shared within the namespace alone, last (a runtime
    refuses ``Bidirectional`` and ``HostToContainer`` mounts of a source that is neither shared
    nor a slave; nothing propagates from the namespace to the host either way).
    """

    stage: Path
    private: Mapping[Path, Path]
    read_only: frozenset[Path] = frozenset()
    shared_inside: Sequence[Path] = ()
    shared: Sequence[Path] = ()
    not_bound_back: frozenset[Path] = NOT_BOUND_BACK
    _targets: dict[Path, Path] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        targets: dict[Path, Path] = {}
        for target, source in self.private.items():
            if not Path(target).is_absolute():
                raise ValueError(f"{target}: not an absolute path")
            if not Path(source).is_dir():
                raise FileNotFoundError(f"{source}: not a directory (to mount at {target})")
            targets[Path(os.path.realpath(target))] = Path(source)
        unknown = set(self.read_only) - set(self.private)
        if unknown:
            raise ValueError(f"read_only names paths that are not private: {sorted(unknown)}")
        object.__setattr__(self, "_targets", targets)

    def covered(self) -> list[Path]:
        """The directories covered by a tmpfs: for each private path missing on the host, its
        nearest existing ancestor (shallowest first, so a deeper cover sees the outer one)."""
        covers: set[Path] = set()
        for target in self._targets:
            if target.exists():
                continue
            ancestor = next(p for p in target.parents if p.exists())
            if ancestor == Path("/") or not ancestor.is_dir():
                raise ValueError(f"{target}: nearest existing ancestor {ancestor} not coverable")
            covers.add(ancestor)
        return sorted(covers, key=lambda p: (len(p.parts), p))

    def argv(self, command: Sequence[str]) -> list[str]:
        """``unshare ... sh -c SCRIPT``: the process keeps its pid through to ``command``."""
        propagation = "unchanged" if self.shared else "slave"
        script = self.script(command)
        return ["unshare", "--mount", "--propagation", propagation, "sh", "-c", script]

    def script(self, command: Sequence[str]) -> str:
        """The shell run inside the namespace: the mounts described above, then ``exec``."""
        q = shlex.quote
        lines = ["set -eu"]
        if self.shared:
            lines += _slave_all_but(self.shared)
        for index, directory in enumerate(self.covered()):
            stage = self.stage / f"{index}{str(directory).replace('/', '-')}"
            lines += [
                f"mkdir -p {q(str(stage))}",
                f"mount -n --rbind {q(str(directory))} {q(str(stage))}",
                f"mount -n -t tmpfs -o mode={_mode(directory)},size={TMPFS_SIZE} mountns "
                f"{q(str(directory))}",
            ]
            lines += _bind_back(directory, stage, self.not_bound_back)
            lines.append(f"umount -n -l {q(str(stage))}")
        read_only = {Path(os.path.realpath(p)) for p in self.read_only}
        for target in sorted(self._targets, key=lambda p: (len(p.parts), p)):
            option = " -o ro" if target in read_only else ""
            lines += [
                f"mkdir -p {q(str(target))}",
                f"mount -n --bind{option} {q(str(self._targets[target]))} {q(str(target))}",
            ]
        for point in self.shared_inside:
            lines.append(f"mount -n --make-shared {q(str(point))}")
        lines.append("exec " + " ".join(q(a) for a in command))
        return "\n".join(lines) + "\n"


def _slave_all_but(shared: Iterable[Path]) -> list[str]:
    """Every shared mount of the new namespace (a copy of the host's: peers where the host's
    were shared) becomes a slave, except the ``shared`` ones and what is under them.

    Two passes: a mount the host makes while the first runs is copied as a peer under a
    parent not yet converted; once its parent is a slave, what the host mounts there arrives
    as a slave, so the second pass leaves nothing behind. ``/proc/self/mountinfo`` escapes
    blanks and backslashes as ``\\ooo``, which ``printf %b`` decodes. A mount that cannot be
    reached by its path (another was mounted over it) cannot be mounted on either, so it is
    left as it is."""
    q = shlex.quote
    patterns = "|".join(f"{q(str(p))}|{q(str(p))}/*" for p in shared)
    return [
        "for pass in 1 2; do",
        "  grep ' shared:' /proc/self/mountinfo | cut -d ' ' -f 5 | while read -r point; do",
        '    point=$(printf "%b" "$point")',
        f'    case "$point" in {patterns}) continue ;; esac',
        '    mount -n --make-slave "$point" 2>/dev/null || :',
        "  done",
        "done",
    ]


def _bind_back(directory: Path, stage: Path, not_bound_back: frozenset[Path]) -> list[str]:
    q = shlex.quote
    lines: list[str] = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if Path(entry.path) in not_bound_back:
            continue
        src, dst = q(str(stage / entry.name)), q(entry.path)
        if entry.is_symlink():
            lines.append(f"ln -s {q(os.readlink(entry.path))} {dst}")
        elif entry.is_dir():
            lines += [f"mkdir {dst}", f"mount -n --rbind {src} {dst}"]
        else:  # files, sockets, fifos, devices: bound onto an empty file
            lines += [f": > {dst}", f"mount -n --bind {src} {dst}"]
    return lines


def _mode(directory: Path) -> str:
    return f"{stat.S_IMODE(directory.stat().st_mode):04o}"


# --------------------------------------------------------------------------------------------
# the host's side


def make_shared_mount(path: Path) -> None:
    """Bind ``path`` (a directory under the caller's temp dir) onto itself as a shared mount
    in a peer group of its own, so that mounts made under it in a namespace started with
    ``shared=[path]`` show up on the host too. The caller unmounts it (``umount -l``)."""
    p = str(path)
    for args in (["--bind", p, p], ["--make-private", p], ["--make-shared", p]):
        subprocess.run(["mount", "-n", *args], check=True, capture_output=True, timeout=30)


def namespace_of(pid: int) -> str:
    """The mount namespace of a process (``mnt:[inode]``)."""
    return os.readlink(f"/proc/{pid}/ns/mnt")


def processes_in(namespace: str) -> list[int]:
    """Every process in the mount namespace: as long as one lives, so do its mounts."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == namespace:
                    pids.append(int(entry.name))
            except OSError:  # gone, or a kernel thread
                continue
    return pids
