"""What a request must satisfy before anything acts on it: the CNI spec's rules for the values
that end up in file names, netlink calls and plugin environments.

The container ID becomes ``<cniDir>/<containerID>`` and part of every result-cache file name,
so ``/tmp/x`` or ``../../x`` would make a DEL delete a file anywhere on the node; the interface
name becomes part of file names too. The rules and texts are libcni's (``ValidateContainerID``,
``ValidateInterfaceName``), from the one definition the shim uses (``cni_shim.skel``), so both
ends reject the same input with the same words. Upstream's daemon checks none of this (its
shim does); docs/compatibility.md lists the differences.

A config whose JSON strings hold NUL or a lone UTF-16 surrogate escape (``"\\ud800"``) is refused
here too: neither can be a path, a name or anything a plugin could use, and both only fail
later, deep inside, where they would be reported as internal errors.
"""

from __future__ import annotations

from typing import Any

from cni_shim import gojson, skel
from cni_shim.errors import DECODING_FAILURE, INVALID_ENVIRONMENT, CNIError

_CHECKED_ENV = ("CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS")


def check_env_text(env: dict[str, str]) -> None:
    """No NUL in the variables the daemon uses: no path, name or environment may hold one."""
    for key in _CHECKED_ENV:
        if "\x00" in env.get(key, ""):
            raise CNIError(INVALID_ENVIRONMENT, f"{key} contains a NUL character")


def check_pod_env(command: str, container_id: str, netns: str, ifname: str | None) -> None:
    """The spec's rules for a command that names a container (``ifname`` ``None``: not given).

    DEL is the lenient one, as the spec makes it: its namespace may be gone (empty) and a
    missing or empty interface name means ``eth0``, so a runtime can always clean up.
    """
    skel.validate_container_id(container_id)
    if (netns or command != "DEL") and not netns.startswith("/"):
        raise CNIError(INVALID_ENVIRONMENT, f'CNI_NETNS must be an absolute path, got "{netns}"')
    if ifname is not None and (ifname or command != "DEL"):
        skel.validate_ifname(ifname)


def check_config_text(config: bytes) -> None:
    """Refuse a config with a NUL or a lone surrogate in any JSON string, key or value.

    A config that does not parse is left alone: the command reports that with its own words.
    """
    if b"\\u" not in config:
        return  # both can only be written as escapes in valid JSON: the common case is free
    try:
        obj = gojson.loads(config)
    except ValueError:
        return
    bad = _bad_text(obj)
    if bad:
        raise CNIError(DECODING_FAILURE, f"invalid network config: a JSON string holds {bad}")


def _bad_text(obj: Any) -> str:
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "a NUL character"
            if not item.isascii() and any("\ud800" <= ch <= "\udfff" for ch in item):
                return "a lone UTF-16 surrogate"
    return ""
