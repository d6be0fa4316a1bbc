"""The libcni result cache: byte layout, permissions, atomic writes, listing."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from multusd.cni import cache
from multusd.cni.invoke import LibcniError

CONFIG = b'{"cniVersion":"1.0.0","name":"net","plugins":[{"type":"bridge"}]}'


def _entry(**overrides: object) -> cache.CacheEntry:
    values: dict[str, object] = {
        "container_id": "c1",
        "network_name": "net",
        "ifname": "eth0",
        "config": CONFIG,
        "netns": "/var/run/netns/x",
        "cni_args": (("IgnoreUnknown", "true"), ("K8S_POD_NAME", "p")),
        "capability_args": {
            "portMappings": [{"hostPort": 80, "containerPort": 8080}],
            "ips": ["1"],
        },
        "result": {
            "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}],
            "cniVersion": "1.0.0",
        },
    }
    values.update(overrides)
    return cache.CacheEntry(**values)  # type: ignore[arg-type]


def test_layout_is_libcni_byte_for_byte() -> None:
    b64 = base64.b64encode(CONFIG).decode()
    assert (
        cache.encode_entry(_entry())
        == (
            '{"kind":"cniCacheV1","containerId":"c1","config":"' + b64 + '","ifName":"eth0",'
            '"networkName":"net","netns":"/var/run/netns/x",'
            '"cniArgs":[["IgnoreUnknown","true"],["K8S_POD_NAME","p"]],'
            '"capabilityArgs":{"ips":["1"],"portMappings":[{"hostPort":80,"containerPort":8080}]},'
            '"result":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}}'
        ).encode()
    )


def test_empty_fields_are_omitted() -> None:
    entry = _entry(netns="", cni_args=(), capability_args={}, result=None)
    b64 = base64.b64encode(CONFIG).decode()
    assert (
        cache.encode_entry(entry)
        == (
            f'{{"kind":"cniCacheV1","containerId":"c1","config":"{b64}","ifName":"eth0",'
            '"networkName":"net"}'
        ).encode()
    )


def test_path_needs_all_parts() -> None:
    with pytest.raises(LibcniError) as info:
        cache.entry_path("/c", "net", "", "eth0")
    assert info.value.msg == (
        'cache file path requires network name ("net"), container ID (""), '
        'and interface name ("eth0")'
    )


async def test_write_is_atomic_with_private_modes(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cni"
    path = await cache.write_entry(str(cache_dir), _entry())
    assert path == str(cache_dir / "results" / "net-c1-eth0")
    assert stat.S_IMODE((cache_dir / "results").stat().st_mode) == 0o700
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert Path(path).read_bytes() == cache.encode_entry(_entry())
    # overwrite by rename (a new inode, never a half-written file), no temp files left behind
    inode = Path(path).stat().st_ino
    await cache.write_entry(str(cache_dir), _entry(netns=""))
    assert Path(path).stat().st_ino != inode
    assert sorted(p.name for p in (cache_dir / "results").iterdir()) == ["net-c1-eth0"]
    assert b"netns" not in Path(path).read_bytes()


async def test_read_decode_delete_roundtrip(tmp_path: Path) -> None:
    await cache.write_entry(str(tmp_path), _entry())
    data = await cache.read_entry_bytes(str(tmp_path), "net", "c1", "eth0")
    assert data is not None
    entry = cache.decode_entry(data)
    assert (entry.kind, entry.container_id, entry.ifname, entry.network_name) == (
        "cniCacheV1",
        "c1",
        "eth0",
        "net",
    )
    assert entry.config == CONFIG
    assert entry.cni_args == (("IgnoreUnknown", "true"), ("K8S_POD_NAME", "p"))
    assert await cache.read_entry_bytes(str(tmp_path), "net", "c2", "eth0") is None
    await cache.delete_entry(str(tmp_path), "net", "c1", "eth0")
    await cache.delete_entry(str(tmp_path), "net", "c1", "eth0")  # already gone: fine
    assert await cache.read_entry_bytes(str(tmp_path), "net", "c1", "eth0") is None


def test_decode_errors_are_go_texts() -> None:
    with pytest.raises(ValueError, match="unexpected end of JSON input"):
        cache.decode_entry(b'{"kind":')
    with pytest.raises(ValueError, match=r"Go struct field cachedInfo\.ifName of type string"):
        cache.decode_entry(b'{"kind":"cniCacheV1","ifName":3}')


async def test_listing(tmp_path: Path) -> None:
    await cache.write_entry(str(tmp_path), _entry())
    await cache.write_entry(str(tmp_path), _entry(container_id="c2", network_name="other"))
    results = tmp_path / "results"
    (results / "junk").write_text("not json")
    (results / "legacy-c9-eth0").write_text('{"containerId":"c9","ifName":"eth0"}')
    listed = await cache.list_entries(str(tmp_path))
    assert [(e.network_name, e.container_id) for e in listed] == [("net", "c1"), ("other", "c2")]
    assert [e.container_id for e in await cache.list_entries(str(tmp_path), "c2")] == ["c2"]
    # Multus' own view ignores kind and network, and keeps every decodable file.
    assert await cache.gather_valid_attachments(str(tmp_path)) == [
        ("c9", "eth0"),
        ("c1", "eth0"),
        ("c2", "eth0"),
    ]


async def test_missing_directory(tmp_path: Path) -> None:
    assert await cache.list_entries(str(tmp_path)) == []
    with pytest.raises(LibcniError) as info:
        await cache.gather_valid_attachments(str(tmp_path))
    assert info.value.msg == f"open {tmp_path}/results: no such file or directory"
