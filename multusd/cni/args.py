"""``CNI_ARGS`` parsing: the daemon's strict envelope check and libcni's ``K8sArgs`` decoding.

Upstream parses the same string twice with different rules
(docs/upstream.md, "CNI_ARGS, parsed twice"), and the error texts differ; both are kept so that
runtimes and operators see upstream's words.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from cni_shim.errors import INVALID_ENVIRONMENT, CNIError

_STRING_KEYS = {
    "K8S_POD_NAME": "pod_name",
    "K8S_POD_NAMESPACE": "pod_namespace",
    "K8S_POD_INFRA_CONTAINER_ID": "infra_container_id",
    "K8S_POD_UID": "pod_uid",
}


@dataclass(frozen=True, slots=True)
class K8sArgs:
    """The Kubernetes identity of a CNI request (libcni ``K8sArgs``)."""

    pod_name: str = ""
    pod_namespace: str = ""
    infra_container_id: str = ""
    pod_uid: str = ""
    ip: str = ""

    def label(self) -> str:
        """``ns/name/uid`` as upstream's error prefixes show a pod."""
        return f"{self.pod_namespace}/{self.pod_name}/{self.pod_uid}"


def _error(msg: str) -> CNIError:
    return CNIError(INVALID_ENVIRONMENT, msg)


def parse_envelope_args(cni_args: str) -> dict[str, str]:
    """The server's strict split (docs/upstream.md, "CNI_ARGS, parsed twice"): every part is exactly
    ``key=value``.

    An empty string or a trailing ``;`` fails here, as upstream's daemon does.
    """
    out: dict[str, str] = {}
    for part in cni_args.split(";"):
        pieces = part.split("=")
        if len(pieces) != 2:
            raise _error(f"invalid CNI_ARG '{part}'")
        out[pieces[0].strip()] = pieces[1].strip()
    return out


def _parse_bool(pair: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true"):
        return True
    if lowered in ("0", "false"):
        return False
    raise _error(
        f'ARGS: error parsing value of pair "{pair}": '
        f"boolean unmarshal error: invalid input {lowered}"
    )


def _valid_ip(value: str) -> bool:
    """Go ``net.IP.UnmarshalText``: empty means "no IP"; zones (``%eth0``) are not IPs."""
    if not value:
        return True
    if "%" in value:
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def parse_k8s_args(cni_args: str) -> K8sArgs:
    """libcni ``types.LoadArgs`` into ``K8sArgs`` (docs/upstream.md, "CNI_ARGS, parsed twice").

    One pass in string order, as Go's: the first bad pair or value is the error reported, and
    the last ``IgnoreUnknown`` wins; unknown keys are only judged after the whole string.
    """
    if not cni_args:
        return K8sArgs()
    ignore_unknown = False
    fields: dict[str, str] = {}
    unknown: list[str] = []
    for pair in cni_args.split(";"):
        kv = pair.split("=")
        if len(kv) != 2:
            raise _error(f'ARGS: invalid pair "{pair}"')
        key, value = kv
        if key == "IgnoreUnknown":
            ignore_unknown = _parse_bool(pair, value)
        elif key == "IP":
            if not _valid_ip(value):
                raise _error(
                    f'ARGS: error parsing value of pair "{pair}": invalid IP address: {value}'
                )
            fields["ip"] = value
        elif key in _STRING_KEYS:
            fields[_STRING_KEYS[key]] = value
        else:
            unknown.append(pair)
    if unknown and not ignore_unknown:
        quoted = " ".join(f'"{pair}"' for pair in unknown)
        raise _error(f"ARGS: unknown args [{quoted}]")
    return K8sArgs(**fields)


def join_args(args: tuple[tuple[str, str], ...]) -> str:
    """Render runtime-conf args as the ``CNI_ARGS`` value a delegate receives."""
    return ";".join(f"{key}={value}" for key, value in args)
