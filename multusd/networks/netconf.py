"""The Multus ``NetConf``: the per-request configuration (reference §3.3 c, §6.1).

It is decoded from the incoming CNI config *after* the server-config override, so daemon-config
keys win over the generated ``00-multus.conf``. Decoding follows Go: keys match ignoring case,
values are not coerced, unknown keys are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cni_shim import results
from cni_shim.errors import DECODING_FAILURE, INVALID_NETWORK_CONFIG, CNIError
from multusd.config.schema import SchemaError, decode, json_field


@dataclass(frozen=True, slots=True)
class NetConf:
    cni_version: str = json_field("cniVersion", "")
    name: str = json_field("name", "")
    type: str = json_field("type", "")
    bin_dir: str = json_field("binDir", "/opt/cni/bin")
    conf_dir: str = json_field("confDir", "/etc/cni/multus/net.d")
    cni_dir: str = json_field("cniDir", "/var/lib/cni/multus")
    kubeconfig: str = json_field("kubeconfig", "")
    cluster_network: str = json_field("clusterNetwork", "")
    default_networks: list[str] = json_field("defaultNetworks", factory=list)
    delegates: list[dict[str, Any]] = json_field("delegates", factory=list)
    multus_namespace: str = json_field("multusNamespace", "kube-system")
    system_namespaces: list[str] = json_field("systemNamespaces", factory=lambda: ["kube-system"])
    namespace_isolation: bool = json_field("namespaceIsolation", False)
    global_namespaces: str = json_field("globalNamespaces", "")
    readiness_indicator_file: str = json_field("readinessindicatorfile", "")
    runtime_config: dict[str, Any] | None = json_field("runtimeConfig", None)
    auxiliary_cni_chain_name: str = json_field("auxiliaryCNIChainName", "")
    retry_delete_on_error: bool = json_field("retryDeleteOnError", False)
    prev_result: dict[str, Any] | None = json_field("prevResult", None)

    @property
    def global_namespace_list(self) -> list[str]:
        """``globalNamespaces`` split on commas; it *replaces* the default ``["default"]``."""
        if not self.global_namespaces:
            return ["default"]
        return [part.strip() for part in self.global_namespaces.split(",")]


def load_netconf(data: bytes) -> NetConf:
    """Decode and validate a Multus config; errors carry upstream's ``LoadNetConf`` wording."""
    prefix = "Multus: error loading netconf: LoadNetConf: "
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("expected a JSON object")
        conf = decode(NetConf, raw)
    except SchemaError as exc:
        raise CNIError(
            DECODING_FAILURE, f"{prefix}failed to load netconf: {exc.key}: {exc.problem}"
        ) from exc
    except ValueError as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CNIError(DECODING_FAILURE, f"{prefix}failed to load netconf: {detail}") from exc
    if conf.prev_result is not None:
        try:
            prev = dict(conf.prev_result)
            prev.setdefault("cniVersion", conf.cni_version)
            results.convert(prev, results.LATEST)
        except CNIError as exc:
            raise exc.with_prefix(f"{prefix}could not parse prevResult: ") from exc
    if not conf.delegates and not conf.cluster_network:
        raise CNIError(
            INVALID_NETWORK_CONFIG,
            f"{prefix}at least one delegate/clusterNetwork must be specified",
        )
    return conf
