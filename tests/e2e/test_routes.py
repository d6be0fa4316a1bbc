"""Default-route edits in a real namespace and on real libcni cache files
(docs/upstream.md, "Default-route handling")."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cni_shim import gojson
from cni_shim.errors import CNIError
from multusd.cni import cache
from multusd.cni.routes import RouteActions, apply_default_routes, rewrite_cached_routes
from tests.e2e.harness import ip
from tests.netns import netns_path

NetnsFactory = Callable[[], Awaitable[str]]
DELETE_ALL = RouteActions(delete_v4=True, delete_v6=True, add=())

# ---------------------------------------------------------------------------------------------
# In the namespace


async def pod(netns: NetnsFactory) -> str:
    """A namespace with eth0 and net1, each with IPv4 + IPv6 and a default route per family."""
    name = await netns()
    links = {"eth0": ("10.9.0", "2001:db8:0"), "net1": ("10.9.1", "2001:db8:1")}
    for metric, (link, (v4, v6)) in enumerate(links.items(), start=100):
        # veth (peer kept in the namespace): CI kernels may lack the dummy module.
        await ip("-n", name, "link", "add", link, "type", "veth", "peer", "name", f"{link}p")
        await ip("-n", name, "link", "set", f"{link}p", "up")
        await ip("-n", name, "link", "set", link, "up")
        await ip("-n", name, "addr", "add", f"{v4}.2/24", "dev", link)
        await ip("-n", name, "-6", "addr", "add", f"{v6}::2/64", "dev", link, "nodad")
        await ip("-n", name, "route", "add", "default", "via", f"{v4}.1", "dev", link,
                 "metric", str(metric))  # fmt: skip
        await ip("-n", name, "-6", "route", "add", "default", "via", f"{v6}::1", "dev", link,
                 "metric", str(metric))  # fmt: skip
    return name


async def defaults(name: str, *extra: str) -> set[tuple[str, str, str]]:
    """``{(family, dev, gateway)}`` of the default routes (main table unless ``extra`` says)."""
    found: set[tuple[str, str, str]] = set()
    for family in ("-4", "-6"):
        out = await ip("-n", name, "-j", family, "route", "show", "default", *extra)
        for route in json.loads(out or "[]"):
            found.add((family, route["dev"], route.get("gateway", "")))
    return found


EVERYTHING = {
    ("-4", "eth0", "10.9.0.1"),
    ("-6", "eth0", "2001:db8::1"),
    ("-4", "net1", "10.9.1.1"),
    ("-6", "net1", "2001:db8:1::1"),
}


def path(name: str) -> str:
    return netns_path(name)


async def test_delete_removes_only_that_links_defaults(netns: NetnsFactory) -> None:
    name = await pod(netns)
    assert await defaults(name) == EVERYTHING
    await apply_default_routes(path(name), "eth0", DELETE_ALL)
    assert await defaults(name) == {r for r in EVERYTHING if r[1] == "net1"}


async def test_delete_follows_the_family_flags(netns: NetnsFactory) -> None:
    name = await pod(netns)
    await apply_default_routes(path(name), "net1", RouteActions(True, False, ()))
    assert await defaults(name) == EVERYTHING - {("-4", "net1", "10.9.1.1")}


async def test_moving_the_default_route_to_net1(netns: NetnsFactory) -> None:
    """The ADD sequence of a pod whose net1 selection says ``default-route: [10.9.1.254]``."""
    name = await pod(netns)
    await apply_default_routes(path(name), "eth0", DELETE_ALL)
    await apply_default_routes(path(name), "net1", RouteActions(True, True, ("10.9.1.254",)))
    assert await defaults(name) == {("-4", "net1", "10.9.1.254")}
    await apply_default_routes(path(name), "net1", RouteActions(False, False, ("2001:db8:1::fe",)))
    assert await defaults(name) == {("-4", "net1", "10.9.1.254"), ("-6", "net1", "2001:db8:1::fe")}


async def test_existing_gateway_is_not_an_error(netns: NetnsFactory) -> None:
    name = await pod(netns)
    await apply_default_routes(path(name), "net1", DELETE_ALL)
    twice = RouteActions(False, False, ("10.9.1.1",))
    await apply_default_routes(path(name), "net1", twice)
    await apply_default_routes(path(name), "net1", twice)
    assert ("-4", "net1", "10.9.1.1") in await defaults(name)


async def test_other_tables_and_non_default_routes_survive(netns: NetnsFactory) -> None:
    name = await pod(netns)
    for family, gateway in (("-4", "10.9.1.1"), ("-6", "2001:db8:1::1")):
        await ip("-n", name, family, "route", "add", "default", "via", gateway, "dev", "net1",
                 "table", "7")  # fmt: skip
    await ip("-n", name, "route", "add", "192.0.2.0/24", "via", "10.9.1.1", "dev", "net1")
    await apply_default_routes(path(name), "net1", DELETE_ALL)
    assert await defaults(name, "table", "7") == {
        ("-4", "net1", "10.9.1.1"),
        ("-6", "net1", "2001:db8:1::1"),
    }
    assert "192.0.2.0/24" in await ip("-n", name, "route")


async def test_missing_link_deletes_nothing(netns: NetnsFactory) -> None:
    """Our decision on upstream's quirk: no link, no routes of other links touched."""
    name = await pod(netns)
    await apply_default_routes(path(name), "net9", DELETE_ALL)
    assert await defaults(name) == EVERYTHING


async def test_missing_link_cannot_get_a_gateway(netns: NetnsFactory) -> None:
    name = await pod(netns)
    with pytest.raises(CNIError) as info:
        await apply_default_routes(path(name), "net9", RouteActions(True, True, ("10.9.1.1",)))
    assert info.value.msg == (
        "error setting default gateway: SetDefaultGW: Error getting link Link not found"
    )


async def test_unreachable_gateway(netns: NetnsFactory) -> None:
    name = await pod(netns)
    with pytest.raises(CNIError) as info:
        await apply_default_routes(path(name), "net1", RouteActions(True, True, ("192.0.2.1",)))
    assert info.value.msg == "error setting default gateway: network is unreachable"
    # The deletion had already happened, as upstream (no rollback).
    assert await defaults(name) == {r for r in EVERYTHING if r[1] == "eth0"}


async def test_missing_namespace() -> None:
    with pytest.raises(CNIError) as info:
        await apply_default_routes("/run/netns/mt-nonexistent", "net1", DELETE_ALL)
    assert info.value.msg == (
        "error deleting default gateway: DeleteDefaultGW: Error getting namespace "
        'failed to Statfs "/run/netns/mt-nonexistent": no such file or directory'
    )


async def test_nothing_to_do_does_not_touch_the_namespace() -> None:
    await apply_default_routes("/run/netns/mt-nonexistent", "net1", RouteActions(False, False, ()))


# ---------------------------------------------------------------------------------------------
# In the libcni result cache

CID = "0123456789abcdef"


async def cached(tmp: Path, result: dict[str, Any] | None) -> tuple[str, str]:
    entry = cache.CacheEntry(
        container_id=CID, network_name="net", ifname="net1", config=b"{}", result=result
    )
    return str(tmp), await cache.write_entry(str(tmp), entry)


def read(file: str) -> dict[str, Any]:
    data = Path(file).read_bytes()
    obj = json.loads(data)
    assert data.decode() == gojson.dumps(obj, sort_keys=True), "keys must be sorted"
    assert stat.S_IMODE(os.stat(file).st_mode) == 0o600
    result: dict[str, Any] = obj["result"]
    return result


V4_DEFAULT = {"dst": "0.0.0.0/0", "gw": "10.9.0.1"}
V6_DEFAULT = {"dst": "::/0", "gw": "2001:db8::1"}
OTHER = {"dst": "10.0.0.0/8", "gw": "10.9.0.1"}


async def test_cache_moves_the_default_route(tmp_path: Path) -> None:
    result = {"cniVersion": "1.0.0", "routes": [V4_DEFAULT, V6_DEFAULT, OTHER]}
    cache_dir, file = await cached(tmp_path, result)
    actions = RouteActions(True, True, ("10.9.1.254",))
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", actions)
    assert read(file)["routes"] == [OTHER, {"dst": "0.0.0.0/0", "gw": "10.9.1.254"}]
    assert json.loads(Path(file).read_bytes())["containerId"] == CID


async def test_cache_matches_every_spelling_of_the_default(tmp_path: Path) -> None:
    """Quirk 15 decided: upstream's own ``::0/0`` and libcni's ``::/0`` both go."""
    routes = [{"dst": "::0/0"}, {"dst": "::/0"}, {"dst": "0:0::0/0"}, {"dst": "::/1"}]
    cache_dir, file = await cached(tmp_path, {"cniVersion": "0.4.0", "routes": routes})
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", RouteActions(False, True, ()))
    assert read(file)["routes"] == [{"dst": "::/1"}]


async def test_cache_family_flags_and_dstless_routes(tmp_path: Path) -> None:
    routes = [V4_DEFAULT, V6_DEFAULT, {"gw": "10.9.0.1"}]
    cache_dir, file = await cached(tmp_path, {"cniVersion": "0.3.1", "routes": routes})
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", RouteActions(True, False, ()))
    assert read(file)["routes"] == [V6_DEFAULT]  # upstream drops dst-less routes too


async def test_cache_routes_key_removed_when_empty(tmp_path: Path) -> None:
    result = {"cniVersion": "1.1.0", "routes": [V4_DEFAULT], "ips": [{"address": "10.9.0.2/24"}]}
    cache_dir, file = await cached(tmp_path, result)
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", DELETE_ALL)
    assert read(file) == {"cniVersion": "1.1.0", "ips": [{"address": "10.9.0.2/24"}]}


async def test_cache_add_without_routes_and_v6_spelling(tmp_path: Path) -> None:
    cache_dir, file = await cached(tmp_path, {"cniVersion": "1.0.0", "dns": {}})
    actions = RouteActions(False, False, ("10.9.1.254", "2001:db8:1::fe"))
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", actions)
    assert read(file)["routes"] == [
        {"dst": "0.0.0.0/0", "gw": "10.9.1.254"},
        {"dst": "::/0", "gw": "2001:db8:1::fe"},
    ]


@pytest.mark.parametrize("version", ["0.2.0", None])
async def test_cache_020_layout(tmp_path: Path, version: str | None) -> None:
    result: dict[str, Any] = {
        "ip4": {"ip": "10.9.1.2/24", "routes": [V4_DEFAULT, OTHER]},
        "ip6": {"ip": "2001:db8:1::2/64", "routes": [{"dst": "::0/0", "gw": "2001:db8:1::1"}]},
    }
    if version:
        result["cniVersion"] = version
    cache_dir, file = await cached(tmp_path, result)
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", DELETE_ALL)
    after = read(file)
    assert after["ip4"]["routes"] == [OTHER]
    assert "routes" not in after["ip6"]
    actions = RouteActions(False, False, ("10.9.1.254", "2001:db8:1::fe"))
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", actions)
    after = read(file)
    assert after["ip4"]["routes"] == [OTHER, {"dst": "0.0.0.0/0", "gw": "10.9.1.254"}]
    assert after["ip6"]["routes"] == [{"dst": "::/0", "gw": "2001:db8:1::fe"}]


async def test_cache_020_without_ip6_section_gets_no_v6_route(tmp_path: Path) -> None:
    cache_dir, file = await cached(tmp_path, {"cniVersion": "0.2.0", "ip4": {"ip": "10.9.1.2/24"}})
    actions = RouteActions(False, False, ("2001:db8:1::fe",))
    await rewrite_cached_routes(cache_dir, "net", CID, "net1", actions)
    assert read(file) == {"cniVersion": "0.2.0", "ip4": {"ip": "10.9.1.2/24"}}


@pytest.mark.parametrize(
    ("result", "actions", "message"),
    [
        (
            {"cniVersion": "0.5.0", "routes": []},
            DELETE_ALL,
            "error deleting default gateway in cache: not supported version: 0.5.0",
        ),
        (
            {"cniVersion": "0.5.0"},
            RouteActions(False, False, ("10.9.1.1",)),
            "error setting default gateway in cache: not supported version: 0.5.0",
        ),
        (None, DELETE_ALL, "error deleting default gateway in cache: cannot get result from cache"),
        (
            {"cniVersion": "1.0.0", "routes": None},
            RouteActions(False, False, ("10.9.1.1",)),
            "error setting default gateway in cache: wrong routes format: <nil>",
        ),
        (
            {"cniVersion": "1.0.0", "routes": [{"dst": 5}]},
            DELETE_ALL,
            "error deleting default gateway in cache: wrong dst format: 5",
        ),
        (
            {"cniVersion": "1.0.0", "routes": ["x"]},
            DELETE_ALL,
            "error deleting default gateway in cache: wrong route format: x",
        ),
        (
            {"cniVersion": 1},
            DELETE_ALL,
            "error deleting default gateway in cache: wrong cniVersion format: 1",
        ),
        (
            {"cniVersion": "0.2.0", "ip4": {"routes": {"a": 1}}},
            DELETE_ALL,
            "error deleting default gateway in cache: wrong ip4 routes format: map[a:1]",
        ),
    ],
)
async def test_cache_errors(
    tmp_path: Path, result: dict[str, Any] | None, actions: RouteActions, message: str
) -> None:
    cache_dir, file = await cached(tmp_path, result)
    before = Path(file).read_bytes()
    with pytest.raises(CNIError) as info:
        await rewrite_cached_routes(cache_dir, "net", CID, "net1", actions)
    assert info.value.msg == message
    assert Path(file).read_bytes() == before


async def test_cache_failed_add_keeps_the_deletion(tmp_path: Path) -> None:
    """Upstream writes the deletion before it tries the addition."""
    result = {"ip4": {"routes": [V4_DEFAULT]}, "ip6": None}
    cache_dir, file = await cached(tmp_path, result)
    with pytest.raises(CNIError) as info:
        await rewrite_cached_routes(
            cache_dir, "net", CID, "net1", RouteActions(True, False, ("2001:db8::fe",))
        )
    assert info.value.msg == "error setting default gateway in cache: wrong ip6 format: <nil>"
    assert read(file) == {"ip4": {}, "ip6": None}


async def test_cache_file_missing(tmp_path: Path) -> None:
    with pytest.raises(CNIError) as info:
        await rewrite_cached_routes(str(tmp_path), "net", CID, "net1", DELETE_ALL)
    file = tmp_path / "results" / f"net-{CID}-net1"
    assert info.value.msg == (
        f"error deleting default gateway in cache: open {file}: no such file or directory"
    )
