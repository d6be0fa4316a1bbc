"""The reflector's loop: list, then watch, and after any failure relist or back off.

What follows each way a list or watch can end is decided here, in one place: a normal end
resumes the watch, a rejected version relists (:mod:`.policy` reads the rejection), a silent
stream is restarted, a server that refuses streaming lists gets paged lists from then on, and
anything else is backed off with full jitter. The list and the watch themselves are
:mod:`.listing` and :mod:`.watching`.
"""

from __future__ import annotations

import asyncio
import logging

from multusd.k8s.errors import ApiError
from multusd.k8s.reflector.listing import Listing, Unlistable
from multusd.k8s.reflector.policy import refuses_streaming, rejected_version
from multusd.k8s.reflector.watching import ShortWatch, StreamIncomplete, Watching, WatchSilent

log = logging.getLogger(__name__)

# Streaming lists that end (or go silent) before their initial-events-end bookmark
# (watching.INITIAL_EVENTS_END), in a row, before we stop asking for them: a server or proxy
# that accepts the parameters but never finishes the list.
_INCOMPLETE_STREAMS = 3


class Reflector(Listing, Watching):
    """Keeps ``store`` equal to the API's view of ``path`` (a collection path such as
    ``/api/v1/pods``), filtered by the selectors, until cancelled."""

    # --- the loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """List, then watch, until cancelled. Never returns otherwise."""
        log.info("reflector %s: starting on %s %s", self.name, self.path, self._selectors)
        rejected_in_a_row = 0
        while True:
            try:
                if self._rv is None and self._streaming:
                    await self._watch(streaming_list=True)
                else:
                    if self._rv is None:
                        await self._list()
                    await self._watch()
            except ApiError as exc:
                listing = self._rv is None
                why = rejected_version(exc)
                if why:
                    # A rejection right after a relist that got nowhere: the server is not
                    # keeping up (or keeps rejecting us); back off instead of relisting in a
                    # loop. A streaming list that named a version is retried without one at
                    # once: that is a different request.
                    retry_differs = listing and self._list_from not in ("", "0")
                    rejected_in_a_row = 1 if self._watch_events else rejected_in_a_row + 1
                    self._relist(why, exc, listing=listing)
                    if rejected_in_a_row > 1 and not retry_differs:
                        await self._back_off(exc)
                    continue
                if listing and self._streaming and refuses_streaming(exc):
                    self._stop_streaming(str(exc))
                    continue
                await self._back_off(exc)
            except WatchSilent:
                self._silent += 1
                log.info(
                    "reflector %s: no event for %.1f s; restarting the %s at %s",
                    self.name,
                    self.settings.inactivity_timeout,
                    "streaming list" if self._rv is None else "watch",
                    self._rv if self._rv is not None else self._list_from,
                )
                self._count_incomplete_stream()
            except StreamIncomplete as exc:
                self._count_incomplete_stream()
                await self._back_off(exc)
            except (Unlistable, ShortWatch, TimeoutError, OSError) as exc:
                # ApiError covers HTTP and transport failures; a bare timeout or OS error is
                # treated the same rather than letting the cache die quietly.
                await self._back_off(exc)
            rejected_in_a_row = 0

    def _relist(self, why: str, exc: ApiError, *, listing: bool) -> None:
        """Forget the version the server rejected and choose what the relist asks for.

        client-go's ``relistResourceVersion``: after a watch's 410, the last version seen ("not
        older than", still served from the apiserver's watch cache); after anything else, or a
        410 on the (streaming) list itself, "" (a consistent read): a version from the future
        (a restored server) or one it cannot parse will not get better by asking again.
        """
        if why == "expired":
            self._relists_410 += 1
        else:
            self._relists_rejected += 1
        self._last_rejection = f"{type(exc).__name__}: {exc}"
        resume_from = self._rv
        self._rv = None
        self._list_from = resume_from if why == "expired" and resume_from and not listing else ""
        log.info(
            "reflector %s: the server rejected resourceVersion %s (%s: %s); relisting %s",
            self.name,
            resume_from if resume_from is not None else "of the list",
            why,
            exc,
            f"not older than {self._list_from}" if self._list_from else "from scratch",
        )

    def _stop_streaming(self, reason: str) -> None:
        self._streaming = False
        log.warning(
            "reflector %s: the API server does not do streaming lists (%s); "
            "listing in pages from now on",
            self.name,
            reason,
        )

    def _count_incomplete_stream(self) -> None:
        if self._rv is not None or not self._streaming:
            return
        self._incomplete_streams += 1
        if self._incomplete_streams >= _INCOMPLETE_STREAMS:
            self._stop_streaming(
                f"{self._incomplete_streams} streaming lists in a row ended before their "
                "initial-events-end bookmark"
            )

    async def _back_off(self, exc: Exception) -> None:
        self._errors += 1
        self._last_error = f"{type(exc).__name__}: {exc}"
        retry_after = getattr(exc, "retry_after", None)
        delay = self._backoff.next_delay(retry_after)
        self._backoff_total += delay
        log.info(
            "reflector %s: %s; retrying in %.2f s (attempt %d)",
            self.name,
            self._last_error,
            delay,
            self._backoff.attempts,
        )
        await asyncio.sleep(delay)
