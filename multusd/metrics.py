"""Prometheus metrics on ``metricsPort`` (docs/upstream.md, "Metrics"), plus what upstream cannot
tell you.

Upstream exports one counter, ``multus_server_request_total``; we keep its name, help, labels
and label values so existing dashboards work, and add the numbers operators actually ask for
when pods are slow to start: how long each CNI command takes, which phase of it (pod lookup,
each delegate, the status write), how long requests wait for the API token bucket, how many
requests are in flight, and whether the informer caches are synced.

Cheap when unused: :class:`Recorder` is a do-nothing stand-in the handlers can always call, and
``prometheus_client`` is imported only when a :class:`Metrics` is built (i.e. only with
``metricsPort`` set). Gauges that mirror state we already keep (in-flight count, cache sizes,
bucket queue) are read at scrape time from callables, so nothing on the request path updates
them. Each :class:`Metrics` has its own registry: two daemons in one test process do not clash.

With ``enablePprof`` the same site serves :class:`DebugPages` under ``/debug/``: upstream's pprof
pages in Python's terms (``multusd.profiling`` does the work; docs/operations.md, "Profiling").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web

from multusd import profiling, timeline

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from prometheus_client import CollectorRegistry, Counter, Histogram
    from prometheus_client.metrics_core import Metric

__all__ = [
    "HANDLER_LABELS",
    "BucketStats",
    "CacheStats",
    "DebugPages",
    "Metrics",
    "Recorder",
]

# Upstream's ``handler`` label values: the four routes, everything else is "NotFound" (its
# catch-all "/" route). A wrong method on a known route counts under that route, as upstream.
HANDLER_LABELS = frozenset({"/cni", "/delegate", "/healthz", "/readyz"})

# Seconds. CNI commands span milliseconds (cached DEL) to minutes (slow IPAM), hence the range.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
HEADER_TIMEOUT = 10.0
"""Seconds a scrape connection may take to send its request head (upstream's metrics server:
Go's ``ReadHeaderTimeout``, 10 s), and may stay idle between scrapes."""
SHUTDOWN_TIMEOUT = 1.0
"""Seconds a scrape still being answered gets when the site closes."""
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class CacheStats(Protocol):
    """What we read from a cache at scrape time (``multusd.k8s.store.StoreStatistics``)."""

    @property
    def size(self) -> int: ...
    @property
    def synced(self) -> bool: ...


class BucketStats(Protocol):
    """What we read from the token bucket at scrape time (``BucketStatistics``)."""

    @property
    def tokens(self) -> float: ...
    @property
    def waiting(self) -> int: ...


def handler_label(path: str) -> str:
    return path if path in HANDLER_LABELS else "NotFound"


class Recorder:
    """The recording API, doing nothing: what the daemon holds when ``metricsPort`` is unset,
    so call sites need no ``if metrics:``."""

    def count_request(self, handler: str, method: str, code: int) -> None:
        """One HTTP request answered (upstream's counter); normally via :meth:`middleware`."""

    def observe_command(self, command: str, seconds: float, *, ok: bool) -> None:
        """One CNI command (ADD, DEL, ...) finished after ``seconds``."""

    def observe_phase(self, phase: str, seconds: float, plugin: str = "") -> None:
        """One phase of a command took ``seconds`` (``plugin``: the delegate's, if any)."""

    def observe_bucket_wait(self, seconds: float) -> None:
        """A caller waited ``seconds`` for an API token (``TokenBucket.acquire()``'s result)."""

    @contextlib.contextmanager
    def phase(self, phase: str, plugin: str = "") -> Iterator[None]:
        """Time the block as ``phase`` (``pod_lookup``, ``delegate``, ``status_write``), failed
        or not, for Prometheus and the request's timeline. A plain context manager, so it
        wraps ``await``s too::

            with metrics.phase("delegate", plugin="macvlan"):
                result = await delegate_add(...)
        """
        started = time.monotonic()
        try:
            with timeline.phase(f"{phase}[{plugin}]" if plugin else phase):
                yield
        finally:
            self.observe_phase(phase, time.monotonic() - started, plugin)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Count every answered request under upstream's labels; add it to an app's middlewares
        *outside* (before) the one that shapes errors (``server.app``), so it sees the final
        status."""
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            self.count_request(handler_label(request.path), request.method, exc.status)
            raise
        self.count_request(handler_label(request.path), request.method, response.status)
        return response


@dataclass
class _Sources:
    """Scrape-time state, registered after construction as the daemon builds its parts."""

    in_flight: Callable[[], int] | None = None
    bucket: Callable[[], BucketStats] | None = None
    caches: dict[str, Callable[[], CacheStats]] = field(default_factory=dict)


class _StateCollector:
    """Reads the callables at scrape time (a prometheus_client custom collector)."""

    def __init__(self, sources: _Sources) -> None:
        self._sources = sources

    def describe(self) -> Iterable[Metric]:
        return ()  # dynamic: nothing to check for name clashes at registration

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        sources = self._sources
        if sources.in_flight is not None:
            yield GaugeMetricFamily(
                "multus_server_requests_in_flight",
                "CNI and /delegate requests being served",
                value=sources.in_flight(),
            )
        if sources.bucket is not None:
            stats = sources.bucket()
            yield GaugeMetricFamily(
                "multus_k8s_rate_limiter_waiting",
                "Callers queued for a Kubernetes API token",
                value=stats.waiting,
            )
            yield GaugeMetricFamily(
                "multus_k8s_rate_limiter_tokens",
                "Kubernetes API tokens available now",
                value=stats.tokens,
            )
        if sources.caches:
            size = GaugeMetricFamily(
                "multus_k8s_cache_objects", "Objects in an informer cache", labels=["cache"]
            )
            synced = GaugeMetricFamily(
                "multus_k8s_cache_synced",
                "1 once an informer cache has completed its first list",
                labels=["cache"],
            )
            for name, read in sorted(self._sources.caches.items()):
                cache = read()
                size.add_metric([name], cache.size)
                synced.add_metric([name], 1.0 if cache.synced else 0.0)
            yield size
            yield synced


class Metrics(Recorder):
    """The real recorder, with its own registry and the ``/metrics`` server."""

    def __init__(
        self,
        *,
        in_flight: Callable[[], int] | None = None,
        bucket: Callable[[], BucketStats] | None = None,
        caches: Mapping[str, Callable[[], CacheStats]] | None = None,
        process: bool = True,
    ) -> None:
        """``process``: also export ``process_*``/``python_*`` (upstream's default registry
        carries the Go runtime and process collectors)."""
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            GCCollector,
            Histogram,
            PlatformCollector,
            ProcessCollector,
        )

        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=True)
        self._sources = _Sources(in_flight, bucket, dict(caches or {}))
        self._requests: Counter = Counter(
            "multus_server_request_total",
            "Counter of HTTP requests",
            ["handler", "code", "method"],
            registry=self.registry,
        )
        self._commands: Histogram = Histogram(
            "multus_cni_request_duration_seconds",
            "Time to serve a CNI command, by command and result (ok or error)",
            ["command", "result"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._phases: Histogram = Histogram(
            "multus_cni_phase_duration_seconds",
            "Time spent in one phase of a CNI command (pod_lookup, delegate, status_write)",
            ["phase", "plugin"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._bucket_wait: Histogram = Histogram(
            "multus_k8s_rate_limiter_wait_seconds",
            "Time a Kubernetes API call waited for a token of the client's QPS/burst bucket",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StateCollector(self._sources))
        if process:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    # --- scrape-time sources ---------------------------------------------------------------

    def watch_in_flight(self, read: Callable[[], int]) -> None:
        self._sources.in_flight = read

    def watch_bucket(self, read: Callable[[], BucketStats]) -> None:
        self._sources.bucket = read

    def watch_cache(self, name: str, read: Callable[[], CacheStats]) -> None:
        self._sources.caches[name] = read

    # --- recording ---------------------------------------------------------------------------

    def count_request(self, handler: str, method: str, code: int) -> None:
        self._requests.labels(handler=handler, code=str(code), method=method.lower()).inc()

    def observe_command(self, command: str, seconds: float, *, ok: bool) -> None:
        result = "ok" if ok else "error"
        self._commands.labels(command=command, result=result).observe(seconds)

    def observe_phase(self, phase: str, seconds: float, plugin: str = "") -> None:
        self._phases.labels(phase=phase, plugin=plugin).observe(seconds)

    def observe_bucket_wait(self, seconds: float) -> None:
        self._bucket_wait.observe(seconds)

    # --- serving -----------------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text exposition of everything registered."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        # Tiny registry: rendering inline costs well under a millisecond.
        return web.Response(body=self.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def app(self, *, profiling: bool = False) -> web.Application:
        """``/metrics``; with ``profiling`` (``enablePprof``), :class:`DebugPages` too."""
        app = web.Application()
        app.router.add_get("/metrics", self._serve_metrics)
        if profiling:
            DebugPages().add_routes(app)
        return app

    @contextlib.asynccontextmanager
    async def serve(
        self,
        port: int,
        host: str = "0.0.0.0",
        *,
        options: Mapping[str, Any] | None = None,
        profiling: bool = False,
    ) -> AsyncIterator[int]:
        """Serve ``/metrics`` on ``host:port`` (upstream: all addresses) for the block's
        duration, yielding the bound port (port 0 picks a free one); leaving the block closes
        the listener and any open scrape connections. ``profiling``: ``/debug/`` as well.

        ``options`` are the ``web.AppRunner``'s (the daemon passes its listeners' own,
        ``server.runner``); by default no access log and :data:`HEADER_TIMEOUT`.
        """
        defaults: dict[str, Any] = {
            "handle_signals": False,
            "access_log": None,
            "keepalive_timeout": HEADER_TIMEOUT,
            "shutdown_timeout": SHUTDOWN_TIMEOUT,
        }
        runner = web.AppRunner(
            self.app(profiling=profiling), **(dict(options) if options is not None else defaults)
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            yield site.port
        finally:
            await runner.cleanup()


_INDEX = f"""multusd profiling (enablePprof): Go's /debug/pprof/ pages, in Python's terms

/debug/tasks      every task of the event loop with the coroutines it waits in, and every
                  thread's stack (Go: goroutine?debug=2)
/debug/profile    a CPU profile (cProfile) of the event loop thread, as pstats text
                  ?seconds=N  how long, at most {profiling.MAX_PROFILE_SECONDS:g} \
(default {profiling.DEFAULT_PROFILE_SECONDS:g}); one profile at a time
                  ?limit=N    rows (default {profiling.DEFAULT_PROFILE_LIMIT})
                  ?sort=      {" | ".join(profiling.PROFILE_SORTS)}
                  ?format=pstats  the raw profile, for python -m pstats or snakeviz
/debug/heap       the largest Python allocation sites (tracemalloc; the first request starts
                  tracing, which then costs memory and CPU until ?stop=1)
                  ?limit=N    sites (default {profiling.DEFAULT_HEAP_LIMIT})
                  ?by=        {" | ".join(profiling.HEAP_GROUPS)}
                  ?frames=N   frames kept per allocation when this request starts tracing
                  ?stop=1     stop tracing after this report
"""


class DebugPages:
    """``/debug/`` on the metrics port (``enablePprof``): the HTTP side of
    ``multusd.profiling``. Every page is plain text; what costs runs in a worker thread; a bad
    query is a 400 saying which parameter, a second CPU profile a 409."""

    def __init__(self) -> None:
        self._cpu = profiling.CpuProfiler()
        self._heap = asyncio.Lock()  # one snapshot at a time: ?stop=1 must not cut another

    def add_routes(self, app: web.Application) -> None:
        # No HEAD: a HEAD of /debug/profile would take a profile nobody reads.
        for path, handler in (
            ("/debug", self.index),
            ("/debug/", self.index),
            ("/debug/tasks", self.tasks),
            ("/debug/profile", self.profile),
            ("/debug/heap", self.heap),
        ):
            app.router.add_get(path, handler, allow_head=False)

    async def index(self, request: web.Request) -> web.Response:
        return web.Response(text=_INDEX)

    async def tasks(self, request: web.Request) -> web.Response:
        loop = asyncio.get_running_loop()
        stacks = profiling.capture_tasks(loop), profiling.capture_threads()
        return web.Response(text=await _off_loop("the stacks", profiling.render_stacks, *stacks))

    async def profile(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            seconds = profiling.number(
                query,
                "seconds",
                profiling.DEFAULT_PROFILE_SECONDS,
                profiling.MAX_PROFILE_SECONDS,
            )
            limit = profiling.integer(
                query, "limit", profiling.DEFAULT_PROFILE_LIMIT, profiling.MAX_LIMIT
            )
            sort = profiling.choice(query, "sort", profiling.PROFILE_SORTS)
            raw = profiling.choice(query, "format", ("text", "pstats")) == "pstats"
        except profiling.BadQuery as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from None
        try:
            profiler = await self._cpu.profile(seconds)
        except profiling.ProfilerBusy as exc:
            raise web.HTTPConflict(
                text=f"{exc}\n", headers={"Retry-After": str(math.ceil(exc.retry_after))}
            ) from None
        if raw:
            body = await _off_loop("the profile", profiling.dump_profile, profiler)
            return web.Response(
                body=body,
                content_type="application/octet-stream",
                headers={"Content-Disposition": 'attachment; filename="multusd.pstats"'},
            )
        text = await _off_loop(
            "the profile",
            functools.partial(
                profiling.render_profile, profiler, seconds=seconds, limit=limit, sort=sort
            ),
        )
        return web.Response(text=text)

    async def heap(self, request: web.Request) -> web.Response:
        query = request.query
        try:
            limit = profiling.integer(
                query, "limit", profiling.DEFAULT_HEAP_LIMIT, profiling.MAX_LIMIT
            )
            group_by = profiling.choice(query, "by", profiling.HEAP_GROUPS)
            frames = profiling.integer(query, "frames", 1, profiling.MAX_FRAMES)
            stop = profiling.choice(query, "stop", ("0", "1")) == "1"
        except profiling.BadQuery as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from None
        report = functools.partial(
            profiling.heap_report, limit=limit, group_by=group_by, frames=frames, stop=stop
        )
        async with self._heap:
            return web.Response(text=await _off_loop("the heap report", report))


async def _off_loop(what: str, work: Callable[..., _T], *args: Any) -> _T:
    """``work(*args)`` in a worker thread; its failure a 500 that says what failed."""
    try:
        return await asyncio.to_thread(work, *args)
    except Exception as exc:
        log.warning("profiling: %s failed: %s: %s", what, type(exc).__name__, exc)
        raise web.HTTPInternalServerError(
            text=f"{what} failed: {type(exc).__name__}: {exc}\n"
        ) from None
