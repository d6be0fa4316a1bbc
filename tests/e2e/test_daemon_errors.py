"""Bad input gets a clear CNI error, and the daemon keeps serving afterwards."""

from __future__ import annotations

import base64
import json
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import pod_env, shim_config
from tests.e2e.harness import Daemon, addresses, run_shim

StartDaemon = Callable[..., Awaitable[Daemon]]
MakeNetns = Callable[[], Awaitable[str]]

GOOD_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "abc",
    "CNI_NETNS": "/var/run/netns/x",
    "CNI_IFNAME": "eth0",
    "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
}
CONFIG = base64.b64encode(b'{"cniVersion":"1.0.0","name":"n","type":"multus-shim"}').decode()


def body(env: dict[str, str] | None = None, config: object = CONFIG) -> bytes:
    return json.dumps({"env": GOOD_ENV if env is None else env, "config": config}).encode()


def without(key: str) -> dict[str, str]:
    return {k: v for k, v in GOOD_ENV.items() if k != key}


MALFORMED = [
    pytest.param(b"{not json", "", id="bad-json"),
    pytest.param(body(config="***"), "", id="bad-base64"),
    pytest.param(body(config={"a": 1}), "", id="config-not-base64-string"),
    pytest.param(body(without("CNI_COMMAND")), "unexpected or missing CNI_COMMAND", id="no-cmd"),
    pytest.param(body(without("CNI_CONTAINERID")), "missing CNI_CONTAINERID", id="no-cid"),
    pytest.param(body(without("CNI_NETNS")), "missing CNI_NETNS", id="no-netns"),
    pytest.param(body(without("CNI_ARGS")), "missing CNI_ARGS", id="no-args"),
    pytest.param(
        body({**GOOD_ENV, "CNI_COMMAND": "FROB"}), "unknown cmd type: FROB", id="unknown-command"
    ),
    pytest.param(
        body({**GOOD_ENV, "CNI_ARGS": "K8S_POD_NAME=a=b"}),
        "invalid CNI_ARG 'K8S_POD_NAME=a=b'",
        id="bad-cni-args",
    ),
    pytest.param(
        body({**GOOD_ENV, "CNI_ARGS": "K8S_POD_NAMESPACE=default;"}),
        "invalid CNI_ARG ''",
        id="trailing-semicolon",
    ),
    pytest.param(
        body({**GOOD_ENV, "CNI_ARGS": "K8S_POD_NAME=p"}), "missing K8S_POD_NAMESPACE", id="no-ns"
    ),
    pytest.param(
        body({**GOOD_ENV, "CNI_ARGS": "K8S_POD_NAMESPACE=;K8S_POD_NAME=p"}),
        "required CNI variable missing. pod name: p; pod namespace: ",
        id="empty-ns",
    ),
]


@pytest.mark.parametrize(("payload", "message"), MALFORMED)
async def test_malformed_request_gets_cni_error(
    payload: bytes, message: str, start_daemon: StartDaemon, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    status, raw = await daemon.request("POST", "/cni", payload)
    assert status == 400
    error = json.loads(raw)
    assert isinstance(error["code"], int) and error["msg"]
    assert message in error["msg"]
    assert (await daemon.request("GET", "/healthz"))[0] == 200


async def test_oversized_body_gets_413(start_daemon: StartDaemon, conflist_file: Path) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file), maxRequestBytes=4096)
    status, raw = await daemon.request("POST", "/cni", b"x" * 10_000)
    assert status == 413
    assert "too large" in json.loads(raw)["msg"]
    assert (await daemon.request("POST", "/healthz"))[0] == 200


async def test_routes_as_upstream(start_daemon: StartDaemon, conflist_file: Path) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    assert await daemon.request("GET", "/healthz") == (200, b"")
    status, body = await daemon.request("POST", "/readyz")
    assert (status, json.loads(body)) == (200, {"ready": True, "caches": "no Kubernetes"})
    assert await daemon.request("GET", "/cni") == (405, b"Method not allowed\n")
    assert await daemon.request("PUT", "/healthz") == (405, b"Method not allowed\n")
    assert await daemon.request("GET", "/nope") == (404, b"")


def _fake_plugin(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/usr/bin/python3 -IS\nimport sys, os, time\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


PLUGIN_FAILURES = [
    pytest.param(
        'print(\'{"code": 123, "msg": "boom", "details": "why"}\'); sys.exit(1)',
        123,
        "boom",
        id="cni-error",
    ),
    pytest.param(
        "sys.stderr.write('segfault-ish'); sys.exit(2)",
        999,
        'netplugin failed: "segfault-ish"',
        id="crash",
    ),
    pytest.param("time.sleep(3600)", None, "", id="hang"),
]


@pytest.mark.parametrize(("body", "code", "text"), PLUGIN_FAILURES)
async def test_failing_plugins(
    body: str,
    code: int | None,
    text: str,
    start_daemon: StartDaemon,
    netns: MakeNetns,
    shim_path: Path,
    workdir: Path,
) -> None:
    bin_dir = workdir / "fakebin"
    _fake_plugin(bin_dir, "fake", body)
    delegate = {"cniVersion": "1.0.0", "name": "fake", "type": "fake"}
    daemon = await start_daemon(delegates=[delegate], binDir=str(bin_dir), pluginTimeoutSeconds=2)
    name = await netns()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=pod_env(name))
    assert added.returncode == 1
    error = added.json()
    if code is not None:
        assert error["code"] == code
    assert error["msg"].startswith("CmdAdd (shim): ")
    assert text in json.dumps(error).replace('\\"', '"')
    assert (await daemon.request("GET", "/healthz"))[0] == 200
    assert await addresses(name) == {"lo": []}


async def test_missing_plugin(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path
) -> None:
    delegate = {"cniVersion": "1.0.0", "name": "x", "type": "no-such-plugin"}
    daemon = await start_daemon(delegates=[delegate])
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=pod_env(await netns()))
    assert added.returncode == 1
    assert 'failed to find plugin "no-such-plugin" in path' in added.json()["msg"]


async def test_unknown_cluster_network(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path
) -> None:
    daemon = await start_daemon(clusterNetwork="nonexistent")
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=pod_env(await netns()))
    assert added.returncode == 1
    error = added.json()
    assert "failed to get clusterNetwork nonexistent in namespace kube-system" in error["msg"]
    assert "cannot find network: nonexistent" in error.get("details", "")


async def test_a_result_cache_that_cannot_be_written_fails_the_add_and_rolls_it_back(
    start_daemon: StartDaemon, netns: MakeNetns, shim_path: Path, workdir: Path, conflist_file: Path
) -> None:
    # The result cache is written beside the status write (multusd/cni/pending.py); its
    # failure must still fail the delegate as libcni's AddNetworkList does, and roll it back.
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    daemon.cni_dir.mkdir(parents=True, exist_ok=True)
    (daemon.cni_dir / "results").write_text("a file where the results directory goes\n")
    name = await netns()
    added = await run_shim(shim_path, "ADD", shim_config(daemon), env=pod_env(name))
    assert added.returncode == 1, added
    msg = added.json()["msg"]
    assert 'error adding container to network "testnet": failed to set network "testnet" ' \
        "cached result: " in msg, msg  # fmt: skip
    assert await addresses(name) == {"lo": []}, "the bridge ADD was rolled back"
    assert not any((workdir / "ipam" / "testnet").glob("10.*")), "its address released"
    assert (await daemon.request("GET", "/healthz"))[0] == 200
