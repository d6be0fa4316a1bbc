"""The runtime conf of one delegate: its interface name, ``CNI_ARGS`` and capabilities.

What libcni is given besides the delegate's config when a delegate runs, built in one place
for ADD, DEL, CHECK and the hot-plug API: a delegate's DEL must name the interface its ADD
named, with the same pod arguments. Running it is :mod:`multusd.commands.delegate`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

from cni_shim.errors import INVALID_NETWORK_CONFIG, CNIError
from multusd.cni.api import RuntimeConf
from multusd.cni.args import K8sArgs
from multusd.commands.context import CmdArgs
from multusd.k8s.devinfo import device_info_file_path
from multusd.networks.delegates import Delegate
from multusd.networks.netconf import NetConf

# Go ``net.ParseMAC``: 6, 8 or 20 octets, as ``xx:xx..``, ``xx-xx..`` (one separator
# throughout) or ``xxxx.xxxx..``.
_MAC = re.compile(
    "|".join(
        rf"[0-9a-fA-F]{{2}}(?:{sep}[0-9a-fA-F]{{2}}){{{n - 1}}}"
        for sep in (":", "-")
        for n in (6, 8, 20)
    )
    + "|"
    + "|".join(rf"[0-9a-fA-F]{{4}}(?:\.[0-9a-fA-F]{{4}}){{{n // 2 - 1}}}" for n in (6, 8, 20))
)
_PREFIX_LEN = re.compile(r"[0-9]{1,3}")


def _valid_ip_request(value: str) -> bool:
    """Go ``net.ParseCIDR`` when there is a ``/``, else ``net.ParseIP`` (no zones, no masks)."""
    address, slash, prefix = value.partition("/")
    if "%" in address or (slash and not _PREFIX_LEN.fullmatch(prefix)):
        return False
    try:
        if slash:
            ipaddress.ip_interface(value)
        else:
            ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def interface_name(delegate: Delegate, index: int, runtime_ifname: str) -> str:
    """A requested name wins; the master gets the runtime's; others ``net<position>``."""
    if delegate.ifname_request:
        return delegate.ifname_request
    if delegate.master:
        return runtime_ifname
    return f"net{index}"


def _merge_env_args(args: list[tuple[str, str]], env_args: str) -> None:
    """Merge the daemon process's own ``CNI_ARGS`` (thin-plugin heritage,
    docs/upstream.md, "Delegate runtime config and CNI_ARGS")."""
    for item in env_args.split(";") if env_args else ():
        if "=" not in item:
            continue
        key, value = item.split("=", 1)
        for i, (k, v) in enumerate(args):
            if k == key and not v and value:
                args[i] = (k, value)
                break
        else:
            args.append((key, value))


def runtime_args(
    k8s: K8sArgs, delegate: Delegate, *, env_args: str = "", legacy: bool = False
) -> tuple[tuple[str, str], ...]:
    """The ``CNI_ARGS`` a delegate receives, in upstream's fixed order."""
    args = [
        ("IgnoreUnknown", "true"),
        ("K8S_POD_NAMESPACE", k8s.pod_namespace),
        ("K8S_POD_NAME", k8s.pod_name),
        ("K8S_POD_INFRA_CONTAINER_ID", k8s.infra_container_id),
        ("K8S_POD_UID", k8s.pod_uid),
    ]
    _merge_env_args(args, env_args)
    if legacy:
        if delegate.mac_request:
            if not _MAC.fullmatch(delegate.mac_request):
                raise CNIError(
                    INVALID_NETWORK_CONFIG,
                    f'DelegateAdd: failed to parse mac address "{delegate.mac_request}"',
                )
            args.append(("MAC", delegate.mac_request))
        if delegate.ip_request:
            for ip in delegate.ip_request:
                if not _valid_ip_request(ip):
                    raise CNIError(
                        INVALID_NETWORK_CONFIG, f'DelegateAdd: failed to parse IP address "{ip}"'
                    )
            args.append(("IP", ",".join(delegate.ip_request)))
    return tuple(args)


def capability_args(delegate: Delegate, runtime_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Runtime capabilities for one delegate: the runtime's, overridden by the selection.

    Only the capabilities Multus models are passed on; libcni then keeps the ones the plugin
    declares (docs/upstream.md, "Delegate runtime config and CNI_ARGS").
    """
    base = dict(runtime_config or {})
    if not delegate.master:
        # A request replaces the runtime's value even when empty (upstream checks != nil).
        if delegate.port_mappings_request is not None:
            base["portMappings"] = list(delegate.port_mappings_request)
        if delegate.bandwidth_request is not None:
            base["bandwidth"] = delegate.bandwidth_request
        if delegate.ip_request is not None:
            base["ips"] = list(delegate.ip_request)
        if delegate.mac_request:
            base["mac"] = delegate.mac_request
        if delegate.infiniband_guid_request:
            base["infinibandGUID"] = delegate.infiniband_guid_request
        if delegate.device_id:
            base["deviceID"] = delegate.device_id
    keys = ("portMappings", "bandwidth", "ips", "mac", "infinibandGUID", "deviceID",
            "CNIDeviceInfoFile")  # fmt: skip
    return {key: base[key] for key in keys if base.get(key)}


def runtime_for(
    cmd: CmdArgs,
    k8s: K8sArgs,
    netconf: NetConf,
    delegate: Delegate,
    index: int,
    *,
    env_args: str = "",
    legacy: bool = False,
) -> RuntimeConf:
    """The libcni runtime conf of the delegate at ``index`` for this request
    (docs/upstream.md, "Delegate runtime config and CNI_ARGS").

    With a device ID, plugins that declare ``CNIDeviceInfoFile`` learn where the device's info
    file for this attachment lives (see :func:`device_info_path`).
    """
    ifname = interface_name(delegate, index, cmd.ifname)
    capabilities = capability_args(delegate, netconf.runtime_config)
    if capabilities.get("deviceID"):
        capabilities["CNIDeviceInfoFile"] = device_info_path(cmd, delegate, ifname)
    return RuntimeConf(
        container_id=cmd.container_id,
        netns=cmd.netns,
        ifname=ifname,
        args=runtime_args(k8s, delegate, env_args=env_args, legacy=legacy),
        capability_args=capabilities,
    )


def device_info_path(cmd: CmdArgs, delegate: Delegate, ifname: str) -> str:
    """``/var/run/k8s.cni.cncf.io/devinfo/cni/<delegate>-<container>_<ifname>``
    (docs/upstream.md, "Delegate runtime config and CNI_ARGS")."""
    return device_info_file_path(delegate.name, cmd.container_id, ifname)
