"""Plugin executions admitted against the memory headroom of the daemon's own cgroup.

Every plugin the daemon runs is its child, so its memory is charged to the daemon's memory
cgroup. Upstream's DaemonSet caps that cgroup at 50 MiB, daemon and plugins together; a burst of
ADDs that starts a plugin per request at once crosses the limit, and the kernel's OOM killer
then picks the biggest process in the cgroup: the daemon, not a plugin. Every request in
flight is lost with it, and DELs through the shim find nobody to clean up (docs/reliability.md,
docs/performance.md "Under a memory limit").

So before a plugin is started, :class:`MemoryAdmission` reads how much the cgroup may still
grow and admits the execution only when that covers one more plugin on top of those already
running; otherwise the execution waits its turn (FIFO), woken when a running plugin finishes or
on a short timer, until the request's deadline, which ends it with CNI code 11 ("try again
later": the runtime retries). A cgroup without a limit (v1's ~2**63, v2's ``max``) means no
admission control and no cost: no file is read per execution.

How much the cgroup may still grow is read by :mod:`multusd.cni.cgroup` (cgroup v1 or v2,
found from ``mountinfo``; usage less the page cache the kernel can reclaim).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from cni_shim.errors import TRY_AGAIN_LATER, CNIError
from multusd.cni.cgroup import CgroupMemory, Reading, find_memory_cgroup

log = logging.getLogger(__name__)

MiB = 1024 * 1024

PLUGIN_EXEC_BYTES = 7 * MiB // 2
"""What one plugin execution adds to the cgroup, at most: measured, then rounded up (3.5 MiB).

Measured here (Debian's containernetworking-plugins 1.1.1, cgroup v1, by hand: plugins run in a
fresh memory cgroup, its ``memory.max_usage_in_bytes`` read around them): one ``bridge`` ADD,
with the ``host-local`` it runs as its IPAM child, peaks at 3.2 MiB (2.3 MiB once the binaries
are in the page cache); 10 or 20 at once cost 1.5-2.0 MiB each; ``host-local`` alone ~1 MiB.
Their peak RSS (``VmHWM``, 13-14 MiB) is no measure of the charge: most of it is the binaries'
text, page cache shared by every copy and charged once. A plugin's interfaces stay charged after
it exits: a bridge pod's veth pair and its kernel objects hold ~86 KiB of kernel memory in the
cgroup until its DEL (50 ADDs one at a time: +4.2 MiB, +0.8 left after their DELs); the usage
read counts them. Heavier delegates need a bigger figure (the ``estimate`` parameter)."""

RESERVE_BYTES = PLUGIN_EXEC_BYTES
"""Headroom no ADD may take: one DEL's worth. A DEL is what gives memory back -- each pod's
interfaces hold kernel memory in this cgroup until its DEL runs (~86 KiB a bridge pod, see
above) -- so if ADDs could fill the cgroup, the DELs that would empty it could not start, and
every one would wait for its deadline (measured with no reserve for the first ADD: 200 of 200
DELs refused, 145 caches and 136 addresses left). With this reserve ADDs stop while a DEL still
fits, and DELs run one at a time at least. It also covers the daemon itself as the requests of
a burst are read (``server.intake`` reads at most ``maxActiveRequests``, ~50 KiB each).

The probes are not covered: our manifests' probes are the kubelet's ``httpGet`` of
``healthPort`` (``server.health``), no process in the cgroup. An exec probe (``multusd probe``)
costs the cgroup ~5 MiB per run, and the kubelet starts liveness and readiness on the same
clock; under a limit as tight as upstream's 50 Mi, exec probes need that much more room than
this reserve keeps (docs/performance.md, "Under a memory limit")."""

POLL_INTERVAL = 0.05
"""How often the head of the queue looks again when no running plugin has finished meanwhile
(memory also comes back from the daemon's own garbage and from reclaim)."""

MAX_WAIT = 120.0
"""Bound on the wait of an execution that has no request deadline (the server's default
request deadline, ``requestTimeoutSeconds``)."""


class _Waiter:
    """One queued execution: woken (its future set) when it becomes the head or room frees."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(self) -> None:
        if not self.future.done():
            self.future.set_result(None)

    def rearm(self) -> None:
        if self.future.done():
            self.future = asyncio.get_running_loop().create_future()


class MemoryAdmission:
    """Admits plugin executions while the cgroup's headroom covers one more (module docstring).

    An execution is admitted when ``headroom >= estimate x (running + 1) + reserve``:

    * each running plugin is counted at ``estimate`` although the usage read may already
      include part of it, because one that has just been started has not been charged yet, and
      admitting on a reading taken before that charge lands is how 30 starts at once would all
      see the same free memory. The bound is conservative by up to one estimate per running
      plugin; on two cores a handful of plugins at once already uses the CPU;
    * ``reserve`` (:data:`RESERVE_BYTES`) keeps one DEL's worth free of ADDs, and covers what
      grows without asking: the daemon itself as the requests of a burst are read.
      A DEL's execution may use it. A DEL gives memory back: its pod's interfaces hold kernel
      memory in this cgroup until it runs, so DELs that waited for the reserve could wait for
      good once enough pods are up. And a DEL refused is a DEL lost: the shim answers 0 to any
      daemon error on DEL (upstream's rule), and the runtime does not ask again.

    Waiting is FIFO: only the head of the queue checks, so a stream of new executions cannot
    starve an old one, and the files are read once per turn, not once per waiter. Executions
    for a DEL (``urgent``) queue ahead of the others, FIFO among themselves: a DEL gives back
    what its pod's interfaces hold (~86 KiB per bridge pod of kernel memory, charged to this
    cgroup since its plugin made them), and a rollback must not wait behind new ADDs.
    """

    def __init__(
        self,
        memory: CgroupMemory | None,
        *,
        estimate: int = PLUGIN_EXEC_BYTES,
        reserve: int = RESERVE_BYTES,
        poll_interval: float = POLL_INTERVAL,
        max_wait: float = MAX_WAIT,
    ) -> None:
        self.memory = memory
        self.estimate = estimate
        self.reserve = reserve
        self.poll_interval = poll_interval
        self.max_wait = max_wait
        self.running = 0
        self.waited = 0
        """Executions that had to queue (a count, for tests and logs)."""
        self.refused = 0
        """Executions whose deadline passed in the queue."""
        self._urgent: collections.deque[_Waiter] = collections.deque()
        self._normal: collections.deque[_Waiter] = collections.deque()
        self._squeezed = False
        self._last: Reading | None = None

    @property
    def enabled(self) -> bool:
        return self.memory is not None

    @property
    def queued(self) -> int:
        return len(self._urgent) + len(self._normal)

    @contextlib.asynccontextmanager
    async def admitted(
        self, deadline: float | None, what: str = "plugin", *, urgent: bool = False
    ) -> AsyncIterator[None]:
        """Hold one execution's place while the block runs; ``deadline`` is loop time.

        Raises :class:`CNIError` code 11 when the deadline (or :data:`MAX_WAIT` without one)
        passes before there is room.
        """
        if self.memory is None:
            yield
            return
        await self._acquire(deadline, what, urgent)
        try:
            yield
        finally:
            self.running -= 1
            self._wake_head()

    def _head(self) -> _Waiter | None:
        if self._urgent:
            return self._urgent[0]
        return self._normal[0] if self._normal else None

    def _room(self, urgent: bool) -> bool:
        """Whether one more fits now (a DEL's without the reserve); the reading is kept for
        the log and the refusal."""
        assert self.memory is not None
        try:
            reading = self.memory.read()
        except (OSError, ValueError) as exc:
            # A cgroup file gone or garbled (the cgroup moved?): never block plugins on it.
            log.warning("memory admission: cannot read the cgroup (%s); admitting", exc)
            return True
        self._last = reading
        need = self.estimate * (self.running + 1) + (0 if urgent else self.reserve)
        return reading is None or reading.headroom >= need

    async def _acquire(self, deadline: float | None, what: str, urgent: bool) -> None:
        loop = asyncio.get_running_loop()
        behind = bool(self._urgent) if urgent else self.queued > 0
        if not behind and self._room(urgent):
            self.running += 1
            if self._squeezed and not self.queued:
                self._squeezed = False
                log.info("memory admission: room again, plugins start at once")
            return
        at = deadline if deadline is not None else loop.time() + self.max_wait
        waiter = _Waiter()
        queue = self._urgent if urgent else self._normal
        queue.append(waiter)
        self.waited += 1
        if not self._squeezed and self._last is not None:
            self._squeezed = True
            log.info(
                "memory admission: %.1f MiB free under the %.1f MiB limit of %s with %d "
                "plugin(s) running: plugin executions queue",
                self._last.headroom / MiB, self._last.limit / MiB, self._last.path, self.running,
            )  # fmt: skip
        try:
            while True:
                head = self._head() is waiter
                if head and self._room(urgent):
                    queue.popleft()
                    self.running += 1
                    self._wake_head()
                    return
                remaining = at - loop.time()
                if remaining <= 0:
                    self.refused += 1
                    raise CNIError(TRY_AGAIN_LATER, self._refusal(what))
                # The head looks again on a timer; the others sleep until they are the head.
                timeout = min(self.poll_interval, remaining) if head else remaining
                await asyncio.wait([waiter.future], timeout=timeout)
                waiter.rearm()
        except BaseException:
            was_head = self._head() is waiter
            with contextlib.suppress(ValueError):
                queue.remove(waiter)
            if was_head:
                self._wake_head()
            raise

    def _wake_head(self) -> None:
        head = self._head()
        if head is not None:
            head.wake()

    def _refusal(self, what: str) -> str:
        reading = self._last
        if reading is None:
            return f"{what} not run: no memory for it before the request's deadline"
        return (
            f"{what} not run: {reading.headroom / MiB:.1f} MiB free under the memory limit of "
            f"{reading.limit / MiB:.1f} MiB ({reading.path}) with {self.running} plugin(s) "
            f"running, {self.estimate / MiB:.1f} MiB needed per plugin and "
            f"{self.reserve / MiB:.1f} MiB kept in reserve for other than DELs, until the "
            "request's deadline"
        )


@functools.cache
def shared() -> MemoryAdmission:
    """The process's admission, found once: one cgroup, so one queue for every executor."""
    return MemoryAdmission(find_memory_cgroup())
