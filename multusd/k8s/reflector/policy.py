"""When the reflector relists and how long it waits: the server's refusals, read, and the backoff.

The API server says "this version is no good" in several ways that client-go tells apart by
status and text (410 Gone/Expired, 504 "Too large resource version", a 400/422 about the
version), and a server without streaming lists says so with another 422. Each reading is one
function here, so the loop (:mod:`multusd.k8s.reflector.loop`) and the paged list
(:mod:`multusd.k8s.reflector.listing`) decide from the same rules.
"""

from __future__ import annotations

import random

from multusd.k8s.errors import ApiError, Gone


def rejected_version(exc: ApiError) -> str:
    """Why the server refused the resourceVersion a list or watch named: "expired" (410: older
    than its history), "too large" (newer than it has: client-go's
    ``isTooLargeResourceVersionError``, a 504 Timeout whose text says so, as every apiserver
    version words it), "invalid" (a 400/422 about the version itself), or "" (something else).
    """
    message = exc.message.lower()
    if isinstance(exc, Gone) or exc.reason in ("Expired", "Gone"):
        return "expired"
    if (exc.status == 504 or exc.reason == "Timeout") and "too large resource version" in message:
        return "too large"
    compact = message.replace(" ", "")
    if exc.status in (400, 422) and "resourceversion" in compact and not refuses_streaming(exc):
        return "invalid"
    return ""


def refuses_streaming(exc: ApiError) -> bool:
    """A server that does not do streaming lists: kube-apiserver with its WatchList feature gate
    off (alpha in 1.27-1.31, off by default again in 1.33: "sendInitialEvents is forbidden for
    watch unless the WatchList feature gate is enabled") or from before it ("resourceVersionMatch
    is forbidden for watch"), both a 422 Invalid on ``ListOptions``."""
    message = exc.message.lower()
    return exc.status in (400, 422) and (
        "sendinitialevents" in message or "resourceversionmatch" in message
    )


class Backoff:
    """Exponential backoff with full jitter: the n-th delay is uniform in
    [0, min(max, initial·2ⁿ)] (the AWS "full jitter" scheme: retries of many clients spread
    out instead of arriving in waves). A server's Retry-After is a floor. ``reset()`` after
    success starts over."""

    def __init__(self, initial: float, maximum: float, *, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempts = 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after: float | None = None) -> float:
        ceiling = min(self.maximum, self.initial * 2.0 ** min(self.attempts, 32))
        self.attempts += 1
        delay = self._rng.uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.maximum))
        return delay

    def reset(self) -> None:
        self.attempts = 0
