"""The Multus ``NetConf``: the per-request configuration (reference §3.3 c, §6.1).

It is decoded from the incoming CNI config *after* the server-config override, so daemon-config
keys win over the generated ``00-multus.conf``. Decoding follows Go: keys match ignoring case,
values are not coerced, unknown keys are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cni_shim import results
from cni_shim.errors import DECODING_FAILURE, INVALID_NETWORK_CONFIG, CNIError


class NetConf(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore", populate_by_name=True)

    cni_version: str = Field("", alias="cniVersion")
    name: str = ""
    type: str = ""
    bin_dir: str = Field("/opt/cni/bin", alias="binDir")
    conf_dir: str = Field("/etc/cni/multus/net.d", alias="confDir")
    cni_dir: str = Field("/var/lib/cni/multus", alias="cniDir")
    kubeconfig: str = ""
    cluster_network: str = Field("", alias="clusterNetwork")
    default_networks: list[str] = Field(default_factory=list, alias="defaultNetworks")
    delegates: list[dict[str, Any]] = Field(default_factory=list)
    multus_namespace: str = Field("kube-system", alias="multusNamespace")
    system_namespaces: list[str] = Field(
        default_factory=lambda: ["kube-system"], alias="systemNamespaces"
    )
    namespace_isolation: bool = Field(False, alias="namespaceIsolation")
    global_namespaces: str = Field("", alias="globalNamespaces")
    readiness_indicator_file: str = Field("", alias="readinessindicatorfile")
    runtime_config: dict[str, Any] | None = Field(None, alias="runtimeConfig")
    auxiliary_cni_chain_name: str = Field("", alias="auxiliaryCNIChainName")
    retry_delete_on_error: bool = Field(False, alias="retryDeleteOnError")
    prev_result: dict[str, Any] | None = Field(None, alias="prevResult")

    @property
    def global_namespace_list(self) -> list[str]:
        """``globalNamespaces`` split on commas; it *replaces* the default ``["default"]``."""
        if not self.global_namespaces:
            return ["default"]
        return [part.strip() for part in self.global_namespaces.split(",")]


_ALIASES = {(f.alias or n).lower(): (f.alias or n) for n, f in NetConf.model_fields.items()}


def _fold(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        canonical = _ALIASES.get(key.lower())
        if canonical is not None:
            out[canonical] = value
    return out


def load_netconf(data: bytes) -> NetConf:
    """Decode and validate a Multus config; errors carry upstream's ``LoadNetConf`` wording."""
    prefix = "Multus: error loading netconf: LoadNetConf: "
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("expected a JSON object")
        conf = NetConf.model_validate(_fold(raw))
    except (ValueError, ValidationError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            detail = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
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
