"""Paged lists: one complete list of the resource, page by page, whatever the server does.

Each page is trimmed as it arrives, so a big list never sits in memory whole; a continue token
that outlived the server's history restarts the list, and a second one lists without pages, as
client-go's pager does, so the list always finishes. A list at a version the server rejects is
asked again as a consistent list (no version); a rejection of that list, or of one at "0", is
:class:`Unlistable`, for the loop to back off from.
"""

from __future__ import annotations

import asyncio
import logging

from multusd.k8s.errors import ApiError, Gone
from multusd.k8s.reflector.base import Obj, ReflectorBase
from multusd.k8s.reflector.policy import rejected_version

log = logging.getLogger(__name__)


class _ContinueExpired(Exception):
    """A list's continue token outlived the server's history."""


class Unlistable(Exception):
    """Even a list without a version was refused for its version: a server to back off from."""

    def __init__(self, exc: ApiError) -> None:
        super().__init__(str(exc))
        self.retry_after = exc.retry_after


class Listing(ReflectorBase):
    """The reflector's paged list (the loop is :class:`~multusd.k8s.reflector.loop.Reflector`)."""

    async def _list(self) -> None:
        """One complete paged list into the store, whatever it takes.

        Which version to ask for is client-go's choice (``relistResourceVersion``): "0" the
        first time, so the apiserver answers from its watch cache instead of a quorum read of
        every pod in etcd (with a node field selector, etcd has no index: each daemon's list
        would read the whole cluster); after a watch's 410, the last version seen ("not older
        than", still served from the cache); and "" (a consistent read) once the server said
        that version is gone (or too large) too, or rejected a version before.
        """
        loop = asyncio.get_running_loop()
        self._list_started = loop.time()
        page_size = self.settings.page_size
        since = self._list_from
        expired = 0
        while True:
            try:
                objects, rv = await self._list_pages(since, page_size)
                break
            except _ContinueExpired:
                # The list took longer than the server's history window. Start over; after a
                # second expiry, give up paging (client-go's pager does the same).
                self._list_restarts += 1
                expired += 1
                if expired >= 2:
                    page_size = 0
                log.info(
                    "reflector %s: list continue token expired; listing again%s",
                    self.name,
                    "" if page_size else " without pages",
                )
            except ApiError as exc:
                why = rejected_version(exc)
                if not why:
                    raise
                if since in ("", "0"):
                    raise Unlistable(exc) from exc
                self._last_rejection = f"{type(exc).__name__}: {exc}"
                log.info(
                    "reflector %s: version %s rejected for the list (%s); consistent list",
                    self.name,
                    since,
                    why,
                )
                since = self._list_from = ""
        self._replace(objects, rv)

    async def _list_pages(self, since: str, page_size: int) -> tuple[list[Obj], str]:
        """Every page of one list, trimmed as each arrives; the resourceVersion is the first
        page's (later pages are consistent with it, and the watch from it replays whatever
        changed since). A 410 on a later page is ``_ContinueExpired``."""
        params = dict(self._selectors)
        if since:
            params["resourceVersion"] = since
        if page_size > 0:
            params["limit"] = str(page_size)
        objects: list[Obj] = []
        rv = ""
        token = ""
        while True:
            if token:
                # A continued page must not name a version: the token carries it.
                params.pop("resourceVersion", None)
                params["continue"] = token
            try:
                body = await self.client.get(self.path, params)
            except Gone as exc:
                if token:
                    raise _ContinueExpired from exc
                raise
            self._pages += 1
            objects.extend(self._known(self.trim(item)) for item in body.get("items") or ())
            meta = body.get("metadata") or {}
            if not token:
                rv = str(meta.get("resourceVersion") or "")
            token = str(meta.get("continue") or "")
            del body  # the page's decoded objects go now, not with the next page's arrival
            if not token:
                return objects, rv
