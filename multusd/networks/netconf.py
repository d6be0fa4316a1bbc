"""The Multus ``NetConf``: the per-request configuration (docs/upstream.md, "Per-request NetConf").

It is decoded from the incoming CNI config *after* the server-config override, so daemon-config
keys win over the generated ``00-multus.conf``. Decoding follows Go (``multusd.config.schema``):
keys match ignoring case, values are not coerced, unknown keys are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from cni_shim import results
from cni_shim.errors import DECODING_FAILURE, INVALID_NETWORK_CONFIG, CNIError
from multusd.config.daemon import NetworkKeys
from multusd.config.schema import SchemaError, decode


class NetConf(NetworkKeys):
    name: str = Field(default="", validation_alias="name")
    type: str = Field(default="", validation_alias="type")
    delegates: list[dict[str, Any]] = Field(default_factory=list, validation_alias="delegates")
    runtime_config: dict[str, Any] | None = Field(default=None, validation_alias="runtimeConfig")
    prev_result: dict[str, Any] | None = Field(default=None, validation_alias="prevResult")


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
