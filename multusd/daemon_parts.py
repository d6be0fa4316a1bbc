"""What the supervisor starts, each part built from the daemon config as a context manager.

``multusd/daemon.py`` decides the order, the phases and the exit code; this module decides what
each part is made of, so that the supervisor's exit stack can unwind each one on its own way out:

* :func:`bound`: the instance lock and the unix socket, bound once the daemon is known to run as
  root, kept at its path while serving (``server.socketguard``), removed on exit;
* :func:`cluster_or_none`: the API client and the pod and NAD caches (a bounded wait for them
  to sync), and what ``/readyz`` says of them (:func:`ready_reason`); ``None`` without
  Kubernetes (:func:`wants_kubernetes`); its credentials from :func:`api_config` (with
  ``perNodeCertificate``, the node's own certificate, renewed meanwhile);
* :func:`metrics_site`: the Prometheus site, or a recorder that records nothing;
* :func:`serving`: the services the commands run with (the plugin executor, pod and NAD
  lookups, events), the handlers and the API's site on the bound socket, and the probes' site.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

from multusd.cni.invoke import SubprocessExecutor
from multusd.commands.context import Services
from multusd.config.daemon import DaemonConfig
from multusd.config.readiness import ReadinessSettings, stat_per_request
from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s.apiconfig import ApiConfig, load_api_config
from multusd.k8s.certs.config import per_node_settings
from multusd.k8s.client import ClientSettings
from multusd.k8s.cluster import Cluster, running_cluster
from multusd.k8s.devices import device_map_for_pod_object
from multusd.k8s.nads import NadLookup
from multusd.k8s.pods import PodLookup, PodLookupSettings
from multusd.metrics import HEADER_TIMEOUT as METRICS_HEADER_TIMEOUT
from multusd.metrics import SHUTDOWN_TIMEOUT as METRICS_SHUTDOWN_TIMEOUT
from multusd.metrics import Metrics, Recorder
from multusd.networks.nad_delegates import KubeNetworks
from multusd.server.concurrency import RequestGate
from multusd.server.handlers import DaemonState, Handlers
from multusd.server.health import HOST as HEALTH_HOST
from multusd.server.health import health_site
from multusd.server.listener import SocketSite, socket_server
from multusd.server.runner import runner_options
from multusd.server.socket import InstanceLock, bind_socket, prepare_socket_dir
from multusd.server.socketguard import SocketGuard

log = logging.getLogger(__name__)


def wants_kubernetes(config: DaemonConfig, environ: Mapping[str, str]) -> bool:
    """Kubernetes mode when there is a way to reach an API server; else delegates from disk.

    Upstream always requires the in-cluster client; we also run without one (demo, local
    development, and the no-Kubernetes mode upstream's thin plugin has).
    """
    per_node = config.per_node_certificate
    return bool(
        config.kubeconfig
        or environ.get("KUBECONFIG")
        or environ.get("KUBERNETES_SERVICE_HOST")
        or (per_node is not None and per_node.enabled)  # the bootstrap kubeconfig's server
    )


@contextlib.contextmanager
def bound(config: DaemonConfig) -> Iterator[SocketGuard]:
    """The lock first (a second daemon is refused even when the first's socket file is gone),
    then the socket; on exit the socket file goes before the lock, so that a daemon starting
    the moment the lock is free finds no socket of ours."""
    if os.geteuid() != 0:
        raise StartupError(
            "failed to run multus-daemon with root: permission denied, "
            f"now running in uid: {os.geteuid()}"
        )
    lock = InstanceLock.acquire(config.socket_path)
    try:
        lock.answer(asyncio.get_running_loop())
        prepare_socket_dir(config.socket_dir)
        guard = SocketGuard(bind_socket(config.socket_path))
        try:
            yield guard
        finally:
            guard.close()
    finally:
        lock.close()


@contextlib.asynccontextmanager
async def api_config(
    config: DaemonConfig, environ: Mapping[str, str], *, on_failure: Callable[[str], None]
) -> AsyncIterator[ApiConfig]:
    """Where the API server is, and who the daemon is there, for as long as the block runs.

    With ``perNodeCertificate`` enabled: the node's own client certificate, requested with the
    bootstrap kubeconfig and renewed while the block runs (``multusd.k8s.certs``, imported only
    then: its cryptography costs ~10 MiB); its settings are checked in any case, with
    upstream's texts. Otherwise the daemon config's ``kubeconfig``, ``$KUBECONFIG``, or the
    in-cluster config."""
    per_node = per_node_settings(config.per_node_certificate, environ)
    if per_node is not None:
        from multusd.k8s.certs.pernode import per_node_api_config

        async with per_node_api_config(per_node, on_failure=on_failure) as node_config:
            yield node_config
        return
    try:
        loaded = await load_api_config(config.kubeconfig, environ)
    except StartupError:
        raise
    except Exception as exc:
        raise StartupError(f"failed to create kube client: {exc}", EXIT_SERVER) from exc
    yield loaded


@contextlib.asynccontextmanager
async def cluster_or_none(
    config: DaemonConfig, environ: Mapping[str, str], state: DaemonState, stop: asyncio.Event
) -> AsyncIterator[Cluster | None]:
    if not wants_kubernetes(config, environ):
        log.info("no kubeconfig and not in a cluster: serving delegates from disk only")
        state.ready_reason = "no Kubernetes"
        yield None
        return

    def failed(reason: str) -> None:
        log.error("%s: exiting", reason)
        state.failure = reason
        stop.set()

    async with api_config(config, environ, on_failure=failed) as cluster_config:
        log.info("Kubernetes API %s (%s)", cluster_config.server, cluster_config.source)

        settings = ClientSettings(
            qps=config.kube_client_qps,
            burst=config.kube_client_burst,
            protobuf_pods=config.kube_client_protobuf,
        )
        node = environ.get("MULTUS_NODE_NAME", "")
        if not node:
            log.error("MULTUS_NODE_NAME is not set: caching every pod of the cluster")
        async with running_cluster(
            cluster_config, settings, node_name=node, on_failure=failed
        ) as c:
            log.info(
                "waiting for the caches (%s) for up to %gs",
                ", ".join(r.name for r in c.reflectors),
                config.cache_sync_timeout,
            )
            if not await c.wait_synced(config.cache_sync_timeout):
                log.error(
                    "failed to sync pod/NAD caches: not synced after %gs: serving anyway",
                    config.cache_sync_timeout,
                )

            def refresh() -> None:
                state.ready_reason = ready_reason(c, config.cache_sync_timeout)

            refresh()
            c.client.contacts.on_change = refresh  # flips only: a watch lost or back, an outage
            try:
                yield c
            finally:
                c.client.contacts.on_change = None


def ready_reason(cluster: Cluster, sync_timeout: float) -> str:
    """What ``/readyz`` says of the caches: ``caches synced``, or why not, then one phrase per
    cache that is failing against the API server now (its status code stays 200: a pod in the
    cache can still be served, and the shim must not refuse it)."""
    health = cluster.health()
    if health.synced:
        base = "caches synced"
    else:
        base = f"caches not synced after {sync_timeout:g}s: serving anyway"
    return "; ".join([base, *health.problems()])


@contextlib.asynccontextmanager
async def serving(
    sock: SocketGuard, config: DaemonConfig, raw: dict[str, Any], state: DaemonState,
    *, cluster: Cluster | None, metrics: Recorder, cancel_timeout: float,
) -> AsyncIterator[SocketSite]:  # fmt: skip
    """Serve ``/cni`` on the bound socket until the context exits (the supervisor keeps the
    socket at its path meanwhile: ``SocketGuard.keep`` on the site yielded).

    On exit, every request still running is cancelled through its queue (its plugins killed);
    a handler still running after that gets ``cancel_timeout`` to return and ``cancel_timeout``
    more before aiohttp cancels it (its ``shutdown_timeout``, whose default, 60 s for each, is
    what once made a hung plugin hold SIGTERM for up to two minutes).
    """
    pods = events = networks = None
    if cluster is not None:
        pods = PodLookup(
            cluster.client,
            cluster.pods,
            PodLookupSettings(
                live_get_timeout=config.pod_get_timeout,
                direct_get=config.benchmark_direct_pod_get,
            ),
        )
        events = cluster.events
        networks = KubeNetworks(
            nads=NadLookup(cluster.client, cluster.nads, get_timeout=config.pod_get_timeout),
            events=events,
            devices=functools.partial(
                device_map_for_pod_object,
                claims=cluster.client,  # DRA claims, read only for pods that have some
                socket_path=config.kubelet_pod_resources_socket,
                checkpoint_path=config.device_checkpoint_file,
            ),
        )
    services = Services(
        executor=SubprocessExecutor(chroot_dir=config.chroot_dir or None),
        plugin_timeout=config.plugin_timeout,
        pods=pods,
        events=events,
        networks=networks,
        metrics=metrics,
    )
    handlers = Handlers(
        services=services,
        daemon_raw=raw,
        config=config,
        ignore_readiness=config.is_auto,
        state=state,
        gate=RequestGate(config.connection_limit),
        readiness_check=_readiness_stat(config),
    )
    async with socket_server(
        sock.current.sock, handlers, cancel_timeout=cancel_timeout, metrics=metrics
    ) as site:
        try:
            log.info("listening on %s (%s)", config.socket_path, state.ready_reason)
            async with contextlib.AsyncExitStack() as probes:
                if config.health_port is not None:
                    port = await probes.enter_async_context(
                        health_site(handlers, config.health_port)
                    )
                    log.info("probes on %s:%d (/healthz, /readyz)", HEALTH_HOST, port)
                yield site
        finally:
            if state.in_flight:
                log.error("shutdown: cancelling %d request(s)", state.in_flight)


def _readiness_stat(config: DaemonConfig) -> Callable[[], Awaitable[None]] | None:
    """The per-request readiness stat of ``benchmarkReadinessStat``, or ``None`` (the watch)."""
    path = config.readiness_indicator_file
    if not (path and config.benchmark_readiness_stat):
        return None
    settings = ReadinessSettings()

    async def check() -> None:
        # One stat, as the seed's; only a missing file costs more: a line saying why the
        # request stalls (up to the 45 s budget), where the seed left an ADD silently waiting.
        if await asyncio.to_thread(os.path.exists, path):
            return
        log.info(
            "readiness indicator file %s is missing: the request waits up to %gs for it "
            "(benchmarkReadinessStat)",
            path, settings.startup_timeout,
        )  # fmt: skip
        await stat_per_request(path, settings)

    return check


@contextlib.asynccontextmanager
async def metrics_site(
    config: DaemonConfig, state: DaemonState, cluster: Cluster | None
) -> AsyncIterator[Recorder]:
    """Prometheus metrics on ``metricsPort`` when it is set, with the profiling pages under
    ``/debug/`` when ``enablePprof`` is true too (upstream: pprof); a no-op recorder otherwise."""
    if config.metrics_port is None:
        if config.enable_pprof:  # upstream ignores it silently; one line says why no pages
            log.info("enablePprof is set without metricsPort: no profiling endpoints")
        yield Recorder()
        return
    metrics = Metrics(in_flight=lambda: state.in_flight)
    if cluster is not None:
        metrics.watch_bucket(cluster.client.bucket.statistics)
        metrics.watch_cache("pods", cluster.pods.statistics)
        metrics.watch_cache("network-attachment-definitions", cluster.nads.statistics)
        cluster.client.on_bucket_wait = metrics.observe_bucket_wait
    options = runner_options(
        header_timeout=METRICS_HEADER_TIMEOUT, shutdown_timeout=METRICS_SHUTDOWN_TIMEOUT
    )
    pprof = config.enable_pprof
    async with metrics.serve(config.metrics_port, options=options, profiling=pprof) as port:
        log.info("metrics on :%d/metrics", port)
        if pprof:  # upstream's Verbosef line; the pages are under /debug/ (operations.md)
            log.info("pprof endpoints enabled on metrics port %d", port)
        yield metrics
