"""``daemon-config.json``: parsed once, typed, and kept verbatim for the request-time override.

Upstream reads this one file with three decoders (daemon, config generator, per-request NetConf)
and ignores unknown keys in each, yet every top-level key still rides into each request through
the server-config override (reference §2.4.1). We therefore keep two views: ``DaemonConfig``, the
typed settings the daemon acts on, and ``raw``, the exact decoded object the override copies.

Go decodes JSON into structs case-insensitively and without type coercion; we do the same (a
key is matched ignoring case, the last duplicate wins, ``"1"`` is not an int) so that a file that
works upstream works here and one that fails there fails here, with one clear line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from multusd.errors import ConfigError

DEFAULT_CONFIG_PATH = "/etc/cni/net.d/multus.d/daemon-config.json"


class LogOptions(BaseModel):
    """Log rotation (lumberjack semantics upstream): sizes in MB, ages in days."""

    model_config = ConfigDict(strict=True, frozen=True, extra="allow", populate_by_name=True)

    max_age: int | None = Field(None, alias="maxAge")
    max_size: int | None = Field(None, alias="maxSize")
    max_backups: int | None = Field(None, alias="maxBackups")
    compress: bool | None = None


class PerNodeCertificate(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="allow", populate_by_name=True)

    enabled: bool = False
    bootstrap_kubeconfig: str = Field("", alias="bootstrapKubeconfig")
    cert_dir: str = Field("", alias="certDir")
    cert_duration: str = Field("10m", alias="certDuration")


class DaemonConfig(BaseModel):
    """Every key of upstream's daemon config (reference §3.3 a–c) plus ours, with defaults.

    Keys this daemon adds are marked *multusd*; upstream ignores them, so one file serves both.
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="allow", populate_by_name=True)

    # (a) daemon process
    socket_dir: str = Field("/run/multus/", alias="socketDir")
    chroot_dir: str = Field("", alias="chrootDir")
    log_file: str = Field("", alias="logFile")
    log_level: str = Field("", alias="logLevel")
    log_to_stderr: bool = Field(False, alias="logToStderr")
    log_options: LogOptions | None = Field(None, alias="logOptions")
    metrics_port: int | None = Field(None, alias="metricsPort")
    enable_pprof: bool = Field(False, alias="enablePprof")
    connection_limit: int | None = Field(None, alias="connectionLimit")
    per_node_certificate: PerNodeCertificate | None = Field(None, alias="perNodeCertificate")

    # (b) config generator
    cni_version: str = Field("", alias="cniVersion")
    multus_config_file: str = Field("auto", alias="multusConfigFile")
    multus_autoconfig_dir: str = Field("", alias="multusAutoconfigDir")
    multus_master_cni: str = Field("", alias="multusMasterCNI")
    cni_config_dir: str = Field("/etc/cni/net.d", alias="cniConfigDir")
    force_cni_version: bool = Field(False, alias="forceCNIVersion")
    override_network_name: bool = Field(False, alias="overrideNetworkName")
    readiness_indicator_file: str = Field("", alias="readinessindicatorfile")
    type: str = "multus-shim"
    capabilities: dict[str, bool] = Field(default_factory=dict)
    daemon_socket_dir: str = Field("", alias="daemonSocketDir")
    auxiliary_cni_chain_name: str = Field("", alias="auxiliaryCNIChainName")

    # (c) request-time NetConf keys that the daemon itself also reads
    bin_dir: str = Field("/opt/cni/bin", alias="binDir")
    conf_dir: str = Field("/etc/cni/multus/net.d", alias="confDir")
    cni_dir: str = Field("/var/lib/cni/multus", alias="cniDir")
    kubeconfig: str = ""
    cluster_network: str = Field("", alias="clusterNetwork")
    default_networks: list[str] = Field(default_factory=list, alias="defaultNetworks")
    multus_namespace: str = Field("kube-system", alias="multusNamespace")
    system_namespaces: list[str] = Field(
        default_factory=lambda: ["kube-system"], alias="systemNamespaces"
    )
    namespace_isolation: bool = Field(False, alias="namespaceIsolation")
    global_namespaces: str = Field("", alias="globalNamespaces")
    retry_delete_on_error: bool = Field(False, alias="retryDeleteOnError")

    # multusd additions
    plugin_timeout: float | None = Field(None, alias="pluginTimeoutSeconds")
    """*multusd*: kill a delegate plugin that runs longer than this; unset = no limit (upstream)."""
    max_request_bytes: int = Field(4 * 1024 * 1024, alias="maxRequestBytes")
    """*multusd*: larger request bodies get HTTP 413."""
    kube_client_qps: float = Field(50.0, alias="kubeClientQPS")
    """*multusd*: the API token bucket's rate (upstream's client: 50)."""
    kube_client_burst: int = Field(50, alias="kubeClientBurst")
    """*multusd*: the API token bucket's burst (upstream's client: 50)."""
    cache_sync_timeout: float = Field(20.0, alias="cacheSyncTimeoutSeconds")
    """*multusd*: how long start-up waits for the pod and NAD caches before serving anyway."""
    pod_get_timeout: float = Field(5.0, alias="podGetTimeoutSeconds")
    """*multusd*: timeout of the fallback pod GET (upstream: 50 ms, a reported bug)."""

    @field_validator("connection_limit")
    @classmethod
    def _positive_limit(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(f"connection limit must be greater than 0, got {value}")
        return value

    @field_validator(
        "plugin_timeout", "kube_client_qps", "cache_sync_timeout", "pod_get_timeout", mode="before"
    )
    @classmethod
    def _timeout_number(cls, value: object) -> object:
        # JSON has one number type; accept 5 as well as 5.0 despite strict mode.
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    @property
    def socket_path(self) -> str:
        return str(Path(self.socket_dir) / "multus.sock")

    @property
    def is_auto(self) -> bool:
        return self.multus_config_file == "auto"


def _alias_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for name, field in DaemonConfig.model_fields.items():
        index[(field.alias or name).lower()] = field.alias or name
    return index


_ALIASES = _alias_index()


def canonical_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """Fold keys onto our field aliases ignoring case, as Go's struct decoding does.

    Unknown keys are kept as they are (they still take part in the request-time override).
    """
    out: dict[str, Any] = {}
    for key, value in raw.items():
        out[_ALIASES.get(key.lower(), key)] = value
    return out


def _describe(error: ValidationError) -> str:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "(top level)"
    value = first.get("input")
    shown = json.dumps(value) if isinstance(value, str | int | float | bool | None) else ""
    got = f" (got {shown})" if shown else ""
    message = first["msg"].removeprefix("Value error, ")
    return f"key {key!r}: {message}{got}"


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
    try:
        config = DaemonConfig.model_validate(canonical_keys(raw))
    except ValidationError as exc:
        raise ConfigError(f"daemon config {source}: {_describe(exc)}") from exc
    return config, raw


def load_daemon_config(path: str) -> tuple[DaemonConfig, dict[str, Any], bytes]:
    """Read and parse the daemon config file once, at start-up (before the loop runs)."""
    absolute = Path(path).absolute()
    try:
        data = absolute.read_bytes()
    except OSError as exc:
        raise ConfigError(f"daemon config {absolute}: {exc.strerror or exc}") from exc
    config, raw = parse_daemon_config(data, str(absolute))
    return config, raw, data
