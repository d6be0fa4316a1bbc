"""Running one delegate: the interface-name check, the libcni call, and its errors' wording.

Shared by ADD, DEL, CHECK and the hot-plug API so that a delegate is run the same way whichever
verb reaches it, down to the ``AddedInterface`` event a successful ADD reports; what it is run
with (interface name, ``CNI_ARGS``, capabilities) is :mod:`multusd.commands.runtime_conf`, which
delegates a request gets is :mod:`multusd.networks.resolve`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cni_shim.errors import CNIError
from multusd import timeline
from multusd.cni.api import CNI, RuntimeConf
from multusd.cni.conf import (
    NetworkConfig,
    NetworkConfigList,
    conf_from_bytes,
    conflist_from_bytes,
)
from multusd.cni.netns import validate_ifname
from multusd.commands.context import Services
from multusd.k8s.events import added_interface_message
from multusd.networks.delegates import Delegate


def record_added_interface(
    services: Services, pod: dict[str, Any] | None, result: dict[str, Any], ifname: str, name: str
) -> None:
    """Queue upstream's ``AddedInterface`` event (posted in the background; never waited for)."""
    if services.events is None or pod is None:
        return
    ips = [ip["address"] for ip in result.get("ips") or []]
    services.events.record(
        pod, "Normal", "AddedInterface", added_interface_message(ifname, ips, name)
    )


async def check_ifname(delegate: Delegate, rt: RuntimeConf) -> None:
    """Upstream ``DelegateAdd`` step 1: the pod namespace exists and has no such link yet."""
    try:
        await validate_ifname(rt.netns, rt.ifname)
    except CNIError as exc:
        raise exc.with_prefix(
            f'DelegateAdd: cannot set "{delegate.plugin_type}" interface name to "{rt.ifname}": '
        ) from exc


async def delegate_add(
    cni: CNI, delegate: Delegate, rt: RuntimeConf, *, ifname_checked: bool = False
) -> dict[str, Any]:
    """Upstream ``DelegateAdd``: check the interface name in the pod, then run the plugin(s)."""
    if not ifname_checked:
        await check_ifname(delegate, rt)
    if delegate.is_conflist:
        return await cni.add_network_list(conflist_from_bytes(delegate.raw), rt)
    return await cni.add_network(conf_from_bytes(delegate.raw), rt)


@dataclass(frozen=True, slots=True)
class _Verb:
    """How upstream names one verb in its error texts, and the libcni calls behind it."""

    outer: str  # DelegateDel
    list_op: str  # ConflistDel
    list_fn: str  # DelNetworkList
    one_fn: str  # DelNetwork
    run_list: Callable[[CNI, NetworkConfigList, RuntimeConf], Awaitable[None]]
    run_one: Callable[[CNI, NetworkConfig, RuntimeConf], Awaitable[None]]


_DEL = _Verb(
    "DelegateDel", "ConflistDel", "DelNetworkList", "DelNetwork",
    CNI.del_network_list, CNI.del_network,
)  # fmt: skip
_CHECK = _Verb(
    "DelegateCheck", "ConflistCheck", "CheckNetworkList", "CheckNetwork",
    CNI.check_network_list, CNI.check_network,
)  # fmt: skip


async def _run(verb: _Verb, cni: CNI, delegate: Delegate, rt: RuntimeConf) -> None:
    if delegate.is_conflist:
        lowered = verb.list_op[0].lower() + verb.list_op[1:]
        prefix = (
            f'{verb.outer}: error invoking {verb.list_op} - "{delegate.network_name}": '
            f"{lowered}: error in getting result from {verb.list_fn}: "
        )
    else:
        prefix = (
            f'{verb.outer}: error invoking {verb.outer} - "{delegate.plugin_type}": '
            f"error in getting result from {verb.one_fn}: "
        )
    try:
        if delegate.is_conflist:
            await verb.run_list(cni, conflist_from_bytes(delegate.raw), rt)
        else:
            await verb.run_one(cni, conf_from_bytes(delegate.raw), rt)
    except CNIError as exc:
        raise exc.with_prefix(prefix) from exc


async def delegate_del(cni: CNI, delegate: Delegate, rt: RuntimeConf) -> None:
    # The DEL's share of the request's timeline (ADD's is ``metrics.phase``, with Prometheus).
    with timeline.phase(f"delegate_del[{delegate.plugin_type or delegate.name}]"):
        await _run(_DEL, cni, delegate, rt)


async def delegate_check(cni: CNI, delegate: Delegate, rt: RuntimeConf) -> None:
    await _run(_CHECK, cni, delegate, rt)
