"""The generated file itself: the generator's view of the daemon config, and its bytes.

Pure: the config manager decides when to render and writes the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from cni_shim import gojson
from multusd.config.daemon import LogOptions
from multusd.config.generate.primary import (
    Primary,
    PrimaryConfigError,
    enabled_capabilities,
    primary_network_name,
    primary_path,
)
from multusd.config.schema import GoModel, SchemaError, decode
from multusd.errors import ConfigError

MULTUS_CONFIG_NAME = "00-multus.conf"
DEFAULT_NETWORK_NAME = "multus-cni-network"


class GeneratorConfig(GoModel):
    """Upstream's ``MultusConf``: the daemon config read a second time, with its own defaults.

    Field order is the Go struct order, which is the key order of the generated file. Its
    defaults differ from the request-time ones (``binDir`` is empty here, not /opt/cni/bin), so
    it is decoded from the raw daemon-config object rather than derived from ``DaemonConfig``.
    """

    bin_dir: str = Field(default="", validation_alias="binDir")
    capabilities: dict[str, bool] = Field(default_factory=dict, validation_alias="capabilities")
    cni_version: str = Field(default="", validation_alias="cniVersion")
    log_file: str = Field(default="", validation_alias="logFile")
    log_level: str = Field(default="", validation_alias="logLevel")
    log_to_stderr: bool = Field(default=False, validation_alias="logToStderr")
    log_options: LogOptions | None = Field(default=None, validation_alias="logOptions")
    name: str = Field(default=DEFAULT_NETWORK_NAME, validation_alias="name")
    cluster_network: str = Field(default="", validation_alias="clusterNetwork")
    namespace_isolation: bool = Field(default=False, validation_alias="namespaceIsolation")
    global_namespaces: str = Field(default="", validation_alias="globalNamespaces")
    readiness_indicator_file: str = Field(default="", validation_alias="readinessindicatorfile")
    type: str = Field(default="multus-shim", validation_alias="type")
    cni_dir: str = Field(default="", validation_alias="cniDir")
    cni_config_dir: str = Field(default="/etc/cni/net.d", validation_alias="cniConfigDir")
    auxiliary_cni_chain_name: str = Field(default="", validation_alias="auxiliaryCNIChainName")
    daemon_socket_dir: str = Field(default="", validation_alias="daemonSocketDir")
    multus_config_file: str = Field(default="auto", validation_alias="multusConfigFile")
    multus_master_cni: str = Field(default="", validation_alias="multusMasterCNI")
    multus_autoconfig_dir: str = Field(default="", validation_alias="multusAutoconfigDir")
    force_cni_version: bool = Field(default=False, validation_alias="forceCNIVersion")
    override_network_name: bool = Field(default=False, validation_alias="overrideNetworkName")


def generator_config(raw: Mapping[str, Any]) -> GeneratorConfig:
    """Decode the generator's view of the daemon config; ``name`` is always forced, as upstream."""
    try:
        conf = decode(GeneratorConfig, raw)
    except SchemaError as exc:
        raise ConfigError(f"failed to unmarshall the daemon configuration: {exc}") from exc
    return conf.model_copy(update={"name": DEFAULT_NETWORK_NAME})


def check_not_recursive(conf: GeneratorConfig, name: str) -> None:
    """Refuse to read our own output as the primary.

    Upstream only rejects ``multusMasterCNI`` spelled exactly ``<dir>/00-multus.conf``; we also
    reject any name that resolves to the file we write, with the same message.
    """
    own = primary_path(conf.cni_config_dir, MULTUS_CONFIG_NAME)
    exact = f"{conf.multus_autoconfig_dir}/{MULTUS_CONFIG_NAME}"
    if name == exact or primary_path(conf.multus_autoconfig_dir, name) == own:
        raise PrimaryConfigError(f"cannot specify {exact} to prevent recursive config load")


# --------------------------------------------------------------------------------------------
# Rendering


def render(conf: GeneratorConfig, primary: Primary | None = None) -> bytes:
    """The bytes of ``00-multus.conf``: compact JSON in upstream's key order, no newline."""
    capabilities = dict(conf.capabilities)
    name, cluster_network = conf.name, conf.cluster_network
    if primary is not None:
        capabilities.update(dict.fromkeys(enabled_capabilities(primary.data), True))
        cluster_network = primary.path
        if conf.override_network_name:
            name = primary_network_name(primary.data)
    out: dict[str, Any] = {}
    _put(out, "binDir", conf.bin_dir)
    _put(out, "capabilities", dict(sorted(capabilities.items())))
    out["cniVersion"] = conf.cni_version
    _put(out, "logFile", conf.log_file)
    _put(out, "logLevel", conf.log_level)
    _put(out, "logToStderr", conf.log_to_stderr)
    if conf.log_options is not None:
        out["logOptions"] = _log_options(conf.log_options)
    out["name"] = name
    _put(out, "clusterNetwork", cluster_network)
    _put(out, "namespaceIsolation", conf.namespace_isolation)
    _put(out, "globalNamespaces", conf.global_namespaces)
    # readinessindicatorfile is cleared: the daemon watches it, requests must not poll it.
    out["type"] = conf.type
    _put(out, "cniDir", conf.cni_dir)
    # cniConfigDir is cleared: it only says where this file goes.
    _put(out, "auxiliaryCNIChainName", conf.auxiliary_cni_chain_name)
    _put(out, "daemonSocketDir", conf.daemon_socket_dir)
    # multusConfigFile, multusMasterCNI, multusAutoconfigDir, forceCNIVersion are cleared.
    _put(out, "overrideNetworkName", conf.override_network_name)
    return gojson.dumps(out).encode("utf-8")


def _put(out: dict[str, Any], key: str, value: object) -> None:
    if value:  # Go's omitempty: "", false, an empty map
        out[key] = value


def _log_options(options: LogOptions) -> dict[str, Any]:
    pairs = (
        ("maxAge", options.max_age),
        ("maxSize", options.max_size),
        ("maxBackups", options.max_backups),
        ("compress", options.compress),
    )
    return {key: value for key, value in pairs if value is not None}  # nil pointers omitted
