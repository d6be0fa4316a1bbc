"""Issue 2 benchmark: shim start-up, and end-to-end ADD/DEL through shim → daemon → bridge,
each beside a reference measured in the same run (the bare interpreter; the bridge plugin
called directly with the same config)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bench.common import PLUGIN_DIR, Stats, daemon, netns, report, run, short_id, timed
from bench.common import workdir as make_workdir
from multusd.shim_install import install_shim

INTERPRETER = "/usr/bin/python3"


def _bridge_conf(directory: Path, bridge: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "benchnet",
        "type": "bridge",
        "bridge": bridge,
        "ipam": {
            "type": "host-local",
            "dataDir": str(directory / "ipam"),
            "ranges": [[{"subnet": "10.252.0.0/16"}]],
        },
    }


def _cni_env(ns: str, cid: str, command: str, path: str) -> dict[str, str]:
    """The CNI environment of a pod whose namespace is pinned on the file ``ns``."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": ns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": path,
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p{cid};"
        f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID=u{cid}",
    }


def bench_shim_start(shim: Path, runs: int) -> dict[str, Stats]:
    env = {"CNI_COMMAND": "VERSION"}
    bare, version = [], []
    for _ in range(3):  # warm the page cache
        run([INTERPRETER, "-I", "-S", "-c", "pass"])
        run([str(shim)], env=env)
    for _ in range(runs):
        bare.append(timed(lambda: run([INTERPRETER, "-I", "-S", "-c", "pass"])))
        version.append(timed(lambda: run([str(shim)], env=env)))
    return {"bare": Stats.of(bare), "shim": Stats.of(version)}


def _add_then_del(executable: str, config: bytes, cid: str, pins: Path) -> tuple[float, float]:
    """Seconds for an ADD and then a DEL of one container, in a fresh namespace (pinned on a
    file in ``pins``)."""
    with netns(pins) as ns:
        add = timed(
            lambda: run([executable], stdin=config, env=_cni_env(ns, cid, "ADD", PLUGIN_DIR))
        )
        rm = timed(
            lambda: run([executable], stdin=config, env=_cni_env(ns, cid, "DEL", PLUGIN_DIR))
        )
    return add, rm


def bench_add_del(shim: Path, directory: Path, runs: int) -> dict[str, Stats]:
    bridge = f"mbbr{short_id()[:6]}"
    conf_dir = directory / "net.d"
    conf_dir.mkdir()
    conf = _bridge_conf(directory, bridge)
    conf_path = conf_dir / "10-bench.conf"
    conf_path.write_text(json.dumps(conf))
    raw_conf = json.dumps(conf).encode()
    samples: dict[str, list[float]] = {"raw_add": [], "raw_del": [], "e2e_add": [], "e2e_del": []}
    config = {
        "cniVersion": "1.0.0",
        "multusConfigFile": str(conf_dir / "00-multus.conf"),
        "socketDir": str(directory / "run"),
        "binDir": PLUGIN_DIR,
        "cniDir": str(directory / "cache"),
        "clusterNetwork": str(conf_path),
    }
    shim_conf = json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "multus-cni-network",
            "type": "multus-shim",
            "daemonSocketDir": config["socketDir"],
        }
    ).encode()
    plugin = f"{PLUGIN_DIR}/bridge"
    pins = directory / "netns"
    try:
        with daemon(directory, config):
            for i in range(runs + 2):
                raw = _add_then_del(plugin, raw_conf, f"raw{i}{short_id()}", pins)
                e2e = _add_then_del(str(shim), shim_conf, f"e2e{i}{short_id()}", pins)
                if i < 2:  # the first two warm the caches
                    continue
                for kind, (add, rm) in (("raw", raw), ("e2e", e2e)):
                    samples[f"{kind}_add"].append(add)
                    samples[f"{kind}_del"].append(rm)
    finally:
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    return {k: Stats.of(v) for k, v in samples.items()}


def _row(label: str, s: Stats, ref: Stats | None = None, target: str = "") -> str:
    ratio = f"{s.median_ms / ref.median_ms:.2f}×" if ref else "—"
    return f"| {label} | {s.runs} | {s.median_ms:.1f} | {s.p99_ms:.1f} | {ratio} | {target} |"


def main(runs: int = 30) -> dict[str, Any]:
    with make_workdir() as directory:
        shim = install_shim(directory / "bin")
        start = bench_shim_start(shim, runs)
        e2e = bench_add_del(shim, directory, runs)
    lines = [
        f"Measured on {platform.node()} ({os.cpu_count()} cores), {runs} runs each, "
        "interleaved in one run. Command: `tox -e bench -- skeleton` (as root).",
        "",
        "| what | runs | median ms | p99 ms | vs reference (median) | target |",
        "|---|---|---|---|---|---|",
        _row("`/usr/bin/python3 -I -S -c pass` (reference)", start["bare"]),
        _row("shim start, `CNI_COMMAND=VERSION`", start["shim"], start["bare"], "≤ 1.3×"),
        _row("bridge ADD, plugin called directly (reference)", e2e["raw_add"]),
        _row("ADD shim → daemon → bridge", e2e["e2e_add"], e2e["raw_add"], "≤ 2.6×"),
        _row("bridge DEL, plugin called directly (reference)", e2e["raw_del"]),
        _row("DEL shim → daemon → bridge", e2e["e2e_del"], e2e["raw_del"], "≤ 1.7×"),
    ]
    table = "\n".join(lines)
    data = {k: v.__dict__ for k, v in {**start, **e2e}.items()}
    report("skeleton", table, data)
    return data
