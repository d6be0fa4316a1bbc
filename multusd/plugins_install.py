"""Put the CNI plugins a node lacks into its CNI bin dir, leaving every plugin it has alone.

Why: delegates run from the node's ``/opt/cni/bin``, and some nodes ship only a few plugins
(kind's node image has ``host-local``, ``ptp``, ``portmap`` and ``loopback``: see
docs/quickstart.md). The image carries Debian's reference plugins in ``/usr/lib/cni``, and an
opt-in init container (``manifests/kind/``) runs this to fill the gaps.

Why never replace: a plugin already on the node belongs to whoever put it there (the node
image, the cluster's own CNI, an operator) and may be newer than ours, or running right now.
So each plugin is published create-only: written to a temp file in the destination directory,
fsynced, then ``link``-ed to its name (``atomic_write(..., replace=False)``), which fails
rather than overwrite. A runtime never sees a half-written plugin, a plugin that appears
between the check and the link is kept, and a failure leaves no temp file behind.

Why the destination must exist: it is the host's CNI bin dir mounted into the container. If it
is missing, the mount is wrong, and creating the directory would hide that and install plugins
where no runtime looks.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from multusd.fsutil import atomic_write

INSTALLED = "installed"
KEPT = "kept existing"


class PluginsInstallError(Exception):
    """The install cannot start: a missing directory or an unknown plugin name."""


@dataclass(frozen=True)
class Outcome:
    """What happened to one plugin: ``INSTALLED`` or ``KEPT``, and its path in ``dest``."""

    name: str
    action: str
    path: Path

    def line(self) -> str:
        return f"{self.action} {self.path}"


def available_plugins(src: Path) -> list[str]:
    """The executable regular files in ``src``, by name: what can be installed."""
    names = []
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        info = entry.stat()  # follows symlinks: a linked plugin installs as its target
        if stat.S_ISREG(info.st_mode) and info.st_mode & 0o111:
            names.append(entry.name)
    return names


def check_dir(path: Path, role: str) -> None:
    """Refuse a ``role`` directory that is missing or not a directory, never creating it (see
    the module doc: a missing CNI bin dir is a wrong mount); ``install-shim`` checks its
    ``--dest`` with it too."""
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise PluginsInstallError(f"{role} directory {path} {what}")


def plan(src: Path, dest: Path, only: Sequence[str] | None = None) -> list[str]:
    """The plugin names to install, checked before anything is written: both directories
    exist, and every name in ``only`` is a plugin of ``src`` (default: all of them)."""
    check_dir(src, "source")
    check_dir(dest, "destination")
    available = available_plugins(src)
    names = available if only is None else list(dict.fromkeys(only))
    unknown = [name for name in names if name not in available]
    if unknown:
        raise PluginsInstallError(
            f"not in {src}: {', '.join(unknown)} (available: {', '.join(available) or 'none'})"
        )
    return names


def install_plugin(src: Path, dest: Path, name: str) -> Outcome:
    """Publish ``src/name`` as ``dest/name`` unless ``dest`` has that name already.

    Any existing name (file, symlink, even a dangling one) counts as present and is left
    untouched, so running it again changes nothing. Blocking (file I/O + fsync).
    """
    target = dest / name
    if os.path.lexists(target):
        return Outcome(name, KEPT, target)
    try:
        atomic_write(target, (src / name).read_bytes(), mode=0o755, dir_mode=0o755, replace=False)
    except FileExistsError:  # appeared since the check: someone else's, so it stays
        return Outcome(name, KEPT, target)
    return Outcome(name, INSTALLED, target)


def install_plugins(src: Path, dest: Path, only: Sequence[str] | None = None) -> list[Outcome]:
    """:func:`plan`, then :func:`install_plugin` for each name."""
    return [install_plugin(src, dest, name) for name in plan(src, dest, only)]
