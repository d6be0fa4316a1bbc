"""``passthru`` installed beside the shim by ``multusd install-shim``, as upstream's installer
copies it beside ``multus-shim``: as a script on the host's Python, and (``--bundle``) on the
shim's private interpreter, run here in a chroot holding no other Python, as on a kind node.
A reinstall never removes the interpreter that the installed ``passthru`` still names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cni_shim import passthru
from multusd import shim_bundle
from tests.integration.test_host_shim import CHROOT, HOST_BIN, UNSHARE, _copy_host_libs

ADD_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "abc",
    "CNI_NETNS": "/var/run/netns/x",
    "CNI_IFNAME": "net1",
    "CNI_PATH": str(HOST_BIN),
}
CONF = b'{"cniVersion":"1.0.0","name":"aux","type":"passthru"}'


def install_shim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "multusd", "install-shim", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def first_line(path: Path) -> bytes:
    return path.read_bytes().split(b"\n", 1)[0]


def test_install_shim_writes_passthru_beside_the_shim(tmp_path: Path) -> None:
    done = install_shim("--dest", str(tmp_path), "--name", "shim", "--interpreter", sys.executable)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'shim'}\n"  # stdout still names the shim alone
    assert done.stderr == f"multusd install-shim: installed {tmp_path / 'passthru'}\n"
    plugin = tmp_path / "passthru"
    assert plugin.stat().st_mode & 0o777 == 0o755
    assert first_line(plugin) == first_line(tmp_path / "shim")
    version = subprocess.run(
        [str(plugin)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, check=True
    )
    assert version.stdout.decode() == passthru.VERSION_OUTPUT
    added = subprocess.run([str(plugin)], input=CONF, env=ADD_ENV, capture_output=True, check=False)
    assert (added.returncode, added.stdout) == (0, b'{\n    "cniVersion": "1.0.0"\n}')


def test_bundle_install_runs_passthru_on_the_shims_interpreter(tmp_path: Path) -> None:
    done = install_shim("--bundle", "--dest", str(tmp_path), "--host-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'multus-shim'}\n"
    plugin = tmp_path / "passthru"
    assert first_line(plugin) == first_line(tmp_path / "multus-shim")
    assert first_line(plugin).startswith(f"#!{tmp_path}/multus-shim.d/".encode())
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "multus-shim",
        "multus-shim.d",
        "passthru",
    ]


def test_passthru_needs_a_bundled_shim(tmp_path: Path) -> None:
    with pytest.raises(shim_bundle.BundleError, match="no bundled multus-shim"):
        shim_bundle.install_host_passthru(tmp_path)


def test_reinstall_keeps_what_passthru_names(tmp_path: Path) -> None:
    """A passthru naming an older interpreter than the shim's (a reinstall cut short) keeps
    that interpreter through the next install, which then points passthru at the new one."""
    shim_bundle.install_host_shim(tmp_path)
    plugin = shim_bundle.install_host_passthru(tmp_path)
    runtime_root = tmp_path / "multus-shim.d"
    (current,) = runtime_root.iterdir()
    old = "aaaaaaaaaaaaaaaa"
    (runtime_root / old / "bin").mkdir(parents=True)
    (runtime_root / "bbbbbbbbbbbbbbbb").mkdir()
    plugin.write_text(plugin.read_text().replace(current.name, old))
    shim_bundle.install_host_shim(tmp_path)
    assert sorted(p.name for p in runtime_root.iterdir()) == sorted([old, current.name])
    shim_bundle.install_host_passthru(tmp_path)
    assert current.name in first_line(plugin).decode()


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    """A node with no Python: the bundle installed at /opt/cni/bin, the host's base libraries."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="chp"))
    try:
        bin_dir = root / "opt/cni/bin"
        shim_bundle.install_host_shim(bin_dir, host_dest_dir=HOST_BIN)
        shim_bundle.install_host_passthru(bin_dir, host_dest_dir=HOST_BIN)
        (root / "proc").mkdir()
        _copy_host_libs(root)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def in_chroot(
    tree: Path, environ: dict[str, str], stdin: bytes
) -> subprocess.CompletedProcess[bytes]:
    command = [UNSHARE, "--fork", "--pid", f"--mount-proc={tree}/proc", CHROOT, str(tree)]
    return subprocess.run(
        [*command, str(HOST_BIN / "passthru")],
        input=stdin,
        env=environ,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_passthru_in_a_chroot_without_python(tree: Path) -> None:
    version = in_chroot(tree, {"CNI_COMMAND": "VERSION"}, b"")
    assert (version.returncode, version.stdout) == (0, passthru.VERSION_OUTPUT.encode())
    prev = {"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.2/24"}]}
    conf = json.dumps({"cniVersion": "0.4.0", "name": "aux", "prevResult": prev}).encode()
    added = in_chroot(tree, ADD_ENV, conf)
    assert (added.returncode, added.stdout, added.stderr) == (
        0,
        b'{\n    "cniVersion": "0.4.0"\n}',
        b"",
    )
    deleted = in_chroot(tree, {**ADD_ENV, "CNI_COMMAND": "DEL"}, conf)
    assert (deleted.returncode, deleted.stdout, deleted.stderr) == (0, b"", b"")


def test_passthru_error_path_in_a_chroot_without_python(tree: Path) -> None:
    """The decoder behind the config check (lazy imports) is in the bundle too."""
    bad = b'{"cniVersion":"1.0.0","name":"aux","dns":{"nameservers":[1]}}'
    done = in_chroot(tree, ADD_ENV, bad)
    assert done.returncode == 1
    assert b"Traceback" not in done.stderr
    assert json.loads(done.stdout) == {
        "code": 999,
        "msg": "passthru cni: error parsing CNI configuration: passthru cni: failed to load "
        "netconf: json: cannot unmarshal number into Go struct field DNS.NetConf.dns.nameservers "
        "of type string",
    }
