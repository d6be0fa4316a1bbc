"""Keep ``<cniConfigDir>/00-multus.conf`` in step with the primary CNI config (auto mode).

The supervisor owns one :class:`ConfigManager` as an async context manager: it waits for the
primary at start-up (upstream's budget: 120 listings, 1 s apart, then exit 2), writes the file
once the server is ready, runs :meth:`ConfigManager.watch` as a task, and on exit the file is
removed (upstream) unless ``keepConfigOnExit`` says to leave it. A file left for the next daemon
comes with a restart note beside the socket (``cni_shim.readiness.RestartNote``), written
when shutdown begins, before the socket goes away: the shims' DELs wait for (or are retried
against) the replacement while the restart window is open, and take the file away once it has
closed without one, so an uninstall gives the node back to its cluster network
(docs/operations.md, "Rolling restarts and uninstall").

Where this differs from upstream (reference §4.5, §4.7), on purpose:

* Every write is atomic (temp + fsync + rename, mode 0644), and nothing is written when the
  primary cannot be read or decoded: the last good file stays. Upstream truncates in place and
  writes an *empty* file when a writer has the primary half-written.
* The watch is on the directory and survives it being removed or replaced (re-armed by inode);
  upstream's fsnotify watch dies silently. Batches are debounced by watchfiles; a periodic tick
  (``recheck_interval``) notices a dead watch and retries a generation that failed.
* The primary found at start-up is kept for the life of the process, as upstream does (a file
  that later sorts earlier never moves new pods to another network); a primary that disappears
  keeps the last good file until it is back. Only with the opt-in ``followPrimaryConfig`` is the
  primary re-chosen on every relevant change: a new lexically-earlier config takes over at once,
  and a primary still gone after ``primary_gone_grace`` is replaced by the next candidate (so a
  writer that deletes and re-creates its file does not flip pods for a moment).
* Our own file (``00-multus*``) and temp files never match the event filter, so our writes
  cannot trigger a regeneration loop; a generation that yields the bytes already on disk
  writes nothing.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import posixpath
import re
import time
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from watchfiles import Change, awatch

from cni_shim.readiness import RESTART_NOTE, RESTART_WINDOW, RestartNote
from multusd.config.daemon import DaemonConfig
from multusd.config.generate import (
    MULTUS_CONFIG_NAME,
    PrimaryConfigError,
    PrimaryListError,
    check_not_recursive,
    first_candidate,
    force_cni_version,
    generator_config,
    is_candidate,
    primary_path,
    read_primary,
    render,
    scan_for_primary,
)
from multusd.errors import EXIT_READINESS_LOST, EXIT_SERVER, StartupError
from multusd.fsutil import atomic_write, remove_if_exists

log = logging.getLogger(__name__)

DirId = tuple[int, int]

_WANTED = "a *.conf or *.conflist file not named 00-multus*"
"""What the start-up scan looks for (``generate.is_candidate``), in words for the errors."""


@dataclass(frozen=True, slots=True)
class ManagerSettings:
    """Timing of the config manager; the first two are upstream's start-up budget.

    ``step_ms``/``debounce_ms`` are watchfiles' batching (quiet time after the last change, and
    the longest a burst is grouped): long enough that a non-atomic writer's truncate-and-write
    lands in one batch, short enough that a new primary is picked up well within a second.
    """

    find_attempts: int = 120
    find_interval: float = 1.0
    step_ms: int = 50
    debounce_ms: int = 500
    recheck_interval: float = 1.0
    primary_gone_grace: float = 5.0

    def __post_init__(self) -> None:
        if self.find_attempts < 1:
            raise ValueError(f"find_attempts must be at least 1, got {self.find_attempts}")
        if self.find_interval < 0 or self.primary_gone_grace < 0:
            raise ValueError("find_interval and primary_gone_grace must not be negative")
        if self.recheck_interval <= 0 or self.step_ms <= 0 or self.debounce_ms <= 0:
            raise ValueError("recheck_interval, step_ms and debounce_ms must be positive")


class ConfigManager:
    """The generated multus config: found, written, kept current, removed (or kept) on exit.

    Order of use (the supervisor's): enter the context, :meth:`wait_for_primary` before
    serving, :meth:`write_config` once ``/readyz`` answers, then run :meth:`watch` as a task;
    cancel that task before the context exits.
    """

    def __init__(
        self,
        config: DaemonConfig,
        raw: dict[str, Any],
        *,
        settings: ManagerSettings | None = None,
        keep_config_on_exit: bool | None = None,
    ) -> None:
        self._conf = generator_config(raw)  # ConfigError (exit 1) on a bad generator key
        self._settings = settings or ManagerSettings()
        if keep_config_on_exit is None:
            keep_config_on_exit = config.keep_config_on_exit
        self._keep = keep_config_on_exit
        self._socket_path = Path(config.socket_path)
        self._note_path = self._socket_path.with_name(RESTART_NOTE)
        self._noted = False
        self._dir = self._conf.multus_autoconfig_dir
        self._fixed = self._conf.multus_master_cni
        self._follow = config.follow_primary_config and not self._fixed
        """Re-choose the primary on changes (opt-in); otherwise the name found first is kept."""
        self._name = self._fixed
        self.output_path = Path(primary_path(self._conf.cni_config_dir, MULTUS_CONFIG_NAME))
        self._last_good: bytes | None = None
        self._written = False
        self._pending = False
        self._gone_since: float | None = None
        self._last_error = ""

    @property
    def primary_path(self) -> str:
        """The primary config in use (``clusterNetwork`` of the generated file); "" before."""
        return primary_path(self._dir, self._name) if self._name else ""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._written:
            return  # never wrote it (or removed it): a file left by an earlier run is not ours
        if self._keep:
            log.info("keeping %s on exit (keepConfigOnExit)", self.output_path)
            return
        await self.remove_config()

    async def remove_config(self) -> None:
        """Delete the generated file now (shutdown, or the readiness indicator is gone), and
        the restart note that came with it: nothing is left for a next daemon.

        The watch task must be cancelled first, or a change in the directory would bring the
        file back.
        """
        log.info("removing %s", self.output_path)
        try:
            await asyncio.to_thread(remove_if_exists, self.output_path)
        except OSError as err:
            log.error("failed to remove %s: %s", self.output_path, err)
        self._written = False
        if self._noted:
            self._noted = False
            try:
                await asyncio.to_thread(remove_if_exists, self._note_path)
            except OSError as err:
                log.error("failed to remove %s: %s", self._note_path, err)

    def leave_restart_note(self) -> None:
        """Shutdown has begun and the file stays for the next daemon: say so beside the socket.

        Called when the watch ends (the supervisor cancels it first thing on SIGTERM), so the
        note is there before the socket goes away: no shim finds neither a daemon nor a note.
        Synchronous: it runs in a cancelled task, and writes one small file. Only a daemon that
        serves on the socket writes it: with no socket there is no daemon to wait for.
        """
        if not (self._keep and self._written) or self._noted:
            return
        if not self._socket_path.exists():
            return
        try:
            data = self.output_path.read_bytes()
            st = os.stat(self.output_path)
            stopped = time.time()
            note = RestartNote(
                stopped=stopped,
                until=stopped + RESTART_WINDOW,
                paths=runtime_views(self.output_path),
                identity=(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns),
                sha256=hashlib.sha256(data).hexdigest(),
            )
            atomic_write(self._note_path, note.encode(), mode=0o600, dir_mode=0o700)
        except OSError as exc:
            log.error("failed to leave a restart note in %s: %s", self._note_path, exc)
            return
        self._noted = True
        log.info(
            "keeping %s for the next daemon; DELs wait for it, or are retried, for %.0f s",
            self.output_path,
            RESTART_WINDOW,
        )

    # ----------------------------------------------------------------------------------------
    # start-up

    async def wait_for_primary(self) -> None:
        """Find and check the primary; ``StartupError`` (exit 2) if there is none or it is bad."""
        if not self._conf.cni_version:
            log.error(
                "the CNI version is a mandatory parameter when the "
                "'-multus-config-file=auto' option is used"
            )
        name = self._fixed or await self._find_primary()
        try:
            check_not_recursive(self._conf, name)
            self._name = name
            if self._conf.force_cni_version:
                await asyncio.to_thread(self._force_version, self.primary_path)
            try:
                primary = await asyncio.to_thread(
                    read_primary, self.primary_path, self._conf.cni_version
                )
            except PrimaryConfigError as exc:
                raise PrimaryConfigError(
                    "failed to load the primary CNI configuration as a multus delegate "
                    f"with error '{exc}'"
                ) from exc
            self._last_good = render(self._conf, primary)
        except PrimaryConfigError as exc:
            raise StartupError(str(exc), EXIT_READINESS_LOST) from exc
        log.info("primary CNI config: %s", self.primary_path)

    async def _find_primary(self) -> str:
        """The primary's file name: upstream's budget of listings, 1 s apart, then exit 2.

        The wait ends early only for a SIGTERM (the supervisor cancels it) or when there is
        nothing to wait for: with ``multusAutoconfigDir`` unset, upstream's listing of "" fails
        at once (exit 2, "open : no such file or directory"), and so do we, naming the key.
        """
        settings = self._settings
        if not self._dir:
            raise StartupError(
                "failed to find the cluster master CNI plugin: multusAutoconfigDir is not set "
                "(and multusMasterCNI neither): there is no directory to look for the primary "
                f"CNI config ({_WANTED}) in",
                EXIT_READINESS_LOST,
            )
        for attempt in range(settings.find_attempts):
            if attempt:
                await asyncio.sleep(settings.find_interval)
            try:
                name = await asyncio.to_thread(scan_for_primary, self._dir)
            except PrimaryListError as exc:
                # Upstream fails at once; a directory that does not exist *yet* is waited for
                # like an empty one (the primary's installer usually creates both).
                if exc.errno != errno.ENOENT:
                    raise StartupError(
                        f"failed to find the cluster master CNI plugin: {exc}", EXIT_READINESS_LOST
                    ) from exc
                name = None
            if name is not None:
                return name
            if attempt == 0:
                log.info("waiting for a primary CNI config in %s", self._dir)
        raise StartupError(
            "failed to find the cluster master CNI plugin: "
            f"could not find a plugin configuration in {self._dir} (looked "
            f"{settings.find_attempts} times, {settings.find_interval:g}s apart, for {_WANTED})",
            EXIT_READINESS_LOST,
        )

    def _force_version(self, path: str) -> None:
        """``forceCNIVersion``: rewrite the primary with our version (atomic, mode kept)."""
        absolute = os.path.abspath(path)
        try:
            data = Path(absolute).read_bytes()
            mode = os.stat(absolute).st_mode & 0o7777
        except OSError as exc:
            raise PrimaryConfigError(f"failed to read cni config {absolute}: {exc}") from exc
        rewritten = force_cni_version(path, data, self._conf.cni_version)
        try:
            atomic_write(absolute, rewritten, mode=mode)
        except OSError as exc:
            raise PrimaryConfigError(f"couldn't update cluster network config: {exc}") from exc

    async def write_config(self) -> Path:
        """Generate from the primary as it is now and write it; return the file's path.

        If the primary is unreadable at this moment, the config generated by
        :meth:`wait_for_primary` is written instead. A failed write is ``StartupError`` (exit 3).
        """
        data = await self._generate() or self._last_good
        if data is None:
            raise StartupError(
                "failed to generate the multus configuration: call wait_for_primary first",
                EXIT_SERVER,
            )
        try:
            await asyncio.to_thread(self._persist, data, True)
        except OSError as exc:
            raise StartupError(
                f"failed to persist the multus configuration: {exc}", EXIT_SERVER
            ) from exc
        self._written = True
        log.info("wrote %s: %s", self.output_path, data.decode("utf-8", "replace"))
        return self.output_path

    # ----------------------------------------------------------------------------------------
    # watching

    async def watch(self) -> None:
        """Regenerate on every relevant change in ``multusAutoconfigDir``; runs until cancelled,
        which is how shutdown begins: then the restart note is left (:meth:`leave_restart_note`)."""
        try:
            await self._watch()
        finally:
            self.leave_restart_note()

    async def _watch(self) -> None:
        warned = False
        while True:
            dir_id = await asyncio.to_thread(_dir_id, self._dir)
            if dir_id is None:
                await asyncio.sleep(self._settings.recheck_interval)
                continue
            try:
                await self._sync()  # catch up with what happened while nothing watched
                self._pending = True  # and once more after the watch is armed (race window)
                await self._watch_directory(dir_id)
                warned = False
            except (OSError, RuntimeError) as exc:
                if not isinstance(exc, FileNotFoundError) and not warned:
                    log.warning("cannot watch %s (%s); retrying", self._dir, exc)
                    warned = True
                await asyncio.sleep(self._settings.recheck_interval)

    async def _watch_directory(self, dir_id: DirId) -> None:
        """Sync on each batch (and on ticks while a retry is due); return when the dir changes."""
        settings = self._settings
        changes = awatch(
            self._dir,
            watch_filter=self._relevant,
            recursive=False,
            step=settings.step_ms,
            debounce=settings.debounce_ms,
            rust_timeout=max(1, round(settings.recheck_interval * 1000)),
            yield_on_timeout=True,
        )
        async with aclosing(changes):
            async for batch in changes:
                if await asyncio.to_thread(_dir_id, self._dir) != dir_id:
                    log.info("%s was removed or replaced; re-arming the watch", self._dir)
                    return
                if batch or self._pending:
                    await self._sync()

    def _relevant(self, _change: Change, path: str) -> bool:
        name = os.path.basename(path)
        if name == os.path.basename(self._name):
            return True
        return (self._follow or not self._name) and is_candidate(name)

    async def _sync(self) -> None:
        self._pending = False
        await self._choose_primary()
        data = await self._generate()
        if data is None:
            self._pending = True
            return
        try:
            wrote = await asyncio.to_thread(self._persist, data, False)
        except OSError as exc:
            self._report(f"failed to persist the multus configuration: {exc}")
            self._pending = True
            return
        if wrote:
            log.info("regenerated %s: %s", self.output_path, data.decode("utf-8", "replace"))

    async def _choose_primary(self) -> None:
        """``followPrimaryConfig``: switch to a lexically-earlier candidate, or (after the grace)
        to the next one when the current primary is gone."""
        if self._name and not self._follow:
            return
        try:
            names = await asyncio.to_thread(os.listdir, self._dir)
        except OSError:
            return  # the directory is gone: keep everything until it is back
        first = first_candidate(names)
        present = bool(self._name) and self._name in names
        if present or not self._name:
            self._gone_since = None
            if first is not None and first != self._name:
                why = "a lexically earlier config appeared" if present else "found"
                await self._switch(first, why)
            return
        now = time.monotonic()
        if self._gone_since is None:
            self._gone_since = now
        if first is None:
            return  # nothing to fall back to: keep the last good file
        if now - self._gone_since >= self._settings.primary_gone_grace:
            await self._switch(first, "the previous primary is gone")
        else:
            self._pending = True  # look again on the next tick

    async def _switch(self, name: str, why: str) -> None:
        log.info("primary CNI config is now %s (%s)", primary_path(self._dir, name), why)
        self._name = name
        self._gone_since = None
        if self._conf.force_cni_version:
            try:
                await asyncio.to_thread(self._force_version, self.primary_path)
            except PrimaryConfigError as exc:
                log.error("%s", exc)

    async def _generate(self) -> bytes | None:
        """The new file's bytes, or ``None`` (logged) when the primary is not usable right now."""
        try:
            primary = await asyncio.to_thread(
                read_primary, self.primary_path, self._conf.cni_version
            )
            data = render(self._conf, primary)
        except PrimaryConfigError as exc:
            self._report(f"keeping the last good {self.output_path}: {exc}")
            return None
        self._last_error = ""
        self._last_good = data
        return data

    def _report(self, message: str) -> None:
        if message != self._last_error:  # once per streak, not once per tick
            log.error("%s", message)
            self._last_error = message

    def _persist(self, data: bytes, force: bool) -> bool:
        """Write ``data`` unless the file already holds exactly that (blocking)."""
        if not force:
            try:
                if self.output_path.read_bytes() == data:
                    return False
            except OSError:
                pass
        atomic_write(self.output_path, data, mode=0o644, dir_mode=0o755)
        return True


async def install_static_config(config: DaemonConfig) -> None:
    """Non-auto mode: copy ``multusConfigFile`` to ``<cniConfigDir>/<basename>`` atomically.

    Failures are logged, not fatal, as upstream (whose copy is not atomic and silent).
    """
    source = config.multus_config_file
    try:
        target = await asyncio.to_thread(_copy_atomically, source, config.cni_config_dir)
    except OSError as exc:
        log.error("failed to copy the user provided configuration %s: %s", source, exc)
        return
    log.info("installed %s as %s", source, target)


def _copy_atomically(source: str, target_dir: str) -> str:
    target = f"{target_dir}/{os.path.basename(source.rstrip('/'))}"
    data = Path(os.path.abspath(source)).read_bytes()
    atomic_write(target, data, mode=0o644, dir_mode=0o755)
    return target


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


def _dir_id(directory: str) -> DirId | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
