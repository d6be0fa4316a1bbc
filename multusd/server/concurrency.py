"""Who may run at the same time, who waits, who is refused, and who is cancelled.

Upstream runs every request concurrently, so an ADD and a DEL for the same sandbox can overlap
and race on the delegate cache. We serialise requests per container ID (the runtime's own unit)
and let different containers run fully in parallel. Serialising alone would let one hung ADD
wedge its container for good (the DEL that should clean up waits behind it) and let requests
pile up without limit, so the queue also:

* runs every request as a task it owns: the holder of a container is a task, not a lock held
  by whoever happens to be awaiting, so it can be cancelled and its end awaited;
* lets a DEL *supersede* the ADDs (and CHECKs) of its container that came before it: they are
  cancelled -- their plugins killed, their partial work rolled back by the command itself --
  and then the DEL runs. The runtime sends a DEL only once it has given up on the sandbox;
* caps the requests per container and in total; beyond either the request is refused at once
  with CNI code 11 ("try again later"), which the runtime retries, instead of waiting forever.
  A DEL that supersedes something is never refused: it takes the place of what it cancels;
* bounds each request, waiting included, by its deadline;
* cancels everything on shutdown (:meth:`ContainerQueue.cancel_all`).

``connectionLimit`` becomes a :class:`RequestGate`, a queue rather than a rejection: pods wait
for a slot instead of failing; probes are never queued. A request takes its container first and
a gate slot second, so requests waiting behind a hung container hold no slot. A DEL does the
reverse, as an *urgent* waiter: it queues for a slot ahead of everything else the moment it
arrives, so the slot of the ADD it supersedes comes to it, not to the next ADD in line (which
may hang in turn, until every slot is held by a hung ADD and the DELs that would clean them up
wait for their deadlines).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.errors import internal

log = logging.getLogger(__name__)

T = TypeVar("T")

SUPERSEDED = internal("superseded by a DEL of the same container")
"""What an ADD or CHECK cancelled by a later DEL answers (if its client still listens)."""
SHUTTING_DOWN = CNIError(TRY_AGAIN_LATER, "the daemon is shutting down; try again later")
CLIENT_GONE = internal("the client closed its connection")


def too_many_requests(limit: int) -> CNIError:
    """The refusal of a request beyond ``maxPendingRequests`` (code 11: the runtime retries)."""
    return CNIError(
        TRY_AGAIN_LATER,
        f"too many requests in the daemon ({limit}, maxPendingRequests); try again later",
    )


@dataclass(eq=False)
class _Job:
    """One admitted request: the task that runs it and, once cancelled by us, why."""

    container: _Container | None
    supersedable: bool
    task: asyncio.Task[object] | None = None
    cancelled_because: CNIError | None = None
    started: bool = False

    def cancel(self, reason: CNIError) -> None:
        if self.task is not None and not self.task.done() and self.cancelled_because is None:
            self.cancelled_because = reason
            self.task.cancel()


@dataclass(eq=False)
class _Container:
    key: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    jobs: list[_Job] = field(default_factory=list)
    """Admitted, in arrival order; the first one that started holds ``lock``."""


class ContainerQueue:
    """One request at a time per container, in arrival order, with caps and supersession."""

    def __init__(self, per_container: int, total: int, gate: RequestGate | None = None) -> None:
        self.per_container = per_container
        self.total = total
        self.gate = gate or RequestGate(None)
        self._containers: dict[str, _Container] = {}
        self._jobs: set[_Job] = set()

    @property
    def pending(self) -> int:
        """Requests admitted and not yet answered (running or waiting)."""
        return len(self._jobs)

    def __len__(self) -> int:
        """Containers with a request in the daemon (entries are dropped when they empty)."""
        return len(self._containers)

    async def run(
        self,
        key: str | None,
        work: Callable[[], Awaitable[T]],
        *,
        deadline: float,
        supersedable: bool = False,
        supersedes: bool = False,
        urgent: bool = False,
    ) -> T:
        """Run ``work`` in its turn for container ``key`` (``None``: no container), by ``deadline``,
        holding a gate slot. ``supersedes`` (a DEL) cancels the ``supersedable`` requests of its
        container that came before it; ``urgent`` (a DEL) waits for its slot before the others.

        Raises a code-11 :class:`CNIError` when refused or out of time, and a code-999 one when
        a DEL superseded it or shutdown cancelled it. Cancelling the caller (the client went
        away) cancels ``work`` and returns only once it has finished unwinding.
        """
        container = self._containers.get(key) if key is not None else None
        victims = []
        if container is not None and supersedes:
            victims = [j for j in container.jobs if j.supersedable and not j.cancelled_because]
        if not victims:
            self._admit(key, container)
        if key is not None and container is None:
            container = self._containers[key] = _Container(key)
        job = _Job(container, supersedable)
        self._jobs.add(job)
        if container is not None:
            container.jobs.append(job)
            if len(container.jobs) > 1:
                log.debug("container %s: waiting behind %d earlier request(s)",
                          key, len(container.jobs) - 1)  # fmt: skip
        # An urgent request is in line for its slot before its victims give theirs back.
        place = self.gate.claim(urgent=True) if urgent else None
        try:
            for victim in victims:
                log.info("container %s: cancelling an earlier request (%s)", key, SUPERSEDED.msg)
                victim.cancel(SUPERSEDED)
            job.task = asyncio.create_task(self._turn(job, work, deadline, place))
            return await _owned(job)  # type: ignore[return-value]
        finally:
            if place is not None:
                place.release()  # if its task never got to it
            self._jobs.discard(job)
            if container is not None:
                container.jobs.remove(job)
                if not container.jobs:
                    del self._containers[container.key]

    def _admit(self, key: str | None, container: _Container | None) -> None:
        if len(self._jobs) >= self.total:
            raise too_many_requests(self.total)
        if container is not None and len(container.jobs) >= self.per_container:
            raise CNIError(
                TRY_AGAIN_LATER,
                f"too many requests for container {key} ({self.per_container}, "
                "maxPendingRequestsPerContainer); try again later",
            )

    async def _turn(
        self, job: _Job, work: Callable[[], Awaitable[T]], deadline: float, place: Place | None
    ) -> T:
        container = job.container
        lock = container.lock if container is not None else _FREE
        try:
            async with asyncio.timeout_at(deadline):
                if place is not None:  # urgent: the slot first, then the container
                    async with place, lock:
                        job.started = True
                        return await work()
                async with lock, self.gate.slot():
                    job.started = True
                    return await work()
        except TimeoutError:
            if job.started:
                raise CNIError(TRY_AGAIN_LATER, "the request ran past its deadline") from None
            key = container.key if container is not None else ""
            raise CNIError(
                TRY_AGAIN_LATER,
                f"the request's deadline passed while it waited behind an earlier request for "
                f"container {key}; try again later",
            ) from None

    async def cancel_all(self, reason: CNIError = SHUTTING_DOWN, grace: float = 5.0) -> None:
        """Cancel every admitted request and wait up to ``grace`` seconds for each to unwind
        (kill its plugins, roll back); then cancel again, which cuts a rollback short."""
        jobs = [job for job in self._jobs if job.task is not None]
        for job in jobs:
            job.cancel(reason)
        tasks = [job.task for job in jobs if job.task is not None]
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace)
        for task in late:
            task.cancel()
        if late:
            log.error("shutdown: %d request(s) still unwinding after %gs", len(late), grace)
            await asyncio.wait(late)


class _Free:
    """The lock of requests without a container: always free."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_FREE = _Free()


async def _owned(job: _Job) -> object:
    """Await ``job``'s task; if *we* are cancelled, cancel it and wait until it has finished.

    A second cancellation while it unwinds is absorbed (the first is re-raised afterwards), so
    the caller never gets control back while the request's plugins may still run.
    """
    task = job.task
    assert task is not None
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is None or not current.cancelling():
            # Not us: the task itself was cancelled, by a superseding DEL or by shutdown.
            reason = job.cancelled_because or internal("the request was cancelled")
            raise CNIError(reason.code, reason.msg, reason.details) from None  # a fresh one
        job.cancel(CLIENT_GONE)
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        raise


class RequestGate:
    """At most ``limit`` CNI requests run at once (``None``: no limit); the rest wait in order.

    An *urgent* request (a DEL) waits before every non-urgent one: cleanup must not queue behind
    the ADDs it is meant to clean up, which may each hang until their deadline.
    """

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self._running = 0
        self._urgent: deque[asyncio.Future[None]] = deque()
        self._normal: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(not f.done() for f in (*self._urgent, *self._normal))

    def claim(self, *, urgent: bool = False) -> Place:
        """Take a place now: a slot if one is free and nobody waits, else a place in line.

        Synchronous, so a caller can be in line *before* it does what frees a slot (a DEL
        cancelling the ADD it supersedes). Enter the place to wait for and hold the slot.
        """
        turn = asyncio.get_running_loop().create_future()
        if self._limit is None:
            turn.set_result(None)
            return Place(None, turn)
        if self._running < self._limit and not self.waiting:
            self._running += 1
            turn.set_result(None)
        else:
            (self._urgent if urgent else self._normal).append(turn)
            # The one sign that a request is held back by the limit, not by its plugins: what
            # an operator sees waiting (and what a test waits for, instead of a sleep).
            log.debug(
                "connectionLimit %d reached: waiting for a slot (%d in line)",
                self._limit, self.waiting,
            )  # fmt: skip
        return Place(self, turn)

    def slot(self, *, urgent: bool = False) -> Place:
        """``async with gate.slot():`` -- claim a place and hold it for the block."""
        return self.claim(urgent=urgent)

    def _release(self) -> None:
        for waiters in (self._urgent, self._normal):
            while waiters:
                turn = waiters.popleft()
                if not turn.done():
                    turn.set_result(None)  # the slot passes on; the count stays
                    return
        self._running -= 1


class Place:
    """A claimed slot or place in line of a :class:`RequestGate`; released exactly once."""

    __slots__ = ("_done", "_gate", "_turn")

    def __init__(self, gate: RequestGate | None, turn: asyncio.Future[None]) -> None:
        self._gate = gate
        self._turn = turn
        self._done = False

    async def __aenter__(self) -> None:
        try:
            await self._turn
        except asyncio.CancelledError:
            self.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Give the slot back, or leave the line; a no-op the second time."""
        if self._done:
            return
        self._done = True
        if self._turn.done() and not self._turn.cancelled():
            if self._gate is not None:
                self._gate._release()
        else:
            self._turn.cancel()  # out of line: _release skips it
