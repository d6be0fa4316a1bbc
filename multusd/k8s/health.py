"""How the API server is treating us right now, per resource, kept as a side effect of requests.

``/readyz`` must tell the truth about the caches (a cache can be "synced" long after the API
server went away) without costing anything: no probe requests, no timers. So the client
reports what it sees anyway: every list page, watch start and watch event of a resource is a
*contact*; every failed list or watch of it is a *failure*; a watch stream open is
*watching*. Reading the view is a few dict lookups.

Which failures count: transport errors, 5xx and 429 (the server unreachable or overloaded),
and for a resource's own list/watch anything but 410 Gone (which only asks for a relist).
A 404 or 409 on some other request is a healthy answer from a working server.

``on_change`` is called (synchronously, on the loop) when something a reader would report
changes: a resource's watch opens or closes, its first contact, or a failure streak begins or
ends. It is never called per event, so the cost of a busy watch stays one assignment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ContactView", "Contacts", "is_failure"]


@dataclass(frozen=True, slots=True)
class ContactView:
    """One resource's (or, for ``resource == "*"``, the whole API's) contact state."""

    resource: str
    watching: bool
    """A watch stream of this resource is open now."""
    last_contact: float | None
    """Wall-clock time of the last successful list page, watch start or watch event."""
    failing_since: float | None
    """Wall-clock time of the first failure since the last contact; ``None`` while healthy."""
    last_error: str
    """The most recent failure ("" before the first)."""


@dataclass(slots=True)
class _State:
    watches: int = 0
    last_contact: float | None = None
    failing_since: float | None = None
    last_error: str = ""


API = "*"


def is_failure(status: int, *, own_list_or_watch: bool) -> bool:
    """Does this response status say the server (or our access to a resource) is unwell?"""
    if status in {0, 429} or status >= 500:
        return True
    return own_list_or_watch and status >= 400 and status != 410


class Contacts:
    """Per-resource contact bookkeeping for one client (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._states: dict[str, _State] = {}
        self.on_change: Callable[[], None] | None = None

    def _state(self, resource: str) -> _State:
        state = self._states.get(resource)
        if state is None:
            state = self._states[resource] = _State()
        return state

    def succeeded(self, resource: str) -> None:
        """A list page, a watch start or a watch event of ``resource`` arrived."""
        state = self._state(resource)
        changed = state.last_contact is None or state.failing_since is not None
        now = self._clock()
        state.last_contact = now
        state.failing_since = None
        api = self._state(API)
        changed = changed or api.failing_since is not None
        api.last_contact = now
        api.failing_since = None
        if changed:
            self._changed()

    def answered(self) -> None:
        """Some other request got an answer (any status that :func:`is_failure` accepts)."""
        api = self._state(API)
        changed = api.failing_since is not None
        api.last_contact = self._clock()
        api.failing_since = None
        if changed:
            self._changed()

    def failed(self, resource: str | None, error: str) -> None:
        """A request failed; ``resource`` names the list/watch it was, ``None`` for others."""
        changed = False
        now = self._clock()
        for name in (API, resource) if resource is not None else (API,):
            state = self._state(name)
            state.last_error = error
            if state.failing_since is None:
                state.failing_since = now
                changed = True
        if changed:
            self._changed()

    def watch_opened(self, resource: str) -> None:
        state = self._state(resource)
        state.watches += 1
        if state.watches == 1:
            self._changed()

    def watch_closed(self, resource: str) -> None:
        state = self._state(resource)
        state.watches = max(0, state.watches - 1)
        if state.watches == 0:
            self._changed()

    def view(self, resource: str = API) -> ContactView:
        state = self._states.get(resource) or _State()
        return ContactView(
            resource=resource,
            watching=state.watches > 0,
            last_contact=state.last_contact,
            failing_since=state.failing_since,
            last_error=state.last_error,
        )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
