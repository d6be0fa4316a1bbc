"""The restart note: a generated ``00-multus.conf`` kept for the next daemon says so.

With ``keepConfigOnExit`` the file outlives the daemon. So that shims can tell "a daemon is
restarting" from "multusd was uninstalled", shutdown leaves a note beside the socket
(``cni_shim.readiness.RestartNote``) before the socket goes away: the shims' DELs wait for (or
are retried against) the replacement while the restart window is open, and take the file away
once it has closed without one, so an uninstall gives the node back to its cluster network
(docs/operations.md, "Rolling restarts and uninstall"). The note names the file as the
container runtime sees it (:func:`runtime_views`) and pins it (device, inode, digest), so a
shim never removes a file that is not the one the note is about.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
import time
from pathlib import Path

from cni_shim.readiness import RESTART_WINDOW, RestartNote
from multusd.fsutil import atomic_write

log = logging.getLogger(__name__)


def write_restart_note(note_path: Path, socket_path: Path, kept: Path) -> bool:
    """Leave the note for ``kept`` (the generated file left for the next daemon) at
    ``note_path``; ``True`` if it was written.

    Only a daemon that serves on the socket writes it: with no socket there is no daemon to
    wait for. A failed write is logged: the shims then behave as after an uninstall.
    """
    if not socket_path.exists():
        return False
    try:
        data = kept.read_bytes()
        st = os.stat(kept)
        stopped = time.time()
        note = RestartNote(
            stopped=stopped,
            until=stopped + RESTART_WINDOW,
            paths=runtime_views(kept),
            identity=(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        atomic_write(note_path, note.encode(), mode=0o600, dir_mode=0o700)
    except OSError as exc:
        log.error("failed to leave a restart note in %s: %s", note_path, exc)
        return False
    log.info(
        "keeping %s for the next daemon; DELs wait for it, or are retried, for %.0f s",
        kept,
        RESTART_WINDOW,
    )
    return True


_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")


def runtime_views(path: Path) -> list[str]:
    """The paths under which the container runtime, on the host, may see ``path``: as this
    process sees it (a daemon on the host), and as the path inside its filesystem (from
    ``/proc/self/mountinfo``), which is the host's path whenever the host has that filesystem
    at ``/``: the DaemonSet's ``/host/etc/cni/net.d`` is the host's ``/etc/cni/net.d``. The
    note's reader checks which one, if any, is the very file (device, inode, digest)."""
    real = os.path.realpath(path)
    views = [real]
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return views
    best: tuple[str, str] | None = None
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5:
            continue
        root, point = (_MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m[1], 8)), f) for f in fields[3:5])
        if (real == point or real.startswith(point.rstrip("/") + "/")) and (
            best is None or len(point) >= len(best[1])
        ):
            best = (root, point)  # the longest covering mount point; the last one stacked on it
    if best is not None:
        root, point = best
        inside = posixpath.normpath(posixpath.join(root, posixpath.relpath(real, point)))
        if inside not in views:
            views.append(inside)
    return views
