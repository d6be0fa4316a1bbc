"""Which file in ``multusAutoconfigDir`` is the primary CNI config, and when that changes.

* At start-up the primary is ``multusMasterCNI``, or the first candidate by name, waited for
  with upstream's budget: 120 listings, 1 s apart, then exit 2.
* The primary found at start-up is kept for the life of the process, as upstream does (a file
  that later sorts earlier never moves new pods to another network); a primary that disappears
  keeps the last good file until it is back. Only with the opt-in ``followPrimaryConfig`` is the
  primary re-chosen on every relevant change: a new lexically-earlier config takes over at once,
  and a primary still gone after ``primary_gone_grace`` is replaced by the next candidate (so a
  writer that deletes and re-creates its file does not flip pods for a moment).
* ``forceCNIVersion`` rewrites the primary (atomically, mode kept) each time one is adopted.
* Our own file (``00-multus*``) and temp files never match the watch's filter
  (:meth:`PrimaryChoice.relevant`), so our writes cannot trigger a regeneration loop.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import Callable

from watchfiles import Change

from multusd.config.generate import (
    GeneratorConfig,
    PrimaryConfigError,
    PrimaryListError,
    check_not_recursive,
    first_candidate,
    force_cni_version,
    is_candidate,
    primary_path,
    scan_for_primary,
)
from multusd.errors import EXIT_READINESS_LOST, StartupError
from multusd.fileread import read_bytes
from multusd.fsutil import atomic_write

log = logging.getLogger(__name__)

_WANTED = "a *.conf or *.conflist file not named 00-multus*"
"""What the start-up scan looks for (``generate.is_candidate``), in words for the errors."""


class PrimaryChoice:
    """The primary's file name in ``multusAutoconfigDir``: found, checked, kept or followed."""

    def __init__(
        self,
        conf: GeneratorConfig,
        *,
        follow: bool,
        find_attempts: int,
        find_interval: float,
        gone_grace: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` times ``gone_grace`` (seconds, monotonic); tests inject one they move
        by hand, so that "still within the grace" does not depend on how fast the machine is."""
        self._conf = conf
        self._clock = clock
        self.directory = conf.multus_autoconfig_dir
        self._fixed = conf.multus_master_cni
        self._follow = follow and not self._fixed
        """Re-choose the primary on changes (opt-in); otherwise the name found first is kept."""
        self._find_attempts = find_attempts
        self._find_interval = find_interval
        self._gone_grace = gone_grace
        self.name = self._fixed
        self._gone_since: float | None = None

    @property
    def path(self) -> str:
        """The primary config in use (``clusterNetwork`` of the generated file); "" before."""
        return primary_path(self.directory, self.name) if self.name else ""

    async def settle(self) -> None:
        """Start-up: find the primary, check it, adopt it (with ``forceCNIVersion``).

        ``StartupError`` (exit 2) when there is none; ``PrimaryConfigError`` when it is bad.
        """
        name = self._fixed or await self._find_primary()
        check_not_recursive(self._conf, name)
        self.name = name
        if self._conf.force_cni_version:
            await self._force_version(self.path)

    async def _find_primary(self) -> str:
        """The primary's file name: upstream's budget of listings, 1 s apart, then exit 2.

        The wait ends early only for a SIGTERM (the supervisor cancels it) or when there is
        nothing to wait for: with ``multusAutoconfigDir`` unset, upstream's listing of "" fails
        at once (exit 2, "open : no such file or directory"), and so do we, naming the key.
        """
        if not self.directory:
            raise StartupError(
                "failed to find the cluster master CNI plugin: multusAutoconfigDir is not set "
                "(and multusMasterCNI neither): there is no directory to look for the primary "
                f"CNI config ({_WANTED}) in",
                EXIT_READINESS_LOST,
            )
        for attempt in range(self._find_attempts):
            if attempt:
                await asyncio.sleep(self._find_interval)
            try:
                name = await asyncio.to_thread(scan_for_primary, self.directory)
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
                log.info("waiting for a primary CNI config in %s", self.directory)
        raise StartupError(
            "failed to find the cluster master CNI plugin: "
            f"could not find a plugin configuration in {self.directory} (looked "
            f"{self._find_attempts} times, {self._find_interval:g}s apart, for {_WANTED})",
            EXIT_READINESS_LOST,
        )

    async def _force_version(self, path: str) -> None:
        """``forceCNIVersion``: rewrite the primary with our version (atomic, mode kept)."""
        absolute = os.path.abspath(path)  # noqa: ASYNC240 (a getcwd at most, no disk I/O)
        try:
            data = await read_bytes(absolute)
        except OSError as exc:
            raise PrimaryConfigError(f"failed to read cni config {absolute}: {exc}") from exc
        rewritten = force_cni_version(path, data, self._conf.cni_version)
        await asyncio.to_thread(_replace_keeping_mode, absolute, rewritten)

    def relevant(self, _change: Change, path: str) -> bool:
        """The watch's filter: the primary itself, and (while following, or before there is
        one) any other candidate."""
        name = os.path.basename(path)
        if name == os.path.basename(self.name):
            return True
        return (self._follow or not self.name) and is_candidate(name)

    async def follow(self) -> bool:
        """``followPrimaryConfig``: switch to a lexically-earlier candidate, or (after the grace)
        to the next one when the current primary is gone. ``True``: look again on the next
        tick (the grace is running)."""
        if self.name and not self._follow:
            return False
        try:
            names = await asyncio.to_thread(os.listdir, self.directory)
        except OSError:
            return False  # the directory is gone: keep everything until it is back
        first = first_candidate(names)
        present = bool(self.name) and self.name in names
        if present or not self.name:
            self._gone_since = None
            if first is not None and first != self.name:
                why = "a lexically earlier config appeared" if present else "found"
                await self._switch(first, why)
            return False
        now = self._clock()
        if self._gone_since is None:
            self._gone_since = now
        if first is None:
            return False  # nothing to fall back to: keep the last good file
        if now - self._gone_since >= self._gone_grace:
            await self._switch(first, "the previous primary is gone")
            return False
        return True  # look again on the next tick

    async def _switch(self, name: str, why: str) -> None:
        log.info("primary CNI config is now %s (%s)", primary_path(self.directory, name), why)
        self.name = name
        self._gone_since = None
        if self._conf.force_cni_version:
            try:
                await self._force_version(self.path)
            except PrimaryConfigError as exc:
                log.error("%s", exc)


def _replace_keeping_mode(absolute: str, data: bytes) -> None:
    """Replace ``absolute`` atomically with ``data``, keeping its mode (blocking: the ``stat``
    and the write are one worker-thread hop)."""
    try:
        mode = os.stat(absolute).st_mode & 0o7777
    except OSError as exc:
        raise PrimaryConfigError(f"failed to read cni config {absolute}: {exc}") from exc
    try:
        atomic_write(absolute, data, mode=mode)
    except OSError as exc:
        raise PrimaryConfigError(f"couldn't update cluster network config: {exc}") from exc
