"""Injected faults: latency, error responses, watch trouble and hidden objects.

One mutable ``Faults`` object is consulted by the request path; tests change it in process, and
other processes change it through the control API, which speaks the ``to_dict``/``from_dict``
JSON shape. Random error rates draw from a seeded RNG so a failing run can be replayed; rules
with a ``count`` fire exactly that many times, which is what deterministic tests want.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from multusd.kubesim.entries import Entry
from multusd.kubesim.errors import ApiError, bad_request, injected
from multusd.kubesim.resources import ResourceType

ANY = "*"


def _matches(pattern: str, value: str) -> bool:
    return pattern in (ANY, value)


@dataclass(slots=True)
class LatencyRule:
    """Delay matching requests by ``seconds`` (plus up to ``jitter`` more)."""

    seconds: float
    verb: str = ANY
    resource: str = ANY
    jitter: float = 0.0


@dataclass(slots=True)
class ErrorRule:
    """Answer matching requests with ``code`` at probability ``rate``, ``count`` times (or
    forever when ``count`` is None). ``subresource`` "" means the main resource only."""

    code: int
    verb: str = ANY
    resource: str = ANY
    subresource: str = ANY
    rate: float = 1.0
    count: int | None = None
    retry_after: int = 1

    def applies(self, verb: str, resource: str, subresource: str) -> bool:
        return (
            _matches(self.verb, verb)
            and _matches(self.resource, resource)
            and _matches(self.subresource, subresource)
            and (self.count is None or self.count > 0)
        )


@dataclass(frozen=True, slots=True)
class HiddenObject:
    """An object left out of lists and watches but still served by GET."""

    namespace: str
    name: str
    resource: str = "pods"


@dataclass
class Faults:
    latency: list[LatencyRule] = field(default_factory=list)
    errors: list[ErrorRule] = field(default_factory=list)
    hidden: set[HiddenObject] = field(default_factory=set)
    expire_next_watches: int = 0
    stall_watches: bool = False
    seed: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False)
    _unstalled: asyncio.Event | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    # --- consulted by the request path -----------------------------------------------------

    def delay_for(self, verb: str, resource: str) -> float:
        delay = 0.0
        for rule in self.latency:
            if _matches(rule.verb, verb) and _matches(rule.resource, resource):
                delay += rule.seconds + (self._rng.uniform(0, rule.jitter) if rule.jitter else 0)
        return delay

    def error_for(self, verb: str, resource: str, subresource: str) -> ApiError | None:
        """The first applicable rule that fires, consuming one of its ``count``."""
        for rule in self.errors:
            if not rule.applies(verb, resource, subresource):
                continue
            if rule.rate < 1.0 and self._rng.random() >= rule.rate:
                continue
            if rule.count is not None:
                rule.count -= 1
            return injected(rule.code, rule.retry_after)
        return None

    def visible(self, rt: ResourceType, entry: Entry) -> bool:
        if not self.hidden:
            return True
        return HiddenObject(entry.namespace, entry.name, rt.plural) not in self.hidden

    def take_expire(self) -> bool:
        """True when this watch must be answered with 410 (consumes one)."""
        if self.expire_next_watches > 0:
            self.expire_next_watches -= 1
            return True
        return False

    def stalled(self) -> bool:
        return self.stall_watches

    async def wait_unstalled(self) -> None:
        if not self.stall_watches:
            return
        if self._unstalled is None:
            self._unstalled = asyncio.Event()
        await self._unstalled.wait()

    def set_stall(self, stalled: bool) -> None:
        self.stall_watches = stalled
        if not stalled and self._unstalled is not None:
            self._unstalled.set()
            self._unstalled = None

    # --- changed by tests and the control API ----------------------------------------------

    def hide(self, namespace: str, name: str, resource: str = "pods") -> None:
        self.hidden.add(HiddenObject(namespace, name, resource))

    def unhide(self, namespace: str, name: str, resource: str = "pods") -> None:
        self.hidden.discard(HiddenObject(namespace, name, resource))

    def reset(self) -> None:
        self.latency.clear()
        self.errors.clear()
        self.hidden.clear()
        self.expire_next_watches = 0
        self.set_stall(False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "latency": [asdict(r) for r in self.latency],
            "errors": [asdict(r) for r in self.errors],
            "hidden": [
                asdict(h)
                for h in sorted(self.hidden, key=lambda h: (h.resource, h.namespace, h.name))
            ],
            "expire_next_watches": self.expire_next_watches,
            "stall_watches": self.stall_watches,
            "seed": self.seed,
        }

    def apply_dict(self, doc: dict[str, Any]) -> None:
        """Set every key present in ``doc`` (the ``to_dict`` shape); absent keys are kept.

        Validates everything before changing anything, so a bad document changes nothing.
        """
        try:
            latency = [LatencyRule(**r) for r in doc["latency"]] if "latency" in doc else None
            errors = [ErrorRule(**r) for r in doc["errors"]] if "errors" in doc else None
            hidden = {HiddenObject(**h) for h in doc["hidden"]} if "hidden" in doc else None
            expire = int(doc.get("expire_next_watches", self.expire_next_watches))
            stall = bool(doc.get("stall_watches", self.stall_watches))
            seed = int(doc["seed"]) if "seed" in doc else None
        except (TypeError, ValueError, KeyError) as exc:
            raise bad_request(f"invalid fault document: {exc}") from exc
        if latency is not None:
            self.latency = latency
        if errors is not None:
            self.errors = errors
        if hidden is not None:
            self.hidden = hidden
        self.expire_next_watches = expire
        self.set_stall(stall)
        if seed is not None:
            self.seed = seed
            self._rng.seed(seed)
