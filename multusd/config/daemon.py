"""``daemon-config.json``: parsed once, typed, and kept verbatim for the request-time override.

Upstream reads this one file with three decoders (daemon, config generator, per-request NetConf) and
ignores unknown keys in each, yet every top-level key still rides into each request through the
server-config override (docs/upstream.md, "Server-config override"). We therefore keep two views:
``DaemonConfig``, the typed settings the daemon acts on (a pydantic model), and ``raw``, the exact
decoded object the override copies. Decoding follows Go (see ``multusd.config.schema``), so a file
that works upstream works here and one that fails there fails here, with one clear line.

Every key of the file the daemon acts on is declared here, with its default and its rule, the
server's limits (``requestTimeoutSeconds``, ``maxPendingRequests``, ...) included:
``multusd.server`` reads them from ``DaemonConfig``, so a bad value stops start-up before
anything runs. docs/configuration.md documents the same keys; a test keeps the two in step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field

from multusd.config.schema import GoModel, Int, SchemaError, decode
from multusd.errors import ConfigError

DEFAULT_CONFIG_PATH = "/etc/cni/net.d/multus.d/daemon-config.json"

_Number = TypeVar("_Number", int, float)

MAX_NETWORKS_PER_POD = 128
"""The most networks one pod's ``k8s.v1.cni.cncf.io/networks`` annotation may ask for. Upstream
has no limit: the API server's 256 KiB for a pod's annotations allows 43,690 elements, whose ADD
ran for 15 s and whose DEL ran past every deadline. Real pods ask for a handful; SR-IOV-heavy
ones a few dozen."""


def _positive(value: _Number) -> _Number:
    if value > 0:
        return value
    raise ValueError(f"must be greater than 0, got {value}")


def _connection_limit(value: int) -> int:
    if value > 0:
        return value
    raise ValueError(f"connection limit must be greater than 0, got {value}")  # upstream's text


def _tcp_port(value: int) -> int:
    if 0 < value < 65536:
        return value
    raise ValueError(f"must be a TCP port (1-65535), got {value}")


def _null_is_unset(value: object) -> object:
    """A Go ``*bool`` read as a flag: ``null`` leaves the pointer nil, i.e. the default."""
    return False if value is None else value


PositiveInt = Annotated[Int, AfterValidator(_positive)]
PositiveFloat = Annotated[float, AfterValidator(_positive)]
"""The server's limits and the API client's rate: at 0 or below they would refuse everything."""


class LogOptions(GoModel):
    """Log rotation (lumberjack semantics upstream): sizes in MB, ages in days."""

    max_age: Int | None = Field(default=None, validation_alias="maxAge")
    max_size: Int | None = Field(default=None, validation_alias="maxSize")
    max_backups: Int | None = Field(default=None, validation_alias="maxBackups")
    compress: bool | None = Field(default=None, validation_alias="compress")


class PerNodeCertificate(GoModel):
    """Upstream's ``PerNodeCertificate``: the daemon's own client certificate, as the node
    (``multusd.k8s.certs``). Decoded like every key; checked (a missing path, an unparsable
    ``certDuration``) only when ``enabled``, as upstream checks it, with its texts
    (``multusd.k8s.certs.config``). ``certDuration`` is a Go duration; ``""`` means the
    default, as upstream's ``DefaultCertDuration``."""

    enabled: bool = Field(default=False, validation_alias="enabled")
    bootstrap_kubeconfig: str = Field(default="", validation_alias="bootstrapKubeconfig")
    cert_dir: str = Field(default="", validation_alias="certDir")
    cert_duration: str = Field(default="10m", validation_alias="certDuration")


class NetworkKeys(GoModel):
    """The Multus NetConf keys (docs/upstream.md, "Per-request NetConf") that both the daemon and
    each request read.

    The daemon config and the per-request NetConf share them because the server-config
    override copies the former over the latter; one definition keeps the defaults in step.
    """

    bin_dir: str = Field(default="/opt/cni/bin", validation_alias="binDir")
    conf_dir: str = Field(default="/etc/cni/multus/net.d", validation_alias="confDir")
    cni_dir: str = Field(default="/var/lib/cni/multus", validation_alias="cniDir")
    kubeconfig: str = Field(default="", validation_alias="kubeconfig")
    cluster_network: str = Field(default="", validation_alias="clusterNetwork")
    default_networks: list[str] = Field(default_factory=list, validation_alias="defaultNetworks")
    multus_namespace: str = Field(default="kube-system", validation_alias="multusNamespace")
    system_namespaces: list[str] = Field(
        default_factory=lambda: ["kube-system"], validation_alias="systemNamespaces"
    )
    namespace_isolation: bool = Field(default=False, validation_alias="namespaceIsolation")
    global_namespaces: str = Field(default="", validation_alias="globalNamespaces")
    retry_delete_on_error: bool = Field(default=False, validation_alias="retryDeleteOnError")
    cni_version: str = Field(default="", validation_alias="cniVersion")
    readiness_indicator_file: str = Field(default="", validation_alias="readinessindicatorfile")
    auxiliary_cni_chain_name: str = Field(default="", validation_alias="auxiliaryCNIChainName")
    max_networks_per_pod: PositiveInt = Field(
        default=MAX_NETWORKS_PER_POD, validation_alias="maxNetworksPerPod"
    )

    @property
    def global_namespace_list(self) -> list[str]:
        """``globalNamespaces`` split on commas; it *replaces* the default ``["default"]``."""
        if not self.global_namespaces:
            return ["default"]
        return [part.strip() for part in self.global_namespaces.split(",")]


class DaemonConfig(NetworkKeys):
    """Every key of upstream's daemon config (docs/upstream.md, "Daemon config keys") plus ours,
    with defaults.

    Keys this daemon adds are marked *multusd*; upstream ignores them, so one file serves both.
    """

    # (a) daemon process
    socket_dir: str = Field(default="/run/multus/", validation_alias="socketDir")
    chroot_dir: str = Field(default="", validation_alias="chrootDir")
    log_file: str = Field(default="", validation_alias="logFile")
    log_level: str = Field(default="", validation_alias="logLevel")
    log_to_stderr: bool = Field(default=False, validation_alias="logToStderr")
    log_options: LogOptions | None = Field(default=None, validation_alias="logOptions")
    metrics_port: Int | None = Field(default=None, validation_alias="metricsPort")
    health_port: Annotated[Int, AfterValidator(_tcp_port)] | None = Field(
        default=None, validation_alias="healthPort"
    )
    """*multusd*: serve ``/healthz`` and ``/readyz`` on ``127.0.0.1:<port>`` for the kubelet's
    ``httpGet`` probes (``server.health``: an exec probe costs the container ~5 MiB each run)."""
    enable_pprof: Annotated[bool, BeforeValidator(_null_is_unset)] = Field(
        default=False, validation_alias="enablePprof"
    )
    """Upstream's ``*bool``: ``true`` serves the profiling pages under ``/debug/`` on
    ``metricsPort`` (``multusd.profiling``; only when ``metricsPort`` is set, as upstream);
    ``false``, ``null`` or absent: off."""
    connection_limit: Annotated[Int, AfterValidator(_connection_limit)] | None = Field(
        default=None, validation_alias="connectionLimit"
    )
    per_node_certificate: PerNodeCertificate | None = Field(
        default=None, validation_alias="perNodeCertificate"
    )

    # (b) config generator
    multus_config_file: str = Field(default="auto", validation_alias="multusConfigFile")
    multus_autoconfig_dir: str = Field(default="", validation_alias="multusAutoconfigDir")
    multus_master_cni: str = Field(default="", validation_alias="multusMasterCNI")
    cni_config_dir: str = Field(default="/etc/cni/net.d", validation_alias="cniConfigDir")
    force_cni_version: bool = Field(default=False, validation_alias="forceCNIVersion")
    override_network_name: bool = Field(default=False, validation_alias="overrideNetworkName")
    type: str = Field(default="multus-shim", validation_alias="type")
    capabilities: dict[str, bool] = Field(default_factory=dict, validation_alias="capabilities")
    daemon_socket_dir: str = Field(default="", validation_alias="daemonSocketDir")

    # multusd additions
    plugin_timeout: float | None = Field(default=None, validation_alias="pluginTimeoutSeconds")
    """*multusd*: kill a delegate plugin that runs longer than this; unset = no limit (upstream)."""
    max_request_bytes: Int = Field(default=4 * 1024 * 1024, validation_alias="maxRequestBytes")
    """*multusd*: larger request bodies get HTTP 413."""
    kube_client_qps: PositiveFloat = Field(default=50.0, validation_alias="kubeClientQPS")
    """*multusd*: the API token bucket's rate (upstream's client: 50)."""
    kube_client_burst: PositiveInt = Field(default=50, validation_alias="kubeClientBurst")
    """*multusd*: the API token bucket's burst (upstream's client: 50)."""
    kube_client_protobuf: bool = Field(default=True, validation_alias="kubeClientProtobuf")
    """*multusd*: read pods as Kubernetes protobuf, JSON as the fallback (client-go's default;
    ~1.8× fewer bytes and 3-5× less CPU per listed pod). NADs stay JSON. ``false``: JSON only."""
    cache_sync_timeout: float = Field(default=20.0, validation_alias="cacheSyncTimeoutSeconds")
    """*multusd*: how long start-up waits for the pod and NAD caches before serving anyway."""
    kubelet_pod_resources_socket: str = Field(
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        validation_alias="kubeletPodResourcesSocket",
    )
    """*multusd*: the kubelet pod-resources socket (device IDs for ``resourceName`` NADs)."""
    device_checkpoint_file: str = Field(
        default="/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
        validation_alias="deviceCheckpointFile",
    )
    """*multusd*: the device-plugin checkpoint, read when the socket is absent."""
    pod_get_timeout: float = Field(default=5.0, validation_alias="podGetTimeoutSeconds")
    """*multusd*: timeout of the fallback pod GET (upstream: 50 ms, a reported bug)."""
    keep_config_on_exit: bool = Field(default=False, validation_alias="keepConfigOnExit")
    """*multusd*: leave the generated ``00-multus.conf`` in place on shutdown. Upstream deletes
    it, so pods created while the daemon restarts get only the primary network; keeping it makes
    them fail (and be retried by the kubelet) until the daemon is back instead."""
    follow_primary_config: bool = Field(default=False, validation_alias="followPrimaryConfig")
    """*multusd*, opt-in: without ``multusMasterCNI``, re-choose the primary on every change of
    ``multusAutoconfigDir`` (a new lexically-earlier config takes over; a primary gone for 5 s
    is replaced by the next candidate). Upstream, and our default, fix the primary found at
    start-up for the life of the process, so a stray file never moves new pods to another
    network (docs/compatibility.md)."""

    # multusd additions: the server's limits, how long a request may take, how many may wait,
    # how long a client may dawdle (docs/configuration.md has the table). Each must be > 0.
    request_timeout: PositiveFloat = Field(default=120.0, validation_alias="requestTimeoutSeconds")
    """*multusd*: deadline of one CNI request, waiting included; plugins are killed when it
    passes. Why 120: the kubelet gives ``RunPodSandbox`` twice its
    ``--runtime-request-timeout`` (2 min by default, so 4 min) and Stop/RemovePodSandbox the
    plain 2 min; containerd puts no timeout of its own on the CNI call. 120 s ends a hung
    request well before the kubelet gives up, leaves room for the rollback and the runtime's own
    cleanup, and is the same bound for DEL, whose caller waits 2 min. Upstream has no limit at
    all."""
    max_pending_per_container: PositiveInt = Field(
        default=16, validation_alias="maxPendingRequestsPerContainer"
    )
    """*multusd*: requests one container may have in the daemon (running or waiting); more get
    code 11. Why 16: the kubelet runs one sandbox operation per pod at a time and containerd one
    CNI call per sandbox operation, so a container normally has one or two requests (an ADD,
    then the DELs of Stop and Remove); 16 leaves room for retries while a runaway client cannot
    pile up work behind one hung container."""
    max_pending: PositiveInt = Field(default=1024, validation_alias="maxPendingRequests")
    """*multusd*: CNI requests the daemon holds at once (running or waiting, read or not); more
    get code 11. Why 1,024: twice the ADD and DEL of every pod on a 500-pod node at once (the
    kubelet's default ``maxPods`` is 110). Beyond ``maxActiveRequests`` they wait unread,
    costing the daemon a file descriptor each."""
    max_active: PositiveInt = Field(default=32, validation_alias="maxActiveRequests")
    """*multusd*: CNI requests read and in the daemon at once; more wait unread
    (``server.intake``). Why 32: a request read costs the daemon ~50 KiB until it is answered,
    one not yet read nothing (the kernel charges it to the client). 32 keep two cores' worth of
    plugins and the 50-QPS bucket busy (an ADD spends most of its time in plugins, which the
    memory admission runs a few at a time under a 50 Mi limit anyway) at ~1.6 MiB."""
    header_timeout: PositiveFloat = Field(
        default=10.0, validation_alias="requestHeaderTimeoutSeconds"
    )
    """*multusd*: from connecting (or the previous answer) to a complete request header. Why 10:
    Go's usual ``ReadHeaderTimeout`` (upstream's own metrics server uses 10 s); our shim sends
    its whole request at once, right after connecting."""
    body_timeout: PositiveFloat = Field(default=10.0, validation_alias="requestBodyTimeoutSeconds")
    """*multusd*: from the request header to the complete body. Why 10: a request body is a few
    KiB written in one go."""

    benchmark_direct_pod_get: bool = Field(default=False, validation_alias="benchmarkDirectPodGet")
    """*multusd*, benchmark-only: read every request's pod with a live GET, ignoring the watch
    cache (the seed's behaviour), so the cache's saving can be measured A/B."""
    benchmark_readiness_stat: bool = Field(default=False, validation_alias="benchmarkReadinessStat")
    """*multusd*, benchmark-only: instead of watching ``readinessindicatorfile``, stat it on
    every ADD and CHECK, polling each second for up to 45 s (the seed's behaviour)."""

    extra: dict[str, Any] = Field(default_factory=dict)
    """Keys no field claims, as they were (they still take part in the override)."""

    @property
    def socket_path(self) -> str:
        return str(Path(self.socket_dir) / "multus.sock")

    @property
    def is_auto(self) -> bool:
        return self.multus_config_file == "auto"


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
