"""The ``passthru`` plugin (upstream ``cmd/passthru-cni``) as a runtime runs it: the executable
``multusd install-shim`` writes, in a subprocess, with the CNI environment and a config on stdin.

Upstream's ADD prints an empty result in the config's version whatever ``prevResult`` says
(libcni's 1.x encoder leaves only ``cniVersion``); DEL, CHECK, GC and STATUS print nothing;
VERSION lists 0.3.0 to 1.1.0; every error is skel's JSON on stdout with exit status 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cni_shim import passthru
from multusd.shim_install import install_passthru

ENV = {
    "CNI_CONTAINERID": "c0ffee",
    "CNI_NETNS": "/nonexistent/netns",
    "CNI_IFNAME": "net1",
    "CNI_PATH": "/opt/cni/bin",
}
PREV_RESULT = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.0.0.10"]},
}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield install_passthru(tmp_path_factory.mktemp("bin"), interpreter=sys.executable)


def conf(version: str = "1.0.0", **extra: Any) -> bytes:
    return json.dumps({"cniVersion": version, "name": "aux", "type": "passthru", **extra}).encode()


def run(
    plugin: Path, command: str | None, stdin: bytes = b"", *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """``plugin`` run with the CNI environment (``command`` as ``CNI_COMMAND``, none if None)."""
    full = {**ENV, **env} if command is None else {**ENV, **env, "CNI_COMMAND": command}
    return subprocess.run(
        [str(plugin), *args],
        input=stdin.decode(),
        env=full,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def error(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 1, done
    assert done.stderr == ""
    obj: dict[str, Any] = json.loads(done.stdout)
    assert done.stdout == json.dumps(obj, indent=4)  # skel's indented error, no newline
    return obj


@pytest.mark.parametrize("version", passthru.SUPPORTED_VERSIONS)
def test_add_without_prev_result_is_an_empty_result(plugin: Path, version: str) -> None:
    done = run(plugin, "ADD", conf(version))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f'{{\n    "cniVersion": "{version}"\n}}'


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_add_ignores_its_prev_result(plugin: Path, version: str) -> None:
    """As upstream: the chain's first plugin answers an empty result, whatever it is given."""
    done = run(plugin, "ADD", conf(version, prevResult={**PREV_RESULT, "cniVersion": version}))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f'{{\n    "cniVersion": "{version}"\n}}'


def test_version(plugin: Path) -> None:
    expected = (
        '{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'
    )
    assert expected == passthru.VERSION_OUTPUT
    fast = run(plugin, "VERSION")  # answered by the script before any import
    assert (fast.returncode, fast.stdout, fast.stderr) == (0, expected, "")
    slow = run(plugin, "VERSION", b"", "an-argument")  # through cni_shim.passthru
    assert (slow.returncode, slow.stdout, slow.stderr) == (0, expected, "")


@pytest.mark.parametrize(
    ("command", "version"),
    [("DEL", "1.0.0"), ("DEL", "0.3.0"), ("CHECK", "0.4.0"), ("GC", "1.1.0"), ("STATUS", "1.1.0")],
)
def test_other_verbs_do_nothing(plugin: Path, command: str, version: str) -> None:
    done = run(plugin, command, conf(version))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_del_needs_no_netns(plugin: Path) -> None:
    done = run(plugin, "DEL", conf(), CNI_NETNS="")
    assert (done.returncode, done.stdout) == (0, ""), done


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "", "1.2.0"])
def test_versions_before_0_3_0_or_unknown_are_refused(plugin: Path, version: str) -> None:
    told = version or "0.1.0"
    assert error(run(plugin, "ADD", conf(version))) == {
        "code": 1,
        "msg": "incompatible CNI versions",
        "details": f'config is "{told}", plugin supports ["0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]',
    }


@pytest.mark.parametrize(
    ("command", "version", "msg"),
    [
        ("CHECK", "0.3.1", "config version does not allow CHECK"),
        ("GC", "1.0.0", "config version does not allow GC"),
        ("STATUS", "1.0.0", "config version does not allow STATUS"),
        ("STATUS", "1.2.0", "plugin version does not allow STATUS"),
    ],
)
def test_skel_version_gates(plugin: Path, command: str, version: str, msg: str) -> None:
    assert error(run(plugin, command, conf(version))) == {"code": 1, "msg": msg}


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"type": 5}, "number into Go struct field NetConf.NetConf.type of type string"),
        ({"ipam": []}, "array into Go struct field NetConf.NetConf.ipam of type types.IPAM"),
        (
            {"IPAM": {"type": 1}},  # keys match as Go matches them, case aside
            "number into Go struct field IPAM.NetConf.ipam.type of type string",
        ),
        (
            {"capabilities": {"a": True, "b": "yes"}},
            "string into Go struct field NetConf.NetConf.capabilities of type bool",
        ),
        (
            {"prevResult": []},
            "array into Go struct field NetConf.NetConf.prevResult of type map[string]interface {}",
        ),
        (
            {"dns": {"search": "x"}},
            "string into Go struct field DNS.NetConf.dns.search of type []string",
        ),
    ],
    ids=["type", "ipam", "ipam.type", "capabilities", "prevResult", "dns"],
)
def test_add_with_a_config_upstream_cannot_decode(
    plugin: Path, extra: dict[str, Any], why: str
) -> None:
    assert error(run(plugin, "ADD", conf(**extra))) == {
        "code": 999,
        "msg": "passthru cni: error parsing CNI configuration: passthru cni: failed to load "
        f"netconf: json: cannot unmarshal {why}",
    }


def test_the_first_bad_key_in_the_document_is_reported(plugin: Path) -> None:
    stdin = b'{"cniVersion":"1.0.0","name":"aux","prevResult":{"n":1e999},"type":false}'
    assert error(run(plugin, "ADD", stdin))["msg"].endswith(
        "json: cannot unmarshal number 1e999 into Go struct field NetConf.NetConf.prevResult "
        "of type float64"
    )


def test_skel_checks_come_first(plugin: Path) -> None:
    assert error(run(plugin, "ADD", conf(), CNI_PATH="")) == {
        "code": 4,
        "msg": "required env variables [CNI_PATH] missing",
    }
    assert error(run(plugin, "ADD", b'{"cniVersion":"1.0.0"}')) == {
        "code": 7,
        "msg": "missing network name",
    }
    assert error(run(plugin, "BOGUS", conf())) == {
        "code": 4,
        "msg": "unknown CNI_COMMAND: BOGUS",
    }


def test_without_a_command_it_says_what_it_is(plugin: Path) -> None:
    done = run(plugin, None)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == (
        "Passthrough CNI Plugin v1.0\n"
        "CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n"
    )


def test_add_in_its_own_netns_prints_the_result_then_the_error(plugin: Path) -> None:
    """skel checks the namespace after the plugin ran, as upstream: both are printed."""
    done = run(plugin, "ADD", conf(), CNI_NETNS="/proc/self/ns/net")
    assert done.returncode == 1
    result = '{\n    "cniVersion": "1.0.0"\n}'
    assert done.stdout.startswith(result)
    assert json.loads(done.stdout[len(result) :]) == {
        "code": 8,
        "msg": "plugin's netns and netns from CNI_NETNS should not be the same",
    }
