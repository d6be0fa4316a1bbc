"""The delegate ("scratch") cache: upstream HEAD's byte layout (docs/upstream.md, "Delegate cache")
and its I/O."""

from __future__ import annotations

import base64
import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from cni_shim import gojson
from multusd.commands import scratch
from multusd.networks.delegates import Delegate, delegate_from_bytes

FLANNEL = (
    b'{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":'
    b'{"hairpinMode":true,"isDefaultGateway":true}},{"type":"portmap","capabilities":'
    b'{"portMappings":true}}]}'
)
MACVLAN = (
    b'{"args":{"cni":{"foo":"bar"}},"cniVersion":"0.3.1","deviceID":"0000:00:01.0",'
    b'"ipam":{"type":"static"},"master":"eth1","name":"macvlan-conf",'
    b'"pciBusID":"0000:00:01.0","type":"macvlan"}'
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def example_delegates() -> list[Delegate]:
    master = replace(
        delegate_from_bytes(FLANNEL).as_master(), filter_v4_gateway=True, filter_v6_gateway=True
    )
    macvlan = replace(
        delegate_from_bytes(MACVLAN),
        name="default/macvlan-conf",
        ifname_request="net5",
        mac_request="c2:11:22:33:44:66",
        ip_request=("10.1.1.5/24",),
        gateway_request=("10.1.1.1",),
        filter_v4_gateway=False,
        filter_v6_gateway=True,
        device_id="0000:00:01.0",
        resource_name="intel.com/sriov",
        port_mappings_request=({"hostPort": 80, "containerPort": 80},),
        bandwidth_request={"ingressRate": 1},
    )
    return [master, macvlan]


EXPECTED = (
    '[{"Conf":{"cniVersion":"0.3.1","ipam":{},"name":"cbr0"},'
    '"ConfList":{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"ipam":{},"type":"flannel"},'
    '{"capabilities":{"portMappings":true},"ipam":{},"type":"portmap"}]},'
    '"Name":"cbr0","IsFilterV4Gateway":true,"IsFilterV6Gateway":true,'
    f'"Bytes":"{b64(FLANNEL)}"}},'
    '{"Conf":{"cniVersion":"0.3.1","ipam":{"type":"static"},"name":"macvlan-conf",'
    '"type":"macvlan"},"ConfList":{},"Name":"default/macvlan-conf","ifnameRequest":"net5",'
    '"macRequest":"c2:11:22:33:44:66","ipRequest":["10.1.1.5/24"],"default-route":["10.1.1.1"],'
    '"IsFilterV4Gateway":false,"IsFilterV6Gateway":true,"deviceID":"0000:00:01.0",'
    f'"resourceName":"intel.com/sriov","Bytes":"{b64(MACVLAN)}"}}]'
)


def test_encoding_matches_upstream_example() -> None:
    encoded = gojson.dumps([scratch.encode_delegate(d) for d in example_delegates()])
    assert encoded == EXPECTED


def test_minimal_single_plugin() -> None:
    raw = b'{"type":"bridge"}'
    assert gojson.dumps(scratch.encode_delegate(delegate_from_bytes(raw))) == (
        '{"Conf":{"ipam":{},"type":"bridge"},"ConfList":{},"Name":"",'
        f'"IsFilterV4Gateway":false,"IsFilterV6Gateway":false,"Bytes":"{b64(raw)}"}}'
    )


def test_plugin_view_dns_capabilities_and_ipam() -> None:
    raw = json.dumps(
        {
            "type": "bridge",
            "name": "n",
            "dns": {"nameservers": [], "domain": "", "search": ["a"], "options": []},
            "capabilities": {"z": True, "a": False},
            "ipam": {"type": "host-local", "subnet": "10.0.0.0/8"},
            "prevResult": {},
            "cni.dev/valid-attachments": [],
        }
    ).encode()
    conf = scratch.encode_delegate(delegate_from_bytes(raw))["Conf"]
    assert gojson.dumps(conf) == (
        '{"capabilities":{"a":false,"z":true},"dns":{"search":["a"]},'
        '"ipam":{"type":"host-local"},"name":"n","type":"bridge"}'
    )
    raw = b'{"type":"bridge","dns":{"nameservers":[]}}'
    assert "dns" not in scratch.encode_delegate(delegate_from_bytes(raw))["Conf"]


def test_empty_gateway_request_still_written() -> None:
    delegate = replace(delegate_from_bytes(b'{"type":"x"}'), gateway_request=())
    assert scratch.encode_delegate(delegate)["default-route"] == []


async def test_save_modes_and_bytes(tmp_path: Path) -> None:
    cni_dir = tmp_path / "multus"
    await scratch.save(str(cni_dir), "cid", example_delegates())
    path = scratch.cache_path(str(cni_dir), "cid")
    assert path == cni_dir / "cid"
    assert path.read_text() == EXPECTED
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cni_dir.stat().st_mode) == 0o700
    assert [p.name for p in cni_dir.iterdir()] == ["cid"]


async def test_save_overwrites(tmp_path: Path) -> None:
    await scratch.save(str(tmp_path), "cid", example_delegates())
    await scratch.save(str(tmp_path), "cid", example_delegates()[:1])
    loaded = await scratch.load(str(tmp_path), "cid")
    assert loaded is not None and len(loaded) == 1


async def test_load_round_trip(tmp_path: Path) -> None:
    original = example_delegates()
    await scratch.save(str(tmp_path), "cid", original)
    loaded = await scratch.load(str(tmp_path), "cid")
    assert loaded is not None
    master, macvlan = loaded
    assert master.master and master.is_conflist and master.raw == FLANNEL
    assert (master.filter_v4_gateway, master.filter_v6_gateway) == (True, True)
    assert master.gateway_request is None
    assert not macvlan.master
    assert macvlan.raw == MACVLAN
    assert macvlan.name == "default/macvlan-conf"
    assert macvlan.ifname_request == "net5"
    assert macvlan.mac_request == "c2:11:22:33:44:66"
    assert macvlan.ip_request == ("10.1.1.5/24",)
    assert macvlan.gateway_request == ("10.1.1.1",)
    assert (macvlan.filter_v4_gateway, macvlan.filter_v6_gateway) == (False, True)
    assert macvlan.device_id == "0000:00:01.0"
    assert macvlan.resource_name == "intel.com/sriov"
    # Not stored upstream either.
    assert macvlan.port_mappings_request is None
    assert macvlan.bandwidth_request is None


async def test_load_missing_is_none(tmp_path: Path) -> None:
    assert await scratch.load(str(tmp_path), "nope") is None
    assert await scratch.load(str(tmp_path / "no-dir"), "nope") is None


async def test_load_first_is_master_even_if_single(tmp_path: Path) -> None:
    (tmp_path / "cid").write_text(json.dumps([{"Bytes": b64(b'{"type":"a"}')}]))
    loaded = await scratch.load(str(tmp_path), "cid")
    assert loaded is not None and loaded[0].master


async def test_load_empty_list(tmp_path: Path) -> None:
    (tmp_path / "cid").write_text("[]")
    assert await scratch.load(str(tmp_path), "cid") == []


async def test_decoding_is_case_insensitive(tmp_path: Path) -> None:
    entry = {
        "bytes": b64(b'{"type":"a","name":"n"}'),
        "NAME": "ns/n",
        "IfNameRequest": "foo",
        "MACREQUEST": "aa:bb:cc:dd:ee:ff",
        "iprequest": ["1.2.3.4/32"],
        "Default-Route": ["1.2.3.1"],
        "isfilterv4gateway": True,
        "DeviceId": "dev",
        "ResourceName": "r",
    }
    (tmp_path / "cid").write_text(json.dumps([entry]))
    loaded = await scratch.load(str(tmp_path), "cid")
    assert loaded is not None
    (delegate,) = loaded
    assert delegate.name == "ns/n"
    assert delegate.ifname_request == "foo"
    assert delegate.mac_request == "aa:bb:cc:dd:ee:ff"
    assert delegate.ip_request == ("1.2.3.4/32",)
    assert delegate.gateway_request == ("1.2.3.1",)
    assert delegate.filter_v4_gateway and not delegate.filter_v6_gateway
    assert (delegate.device_id, delegate.resource_name) == ("dev", "r")


@pytest.mark.parametrize(
    "content",
    [
        b"{",
        b'{"Bytes": ""}',
        b"[1]",
        b'[{"Bytes": "!!not base64!!"}]',
        b'[{"Bytes": ""}]',
        b'[{"Bytes": "' + base64.b64encode(b'{"name":"no-type"}') + b'"}]',
    ],
)
async def test_corrupt_cache(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "cid").write_bytes(content)
    with pytest.raises(scratch.CorruptCache) as info:
        await scratch.load(str(tmp_path), "cid")
    assert str(tmp_path / "cid") in str(info.value)


async def test_remove_is_idempotent(tmp_path: Path) -> None:
    await scratch.save(str(tmp_path), "cid", example_delegates())
    await scratch.remove(str(tmp_path), "cid")
    assert not (tmp_path / "cid").exists()
    await scratch.remove(str(tmp_path), "cid")
    await scratch.remove(str(tmp_path / "missing-dir"), "cid")
