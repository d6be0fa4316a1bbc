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

This module generates and writes the file; the pieces around it:

* :mod:`multusd.config.primary_choice`: which file is the primary, found at start-up and kept
  (upstream), or followed with ``followPrimaryConfig``;
* :mod:`multusd.config.dirwatch`: the watch on ``multusAutoconfigDir``, re-armed when the
  directory is removed or replaced, with a periodic tick; and, when ``cniConfigDir`` is another
  directory, a second one on it, whose only work is to write the file again when the
  directory is removed or replaced (nothing else would until the primary changed);
* :mod:`multusd.config.restart_note`: the note left for the next daemon;
* :mod:`multusd.config.static`: the non-auto mode's one-time copy of ``multusConfigFile``.

Where this differs from upstream (docs/upstream.md, "Config generation"), on purpose:

* Every write is atomic (temp + fsync + rename, mode 0644), and nothing is written when the
  primary cannot be read or decoded: the last good file stays. Upstream truncates in place and
  writes an *empty* file when a writer has the primary half-written.
* The watch is on the directory and survives it being removed or replaced (re-armed by inode,
  the watched directory held open so that its number is not handed on); upstream's fsnotify
  watch dies silently. A conf dir that comes back gets ``00-multus.conf`` again at once, the
  primary untouched. Batches are debounced by watchfiles; a periodic tick
  (``recheck_interval``) notices a dead watch and retries a generation that failed.
* The primary found at start-up is kept for the life of the process, as upstream does; only
  the opt-in ``followPrimaryConfig`` re-chooses it (``primary_choice``).
* Our own file (``00-multus*``) and temp files never match the event filter, so our writes
  cannot trigger a regeneration loop; a generation that yields the bytes already on disk
  writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from cni_shim.readiness import RESTART_NOTE
from multusd.config.daemon import DaemonConfig
from multusd.config.dirwatch import watch_directory
from multusd.config.generate import (
    MULTUS_CONFIG_NAME,
    PrimaryConfigError,
    generator_config,
    primary_path,
    read_primary,
    render,
)
from multusd.config.primary_choice import PrimaryChoice
from multusd.config.restart_note import write_restart_note
from multusd.errors import EXIT_READINESS_LOST, EXIT_SERVER, StartupError
from multusd.fileread import read_bytes
from multusd.fsutil import atomic_write, remove_if_exists

log = logging.getLogger(__name__)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` times ``primary_gone_grace`` (seconds, monotonic); tests inject their own."""
        self._conf = generator_config(raw)  # ConfigError (exit 1) on a bad generator key
        self._settings = settings or ManagerSettings()
        if keep_config_on_exit is None:
            keep_config_on_exit = config.keep_config_on_exit
        self._keep = keep_config_on_exit
        self._socket_path = Path(config.socket_path)
        self._note_path = self._socket_path.with_name(RESTART_NOTE)
        self._noted = False
        self._primary = PrimaryChoice(
            self._conf,
            follow=config.follow_primary_config,
            find_attempts=self._settings.find_attempts,
            find_interval=self._settings.find_interval,
            gone_grace=self._settings.primary_gone_grace,
            clock=clock,
        )
        self.output_path = Path(primary_path(self._conf.cni_config_dir, MULTUS_CONFIG_NAME))
        self._last_good: bytes | None = None
        self._written = False
        self._pending = False
        self._last_error = ""
        self._syncing = asyncio.Lock()
        """The two watches' syncs take turns (``cniConfigDir`` apart)."""
        self.passes = 0
        """Passes the watch on ``multusAutoconfigDir`` has finished: batches of changes and
        ticks, each one's sync (if any) done. It exists for tests and metrics: that a change
        did *not* lead to a write shows only as passes made since it, so a test waits for
        those instead of sleeping and hoping the watch has looked."""

    @property
    def primary_path(self) -> str:
        """The primary config in use (``clusterNetwork`` of the generated file); "" before."""
        return self._primary.path

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
        self._noted = write_restart_note(self._note_path, self._socket_path, self.output_path)

    # ----------------------------------------------------------------------------------------
    # start-up

    async def wait_for_primary(self) -> None:
        """Find and check the primary; ``StartupError`` (exit 2) if there is none or it is bad."""
        if not self._conf.cni_version:
            log.error(
                "the CNI version is a mandatory parameter when the "
                "'-multus-config-file=auto' option is used"
            )
        try:
            await self._primary.settle()
            try:
                primary = await read_primary(self.primary_path, self._conf.cni_version)
            except PrimaryConfigError as exc:
                raise PrimaryConfigError(
                    "failed to load the primary CNI configuration as a multus delegate "
                    f"with error '{exc}'"
                ) from exc
            self._last_good = render(self._conf, primary)
        except PrimaryConfigError as exc:
            raise StartupError(str(exc), EXIT_READINESS_LOST) from exc
        log.info("primary CNI config: %s", self.primary_path)

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
            await self._persist(data, force=True)
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
        """Regenerate on every relevant change in ``multusAutoconfigDir``, and whenever that
        directory or ``cniConfigDir`` comes back after being removed or replaced; runs until
        cancelled, which is how shutdown begins: then the restart note is left
        (:meth:`leave_restart_note`)."""
        settings = self._settings
        output_dir = self.output_path.parent
        # Compared by name: two names of one directory only cost a second, idle watch.
        apart = output_dir != Path(self._primary.directory)
        try:
            async with asyncio.TaskGroup() as watches:
                watches.create_task(
                    watch_directory(
                        self._primary.directory,
                        self._sync,
                        relevant=self._primary.relevant,
                        retry_due=lambda: self._pending,
                        step_ms=settings.step_ms,
                        debounce_ms=settings.debounce_ms,
                        tick=settings.recheck_interval,
                        passed=self._passed,
                    )
                )
                if apart:  # only its (re)arming syncs: the file is written again if missing
                    watches.create_task(
                        watch_directory(
                            str(output_dir),
                            self._sync,
                            relevant=lambda _change, _path: False,
                            retry_due=lambda: False,
                            step_ms=settings.step_ms,
                            debounce_ms=settings.debounce_ms,
                            tick=settings.recheck_interval,
                        )
                    )
        finally:
            self.leave_restart_note()

    def _passed(self) -> None:
        self.passes += 1

    async def _sync(self) -> None:
        async with self._syncing:
            await self._sync_now()

    async def _sync_now(self) -> None:
        self._pending = False
        if await self._primary.follow():
            self._pending = True  # the primary is gone, within its grace: look again
        data = await self._generate()
        if data is None:
            self._pending = True
            return
        try:
            wrote = await self._persist(data, force=False)
        except OSError as exc:
            self._report(f"failed to persist the multus configuration: {exc}")
            self._pending = True
            return
        if wrote:
            log.info("regenerated %s: %s", self.output_path, data.decode("utf-8", "replace"))

    async def _generate(self) -> bytes | None:
        """The new file's bytes, or ``None`` (logged) when the primary is not usable right now."""
        try:
            primary = await read_primary(self.primary_path, self._conf.cni_version)
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

    async def _persist(self, data: bytes, *, force: bool) -> bool:
        """Write ``data`` unless the file already holds exactly that (an unreadable file is
        rewritten); ``OSError`` if the write fails."""
        if not force:
            try:
                if await read_bytes(self.output_path) == data:
                    return False
            except OSError:
                pass
        await asyncio.to_thread(atomic_write, self.output_path, data, mode=0o644, dir_mode=0o755)
        return True
