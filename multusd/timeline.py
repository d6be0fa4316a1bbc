"""Where one request's wall time goes: its phases, in order, for the request's debug line.

Wall time, not CPU: where a request waits (its plugins, the API server, a worker thread) is the
point. The server opens a :func:`timeline` per CNI request; everything the request does inside
it, in any of its tasks (a context variable carries it), adds to it:

- a *phase* (:func:`phase`, :func:`note_phase`): one step of the request, ``decode``,
  ``pod_lookup``, ``delegate[bridge]``, ``status_write``... What no phase covers is "other";
- a *part* (:func:`note_part`): a step inside the phase that is open at that moment, such as a
  plugin's ``spawn`` and ``run`` inside its delegate; shown in brackets after its phase and not
  subtracted a second time from "other". Outside any phase a part is a phase of its own.

The line reads (docs/performance.md, "Where one request's wall time goes")::

    decode 0.2ms, pod_lookup 0.0ms, delegate[testnet] 18.0ms (spawn[bridge] 0.9ms,
    run[bridge] 16.1ms), status_write 4.7ms, other 2.7ms

``bench/phases.py`` aggregates these lines over many requests.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Phase:
    """One phase of a request: its name, its wall time and the parts timed inside it."""

    name: str
    seconds: float = 0.0
    parts: list[tuple[str, float]] = field(default_factory=list)


Phases = list[Phase]
"""One request's phases in the order they ended."""

_phases: contextvars.ContextVar[Phases | None] = contextvars.ContextVar(
    "multusd_phases", default=None
)
_open: contextvars.ContextVar[Phase | None] = contextvars.ContextVar(
    "multusd_open_phase", default=None
)


@contextlib.contextmanager
def timeline() -> Iterator[Phases]:
    """Collect the phases of the request running in this block (its tasks included)."""
    phases: Phases = []
    token = _phases.set(phases)
    try:
        yield phases
    finally:
        _phases.reset(token)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as a phase, failed or not; parts noted inside it (its tasks included)
    are its own. A plain context manager, so it wraps ``await``s."""
    current = Phase(name)
    token = _open.set(current)
    started = time.monotonic()
    try:
        yield
    finally:
        current.seconds = time.monotonic() - started
        _open.reset(token)
        phases = _phases.get()
        if phases is not None:
            phases.append(current)


def note_phase(name: str, seconds: float) -> None:
    """Add a phase timed elsewhere to the current request's timeline (none: nothing)."""
    phases = _phases.get()
    if phases is not None:
        phases.append(Phase(name, seconds))


def note_part(name: str, seconds: float) -> None:
    """Add a part to the phase open here, or, outside any, a phase of its own."""
    current = _open.get()
    if current is not None and _phases.get() is not None:
        current.parts.append((name, seconds))
    else:
        note_phase(name, seconds)


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """Time the block as a part (:func:`note_part`), failed or not."""
    started = time.monotonic()
    try:
        yield
    finally:
        note_part(name, time.monotonic() - started)


def _ms(name: str, seconds: float) -> str:
    return f"{name} {seconds * 1000:.1f}ms"


def phases_text(phases: Phases, total: float) -> str:
    """``decode 0.4ms, delegate[bridge] 24.7ms (spawn[bridge] 0.8ms, run[bridge] 23.1ms), ...,
    other 1.2ms``; "other" is what no phase covers (queueing, the delegate cache, rollback)."""
    parts = []
    for p in phases:
        inner = f" ({', '.join(_ms(n, s) for n, s in p.parts)})" if p.parts else ""
        parts.append(_ms(p.name, p.seconds) + inner)
    other = total - sum(p.seconds for p in phases)
    return ", ".join([*parts, _ms("other", max(other, 0.0))])
