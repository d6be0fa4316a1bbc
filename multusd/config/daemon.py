"""``daemon-config.json``: parsed once, typed, and kept verbatim for the request-time override.

Upstream reads this one file with three decoders (daemon, config generator, per-request NetConf) and
ignores unknown keys in each, yet every top-level key still rides into each request through the
server-config override (docs/upstream.md, "Server-config override"). We therefore keep two views:
``DaemonConfig``, the typed settings the daemon acts on, and ``raw``, the exact decoded object the
override copies. Decoding follows Go (see ``multusd.config.schema``), so a file that works upstream
works here and one that fails there fails here, with one clear line.

Every key of the file the daemon acts on is declared here, the server's limits
(``requestTimeoutSeconds``, ``maxPendingRequests``, ...) included: ``multusd.server`` reads
them from ``DaemonConfig``, so a bad value stops start-up before anything runs.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from multusd.config.schema import SchemaError, check, decode, json_field
from multusd.errors import ConfigError

DEFAULT_CONFIG_PATH = "/etc/cni/net.d/multus.d/daemon-config.json"


@dataclass(frozen=True, slots=True)
class LogOptions:
    """Log rotation (lumberjack semantics upstream): sizes in MB, ages in days."""

    max_age: int | None = json_field("maxAge", None)
    max_size: int | None = json_field("maxSize", None)
    max_backups: int | None = json_field("maxBackups", None)
    compress: bool | None = json_field("compress", None)


@dataclass(frozen=True, slots=True)
class PerNodeCertificate:
    enabled: bool = json_field("enabled", False)
    bootstrap_kubeconfig: str = json_field("bootstrapKubeconfig", "")
    cert_dir: str = json_field("certDir", "")
    cert_duration: str = json_field("certDuration", "10m")


@dataclass(frozen=True, slots=True)
class NetworkKeys:
    """The Multus NetConf keys (docs/upstream.md, "Per-request NetConf") that both the daemon and
    each request read.

    The daemon config and the per-request NetConf share them because the server-config
    override copies the former over the latter; one definition keeps the defaults in step.
    """

    bin_dir: str = json_field("binDir", "/opt/cni/bin")
    conf_dir: str = json_field("confDir", "/etc/cni/multus/net.d")
    cni_dir: str = json_field("cniDir", "/var/lib/cni/multus")
    kubeconfig: str = json_field("kubeconfig", "")
    cluster_network: str = json_field("clusterNetwork", "")
    default_networks: list[str] = json_field("defaultNetworks", factory=list)
    multus_namespace: str = json_field("multusNamespace", "kube-system")
    system_namespaces: list[str] = json_field("systemNamespaces", factory=lambda: ["kube-system"])
    namespace_isolation: bool = json_field("namespaceIsolation", False)
    global_namespaces: str = json_field("globalNamespaces", "")
    retry_delete_on_error: bool = json_field("retryDeleteOnError", False)
    cni_version: str = json_field("cniVersion", "")
    readiness_indicator_file: str = json_field("readinessindicatorfile", "")
    auxiliary_cni_chain_name: str = json_field("auxiliaryCNIChainName", "")

    @property
    def global_namespace_list(self) -> list[str]:
        """``globalNamespaces`` split on commas; it *replaces* the default ``["default"]``."""
        if not self.global_namespaces:
            return ["default"]
        return [part.strip() for part in self.global_namespaces.split(",")]


@dataclass(frozen=True, slots=True)
class DaemonConfig(NetworkKeys):
    """Every key of upstream's daemon config (docs/upstream.md, "Daemon config keys") plus ours,
    with defaults.

    Keys this daemon adds are marked *multusd*; upstream ignores them, so one file serves both.
    """

    # (a) daemon process
    socket_dir: str = json_field("socketDir", "/run/multus/")
    chroot_dir: str = json_field("chrootDir", "")
    log_file: str = json_field("logFile", "")
    log_level: str = json_field("logLevel", "")
    log_to_stderr: bool = json_field("logToStderr", False)
    log_options: LogOptions | None = json_field("logOptions", None)
    metrics_port: int | None = json_field("metricsPort", None)
    health_port: int | None = json_field("healthPort", None)
    """*multusd*: serve ``/healthz`` and ``/readyz`` on ``127.0.0.1:<port>`` for the kubelet's
    ``httpGet`` probes (``server.health``: an exec probe costs the container ~5 MiB each run)."""
    enable_pprof: bool = json_field("enablePprof", False)
    connection_limit: int | None = json_field("connectionLimit", None)
    per_node_certificate: PerNodeCertificate | None = json_field("perNodeCertificate", None)

    # (b) config generator
    multus_config_file: str = json_field("multusConfigFile", "auto")
    multus_autoconfig_dir: str = json_field("multusAutoconfigDir", "")
    multus_master_cni: str = json_field("multusMasterCNI", "")
    cni_config_dir: str = json_field("cniConfigDir", "/etc/cni/net.d")
    force_cni_version: bool = json_field("forceCNIVersion", False)
    override_network_name: bool = json_field("overrideNetworkName", False)
    type: str = json_field("type", "multus-shim")
    capabilities: dict[str, bool] = json_field("capabilities", factory=dict)
    daemon_socket_dir: str = json_field("daemonSocketDir", "")

    # multusd additions
    plugin_timeout: float | None = json_field("pluginTimeoutSeconds", None)
    """*multusd*: kill a delegate plugin that runs longer than this; unset = no limit (upstream)."""
    max_request_bytes: int = json_field("maxRequestBytes", 4 * 1024 * 1024)
    """*multusd*: larger request bodies get HTTP 413."""
    kube_client_qps: float = json_field("kubeClientQPS", 50.0)
    """*multusd*: the API token bucket's rate (upstream's client: 50)."""
    kube_client_burst: int = json_field("kubeClientBurst", 50)
    """*multusd*: the API token bucket's burst (upstream's client: 50)."""
    kube_client_protobuf: bool = json_field("kubeClientProtobuf", True)
    """*multusd*: read pods as Kubernetes protobuf, JSON as the fallback (client-go's default;
    ~1.8× fewer bytes and 3-5× less CPU per listed pod). NADs stay JSON. ``false``: JSON only."""
    cache_sync_timeout: float = json_field("cacheSyncTimeoutSeconds", 20.0)
    """*multusd*: how long start-up waits for the pod and NAD caches before serving anyway."""
    kubelet_pod_resources_socket: str = json_field(
        "kubeletPodResourcesSocket", "/var/lib/kubelet/pod-resources/kubelet.sock"
    )
    """*multusd*: the kubelet pod-resources socket (device IDs for ``resourceName`` NADs)."""
    device_checkpoint_file: str = json_field(
        "deviceCheckpointFile", "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"
    )
    """*multusd*: the device-plugin checkpoint, read when the socket is absent."""
    pod_get_timeout: float = json_field("podGetTimeoutSeconds", 5.0)
    """*multusd*: timeout of the fallback pod GET (upstream: 50 ms, a reported bug)."""
    keep_config_on_exit: bool = json_field("keepConfigOnExit", False)
    """*multusd*: leave the generated ``00-multus.conf`` in place on shutdown. Upstream deletes
    it, so pods created while the daemon restarts get only the primary network; keeping it makes
    them fail (and be retried by the kubelet) until the daemon is back instead."""
    follow_primary_config: bool = json_field("followPrimaryConfig", False)
    """*multusd*, opt-in: without ``multusMasterCNI``, re-choose the primary on every change of
    ``multusAutoconfigDir`` (a new lexically-earlier config takes over; a primary gone for 5 s
    is replaced by the next candidate). Upstream, and our default, fix the primary found at
    start-up for the life of the process, so a stray file never moves new pods to another
    network (docs/compatibility.md)."""

    # multusd additions: the server's limits, how long a request may take, how many may wait,
    # how long a client may dawdle (docs/configuration.md has the table). Each must be > 0.
    request_timeout: float = json_field("requestTimeoutSeconds", 120.0)
    """*multusd*: deadline of one CNI request, waiting included; plugins are killed when it
    passes. Why 120: the kubelet gives ``RunPodSandbox`` twice its
    ``--runtime-request-timeout`` (2 min by default, so 4 min) and Stop/RemovePodSandbox the
    plain 2 min; containerd puts no timeout of its own on the CNI call. 120 s ends a hung
    request well before the kubelet gives up, leaves room for the rollback and the runtime's own
    cleanup, and is the same bound for DEL, whose caller waits 2 min. Upstream has no limit at
    all."""
    max_pending_per_container: int = json_field("maxPendingRequestsPerContainer", 16)
    """*multusd*: requests one container may have in the daemon (running or waiting); more get
    code 11. Why 16: the kubelet runs one sandbox operation per pod at a time and containerd one
    CNI call per sandbox operation, so a container normally has one or two requests (an ADD,
    then the DELs of Stop and Remove); 16 leaves room for retries while a runaway client cannot
    pile up work behind one hung container."""
    max_pending: int = json_field("maxPendingRequests", 1024)
    """*multusd*: CNI requests the daemon holds at once (running or waiting, read or not); more
    get code 11. Why 1,024: twice the ADD and DEL of every pod on a 500-pod node at once (the
    kubelet's default ``maxPods`` is 110). Beyond ``maxActiveRequests`` they wait unread,
    costing the daemon a file descriptor each."""
    max_active: int = json_field("maxActiveRequests", 32)
    """*multusd*: CNI requests read and in the daemon at once; more wait unread
    (``server.intake``). Why 32: a request read costs the daemon ~50 KiB until it is answered,
    one not yet read nothing (the kernel charges it to the client). 32 keep two cores' worth of
    plugins and the 50-QPS bucket busy (an ADD spends most of its time in plugins, which the
    memory admission runs a few at a time under a 50 Mi limit anyway) at ~1.6 MiB."""
    header_timeout: float = json_field("requestHeaderTimeoutSeconds", 10.0)
    """*multusd*: from connecting (or the previous answer) to a complete request header. Why 10:
    Go's usual ``ReadHeaderTimeout`` (upstream's own metrics server uses 10 s); our shim sends
    its whole request at once, right after connecting."""
    body_timeout: float = json_field("requestBodyTimeoutSeconds", 10.0)
    """*multusd*: from the request header to the complete body. Why 10: a request body is a few
    KiB written in one go."""

    benchmark_direct_pod_get: bool = json_field("benchmarkDirectPodGet", False)
    """*multusd*, benchmark-only: read every request's pod with a live GET, ignoring the watch
    cache (the seed's behaviour), so the cache's saving can be measured A/B."""
    benchmark_readiness_stat: bool = json_field("benchmarkReadinessStat", False)
    """*multusd*, benchmark-only: instead of watching ``readinessindicatorfile``, stat it on
    every ADD and CHECK, polling each second for up to 45 s (the seed's behaviour)."""

    extra: dict[str, Any] = json_field("", factory=dict)
    """Keys no field claims, as they were (they still take part in the override)."""

    def __post_init__(self) -> None:
        limit = self.connection_limit
        check(
            "connectionLimit",
            limit is None or limit > 0,
            lambda: f"connection limit must be greater than 0, got {limit}",
        )
        port = self.health_port
        check(
            "healthPort",
            port is None or 0 < port < 65536,
            lambda: f"must be a TCP port (1-65535), got {port}",
        )
        check("kubeClientQPS", self.kube_client_qps > 0, lambda: "must be greater than 0")
        check("kubeClientBurst", self.kube_client_burst >= 1, lambda: "must be at least 1")
        for item in fields(self):
            if item.name in _SERVER_LIMITS:
                value = getattr(self, item.name)
                check(item.metadata["json"], value > 0, functools.partial(_not_positive, value))

    @property
    def socket_path(self) -> str:
        return str(Path(self.socket_dir) / "multus.sock")

    @property
    def is_auto(self) -> bool:
        return self.multus_config_file == "auto"


_SERVER_LIMITS = frozenset(
    {
        "request_timeout",
        "max_pending_per_container",
        "max_pending",
        "max_active",
        "header_timeout",
        "body_timeout",
    }
)
"""The fields holding the server's limits, each checked to be greater than 0."""


def _not_positive(value: float) -> str:
    return f"must be greater than 0, got {value}"


def decode_daemon_config(raw: dict[str, Any], source: str = "") -> DaemonConfig:
    """The typed config of the decoded file ``raw``; ``ConfigError`` naming the key if a value
    is wrong (``source``, the file, is named in the error when given)."""
    try:
        return decode(DaemonConfig, raw)
    except SchemaError as exc:
        where = f"daemon config {source}" if source else "daemon config"
        raise ConfigError(f"{where}: {exc}") from exc


def parse_daemon_config(
    data: bytes, source: str = "<bytes>"
) -> tuple[DaemonConfig, dict[str, Any]]:
    """Decode ``data``; return the typed config and the raw object used for overrides."""
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"daemon config {source}: not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"daemon config {source}: expected a JSON object")
    return decode_daemon_config(raw, source), raw


def load_daemon_config(path: str) -> tuple[DaemonConfig, dict[str, Any], bytes]:
    """Read and parse the daemon config file once, at start-up (before the loop runs)."""
    absolute = Path(path).absolute()
    try:
        data = absolute.read_bytes()
    except OSError as exc:
        raise ConfigError(f"daemon config {absolute}: {exc.strerror or exc}") from exc
    config, raw = parse_daemon_config(data, str(absolute))
    return config, raw, data
