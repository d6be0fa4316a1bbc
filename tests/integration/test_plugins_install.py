"""``multusd install-plugins`` against a temp "host" CNI bin dir, with the real plugins.

The host dir starts as a stock kind node's (host-local, ptp, portmap, loopback; here stand-ins
with their own bytes, so "kept" can be told from "replaced"); the source is Debian's
``/usr/lib/cni``, what the image carries.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from multusd.cli import main as multusd_main
from multusd.plugins_install import (
    INSTALLED,
    KEPT,
    PluginsInstallError,
    available_plugins,
    install_plugins,
)

SRC = Path("/usr/lib/cni")
KIND_NODE = ("host-local", "ptp", "portmap", "loopback")


def _tree(directory: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """name -> (inode, mode, mtime, bytes): a kept file keeps all four."""
    out = {}
    for entry in sorted(directory.iterdir()):
        st = entry.lstat()
        if entry.is_symlink():
            data = os.readlink(entry).encode()
        else:
            data = b"<dir>" if entry.is_dir() else entry.read_bytes()
        out[entry.name] = (st.st_ino, st.st_mode, st.st_mtime_ns, data)
    return out


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A kind node's /opt/cni/bin."""
    dest = tmp_path / "opt-cni-bin"
    dest.mkdir()
    for name in KIND_NODE:
        (dest / name).write_bytes(f"#!/bin/sh\n# kind's {name}\n".encode())
        (dest / name).chmod(0o755)
    return dest


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = multusd_main(["install-plugins", *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_installs_the_missing_plugins_and_keeps_the_nodes(
    host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = {name: _tree(host)[name] for name in KIND_NODE}
    code, lines, err = _run(capsys, "--src", str(SRC), "--dest", str(host))
    assert code == 0, err
    plugins = available_plugins(SRC)
    assert {"bridge", "macvlan", "static", "tuning"} <= set(plugins)  # the examples' plugins
    assert lines == [
        f"{KEPT if name in KIND_NODE else INSTALLED} {host / name}" for name in plugins
    ]
    after = _tree(host)
    assert sorted(after) == plugins  # nothing else: no temp file left behind
    for name in plugins:
        if name in KIND_NODE:
            assert after[name] == kept[name]  # byte for byte, same inode, same mtime
        else:
            assert after[name][3] == (SRC / name).read_bytes()
            assert after[name][1] & 0o777 == 0o755
    # What was installed is a working plugin.
    version = subprocess.run(
        [str(host / "bridge")], env={"CNI_COMMAND": "VERSION"}, capture_output=True, timeout=30,
        check=True,
    )  # fmt: skip
    assert "1.0.0" in json.loads(version.stdout)["supportedVersions"]


def test_a_second_run_changes_nothing(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "--src", str(SRC), "--dest", str(host))[0] == 0
    before = _tree(host)
    code, lines, _ = _run(capsys, "--src", str(SRC), "--dest", str(host))
    assert code == 0
    assert lines and all(line.startswith(f"{KEPT} ") for line in lines)
    assert _tree(host) == before


def test_only_installs_the_named_plugins(host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = _run(
        capsys, "--src", str(SRC), "--dest", str(host), "--only", "bridge, macvlan,host-local"
    )
    assert code == 0
    assert lines == [
        f"{INSTALLED} {host / 'bridge'}",
        f"{INSTALLED} {host / 'macvlan'}",
        f"{KEPT} {host / 'host-local'}",
    ]
    assert sorted(_tree(host)) == sorted({*KIND_NODE, "bridge", "macvlan"})


def test_an_unknown_name_fails_before_anything_is_written(
    host: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree(host)
    code, lines, err = _run(
        capsys, "--src", str(SRC), "--dest", str(host), "--only", "bridge,nosuch"
    )
    assert (code, lines) == (1, [])
    assert f"not in {SRC}: nosuch" in err
    assert _tree(host) == before


def test_a_missing_source_dir_is_a_clear_error(
    host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree(host)
    missing = tmp_path / "no-plugins-here"
    code, lines, err = _run(capsys, "--src", str(missing), "--dest", str(host))
    assert (code, lines) == (1, [])
    assert err == f"multusd install-plugins: source directory {missing} does not exist\n"
    assert _tree(host) == before


def test_a_missing_dest_dir_is_an_error_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The destination is the host's bin dir mounted in: missing means a wrong mount."""
    missing = tmp_path / "host" / "opt" / "cni" / "bin"
    code, lines, err = _run(capsys, "--src", str(SRC), "--dest", str(missing))
    assert (code, lines) == (1, [])
    assert err == f"multusd install-plugins: destination directory {missing} does not exist\n"
    assert not (tmp_path / "host").exists()


def test_dest_must_be_given(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        multusd_main(["install-plugins", "--src", str(SRC)])
    assert exited.value.code == 2
    assert "--dest" in capsys.readouterr().err


def test_any_existing_name_counts_as_present(tmp_path: Path) -> None:
    """A symlink (even a dangling one) or a directory is somebody's: left as it is."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    for name in ("a", "b", "c", "d"):
        (src / name).write_bytes(b"#!/bin/sh\n")
        (src / name).chmod(0o755)
    (src / "README").write_text("not a plugin: not executable")
    (src / "subdir").mkdir()
    os.symlink("/nonexistent/a", dest / "a")
    (dest / "b").mkdir()
    before = _tree(dest)
    outcomes = install_plugins(src, dest)
    assert [(o.name, o.action) for o in outcomes] == [
        ("a", KEPT), ("b", KEPT), ("c", INSTALLED), ("d", INSTALLED),
    ]  # fmt: skip
    after = _tree(dest)
    assert (after["a"], after["b"]) == (before["a"], before["b"])
    assert sorted(after) == ["a", "b", "c", "d"]


def test_a_source_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    with pytest.raises(PluginsInstallError, match=r"source directory .* is not a directory"):
        install_plugins(SRC / "bridge", tmp_path / "dest")
