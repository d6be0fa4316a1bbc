"""The server-config override: daemon-config keys win over the incoming CNI config.

Upstream (``overrideCNIConfigWithServerConfig``, docs/upstream.md, "Server-config override") copies
every top-level key of the daemon config over the config the shim sent, so a cluster admin can
change behaviour without touching the generated ``00-multus.conf``. In auto mode the readiness key
is removed because the daemon watches that file itself.
"""

from __future__ import annotations

import json
from typing import Any

from cni_shim import gojson
from cni_shim.errors import DECODING_FAILURE, CNIError

READINESS_KEY = "readinessindicatorfile"


def override_config(
    stdin: bytes, daemon_raw: dict[str, Any] | None, *, ignore_readiness: bool
) -> bytes:
    if not daemon_raw and not ignore_readiness:
        return stdin
    try:
        conf = json.loads(stdin)
        if not isinstance(conf, dict):
            raise ValueError("expected a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise CNIError(DECODING_FAILURE, f"failed to unmarshall CNI config: {exc}") from exc
    if ignore_readiness:
        conf.pop(READINESS_KEY, None)
    for key, value in (daemon_raw or {}).items():
        if ignore_readiness and key == READINESS_KEY:
            continue
        conf[key] = value
    return gojson.dumps(conf, sort_keys=True).encode()
