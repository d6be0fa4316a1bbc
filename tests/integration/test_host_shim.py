"""The host shim with its private interpreter, run inside a chroot that holds no Python at all.

The chroot is built the way a minimal node looks: the installed ``/opt/cni/bin`` plus only the
host's base libraries the installed ELF files load (glibc and friends, found with ``ldd`` and
copied at their paths). If the shim needed anything of the host's Python, it would fail here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cni_shim
from cni_shim import readiness, results
from cni_shim.__main__ import VERSION_OUTPUT, version_string
from multusd import shim_bundle
from tests.unit.cni_shim.shimfakes import FakeDaemon, ok, response

# chroot needs root; CI runs as root, so a non-root run fails here rather than skipping.

HOST_BIN = Path("/opt/cni/bin")
# The shim gets no PATH. A host always has /proc, and ld.so needs /proc/self/exe to expand
# ``$ORIGIN`` (how the official images' python finds libpython): mount one, in a namespace
# of its own so it vanishes with the process.
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
RESULT_110: dict[str, Any] = {
    "cniVersion": "1.1.0",
    "interfaces": [{"mac": "aa:bb:cc:dd:ee:ff", "name": "eth0", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 0}],
}


def _elves(root: Path) -> list[Path]:
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and p.read_bytes()[:4] == b"\x7fELF"
    ]


def _copy_host_libs(tree: Path) -> set[str]:
    """Copy, at their host paths, the libraries the tree's ELF files load; their sonames."""
    copied: set[str] = set()
    for elf in _elves(tree):
        for soname, resolved in shim_bundle.shared_libs(elf).items():
            assert resolved is not None, f"{elf} needs {soname}, not found"
            if Path(resolved).resolve().is_relative_to(tree.resolve()):
                continue
            target = tree / resolved.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(resolved, target)  # follows symlinks: a plain file at that path
            copied.add(soname)
    return copied


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="chr"))
    try:
        shim_bundle.install_host_shim(root / "opt/cni/bin", host_dest_dir=HOST_BIN)
        (root / "run/multus").mkdir(parents=True)
        (root / "tmp").mkdir()
        (root / "proc").mkdir()
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def host_libs(tree: Path) -> set[str]:
    return _copy_host_libs(tree)


@pytest.fixture
def daemon(tree: Path, host_libs: set[str]) -> Iterator[FakeDaemon]:
    """A fake daemon whose socket is the chroot's ``/run/multus/multus.sock``."""
    fake = FakeDaemon(str(tree / "run/multus"), routes={"/readyz": ok, "/healthz": ok})
    loop = asyncio.new_event_loop()
    servers: list[asyncio.base_events.Server] = []

    async def start() -> None:
        servers.append(await asyncio.start_unix_server(fake._handle, fake.socket_path))

    async def stop() -> None:
        servers[0].close()
        await servers[0].wait_closed()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        Path(fake.socket_path).unlink(missing_ok=True)


def in_chroot(
    tree: Path, environ: dict[str, str], stdin: bytes = b"", *args: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            UNSHARE,
            "--fork",
            "--pid",
            f"--mount-proc={tree}/proc",
            CHROOT,
            str(tree),
            str(HOST_BIN / "multus-shim"),
            *args,
        ],
        input=stdin,
        env=environ,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_tree_has_no_python_but_the_bundle(tree: Path, host_libs: set[str]) -> None:
    outside = [
        p
        for p in tree.rglob("*")
        if "python" in p.name.lower() and not p.is_relative_to(tree / "opt/cni/bin/multus-shim.d")
    ]
    assert outside == []
    assert not (tree / "usr/bin").exists()
    assert not (tree / "usr/lib/python3").exists()
    assert not (tree / "usr/local").exists()
    # What the bundle says the host must provide is exactly what the chroot needed.
    (runtime,) = (tree / "opt/cni/bin/multus-shim.d").iterdir()
    declared = set((runtime / shim_bundle.HOST_LIBS_FILE).read_text().split())
    assert declared == host_libs
    assert not any(name.startswith("libpython") for name in host_libs)


def test_shebang_names_the_host_path(tree: Path) -> None:
    shim = tree / "opt/cni/bin/multus-shim"
    first = shim.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith(f"#!{HOST_BIN}/multus-shim.d/")
    assert first.endswith("/bin/python3.11 -IS")
    assert shim.stat().st_mode & 0o777 == 0o755


def test_version_in_chroot(tree: Path, host_libs: set[str]) -> None:
    proc = in_chroot(tree, {"CNI_COMMAND": "VERSION"}, b"ignored")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, VERSION_OUTPUT.encode(), b"")


def test_version_flag_in_chroot(tree: Path, host_libs: set[str]) -> None:
    proc = in_chroot(tree, {}, b"", "-version")
    assert (proc.returncode, proc.stdout) == (0, (version_string() + "\n").encode())


def test_add_in_chroot(tree: Path, daemon: FakeDaemon) -> None:
    body = ('{"Result":' + json.dumps(RESULT_110) + "}").encode()
    daemon.routes["/cni"] = lambda req: response(200, body)
    conf = {"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus-shim"}
    environ = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "abc",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
        "CNI_PATH": str(HOST_BIN),
        readiness.TIMEOUT_ENV: "5",
    }
    proc = in_chroot(tree, environ, json.dumps(conf).encode())
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout.decode() == results.dumps_indent(results.convert(RESULT_110, "1.0.0"))
    assert json.loads(daemon.requests[-1].body)["env"]["CNI_COMMAND"] == "ADD"


def test_add_error_path_imports_are_shipped(tree: Path, host_libs: set[str]) -> None:
    """No daemon: the shim's error path (lazy imports included) still runs in the chroot."""
    environ = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "a", "CNI_NETNS": "/x"}
    environ |= {"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", readiness.TIMEOUT_ENV: "0.2"}
    conf = b'{"cniVersion":"1.0.0","name":"n","daemonSocketDir":"/nowhere"}'
    proc = in_chroot(tree, environ, conf)
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["code"] == 999
    assert b"Traceback" not in proc.stderr


def test_a_truncated_config_gets_gos_words_not_a_traceback(tree: Path, host_libs: set[str]) -> None:
    """CPython 3.11's C scanner needs ``json.decoder`` for its errors, and the shim under
    ``-IS`` never imported it: a truncated stdin crashed with a SystemError (cni_shim.gojson)."""
    environ = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "a", "CNI_NETNS": "/x"}
    environ |= {"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
    proc = in_chroot(tree, environ, b"{")
    assert proc.returncode == 1, proc
    assert json.loads(proc.stdout) == {
        "code": 6,
        "msg": "error unmarshall network config: unexpected end of JSON input",
    }
    assert b"Traceback" not in proc.stderr


def test_reinstall_keeps_the_version_in_use_and_prunes_older(tmp_path: Path) -> None:
    dest = tmp_path / "bin"
    shim = shim_bundle.install_host_shim(dest)
    runtime_root = dest / "multus-shim.d"
    (current,) = runtime_root.iterdir()
    # Pretend the installed shim runs an older version, with an even older one lying around.
    for old in ("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"):
        (runtime_root / old / "bin").mkdir(parents=True)
    text = shim.read_text().replace(current.name, "aaaaaaaaaaaaaaaa")
    shim.write_text(text)
    with shim.open("rb") as running:
        old_inode = os.fstat(running.fileno()).st_ino
        assert shim_bundle.install_host_shim(dest) == shim
        assert shim.stat().st_ino != old_inode  # replaced by rename, never rewritten in place
    assert sorted(p.name for p in runtime_root.iterdir()) == sorted(
        ["aaaaaaaaaaaaaaaa", current.name]
    )
    assert current.name in shim.read_text().split("\n", 1)[0]
    assert sorted(p.name for p in dest.iterdir()) == ["multus-shim", "multus-shim.d"]
    proc = subprocess.run(
        [str(shim)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=60, check=False
    )
    assert proc.stdout == VERSION_OUTPUT.encode()


def test_module_set_is_what_the_shim_imports() -> None:
    package = Path(cni_shim.__file__).resolve().parent
    modules = {m.name: m for m in shim_bundle.traced_modules(sys.executable, package)}
    assert "cni_shim.__main__" in modules  # imported by nobody, run by the script
    assert "json.decoder" in modules  # a lazy import on an error path
    assert "encodings.utf_8" in modules  # needed before any code runs
    # Annotations only (TYPE_CHECKING) and never imported at run time:
    assert "typing" not in modules
    assert all(m.path.is_absolute() for m in modules.values())


def test_too_long_shebang_is_refused() -> None:
    with pytest.raises(shim_bundle.BundleError):
        shim_bundle.render_script("/" + "x" * 200 + "/python3.11", "/rt")


def test_cli_bundle_install(tmp_path: Path) -> None:
    """``multusd install-shim --bundle``, the DaemonSet's init container command."""
    dest = tmp_path / "bin"
    dest.mkdir()  # install-shim refuses a destination that does not exist
    done = subprocess.run(
        [sys.executable, "-m", "multusd", "install-shim", "--bundle", "--dest", str(dest),
         "--host-dir", str(dest)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    shim = Path(done.stdout.strip())
    assert shim == dest / "multus-shim"
    version = subprocess.run(
        [str(shim)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, check=True
    )
    assert version.stdout.decode() == VERSION_OUTPUT
