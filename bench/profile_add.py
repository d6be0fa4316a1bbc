"""Issue 8 item 5: where the daemon's time goes while it serves ADDs and DELs.

py-spy samples the real daemon (as deployed: cache, protobuf, 50 QPS) while rounds of 16 ADDs
at once, then their DELs, go through the real shim to bridge + host-local in real network
namespaces, once per event loop (asyncio, uvloop). Reported: the daemon's CPU per request
(from /proc), the share of GIL-holding samples inside each of its own functions (inclusive) and,
by leaf, which code held the GIL (self), plus an in-process timing of the result passes one ADD
makes (the first fix this profile led to).
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from bench.common import report
from bench.kube_requests import Rig, run_shim
from multusd.kubesim import KubeSim, Settings

ROUNDS = 12
WIDTH = 16
TOP = 12
LOOPS = ("asyncio", "uvloop")


async def _load(rig: Rig) -> tuple[int, float]:
    pods = await rig.cached_pods(ROUNDS * WIDTH)
    requests = 0
    start = time.perf_counter()
    for r in range(ROUNDS):
        async with rig.netns_envs(pods[r * WIDTH : (r + 1) * WIDTH]) as envs:
            for command in ("ADD", "DEL"):
                codes = await asyncio.gather(
                    *(run_shim(rig.shim, command, rig.shim_conf, env) for env in envs)
                )
                assert not any(codes)
                requests += len(envs)
    return requests, time.perf_counter() - start


async def run(workdir: Path, *, loop: str) -> tuple[Path, int, float, float]:
    """py-spy's collapsed stacks of the daemon under the load; requests, wall and CPU seconds."""
    out = workdir / "profile.txt"
    async with KubeSim(Settings(bookmark_interval=5.0)) as sim, Rig(sim, workdir, loop=loop) as rig:
        assert rig.proc is not None
        await asyncio.sleep(1.0)
        spy = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(rig.proc.pid),
            "--format", "raw", "--function", "--gil", "--rate", "250", "--nonblocking",
            "-o", str(out),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        await asyncio.sleep(1.0)
        cpu0 = _cpu_seconds(rig.proc.pid)
        requests, wall = await _load(rig)
        cpu = _cpu_seconds(rig.proc.pid) - cpu0
        spy.send_signal(signal.SIGINT)
        await spy.wait()
    return out, requests, wall, cpu


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _frame_name(frame: str) -> str:
    """``func (path/to/module.py:12)`` -> ``module.func``, with the package path for ours."""
    func, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for root in ("multusd/", "cni_shim/", "aiohttp/", "asyncio/", "multidict/", "yarl/"):
        if root in path:
            module = root + path.split(root, 1)[1]
            return f"{module.removesuffix('.py').replace('/', '.')}.{func}"
    return f"{Path(path).stem}.{func}"


_ENTRY_POINTS = ("multusd.__main__.", "multusd.cli.")  # under every sample: no information


def summarize(path: Path) -> dict[str, Any]:
    inclusive: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";") if not f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("thread ")]
        total += n
        for name in set(frames):
            inclusive[name] += n
        if frames:
            leaf[frames[-1]] += n
    ours = [
        (k, v)
        for k, v in inclusive.most_common()
        if k.startswith(("multusd.", "cni_shim.")) and not k.startswith(_ENTRY_POINTS)
    ]
    return {
        "samples": total,
        "inclusive": [(k, round(100 * v / total, 1)) for k, v in ours[: TOP * 2]],
        "self": [(k, round(100 * v / total, 1)) for k, v in leaf.most_common(TOP)],
    }


_BRIDGE_RESULT = (
    b'{"cniVersion":"1.0.0","interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:ff"},'
    b'{"name":"veth1","mac":"aa:bb:cc:dd:ee:f1"},'
    b'{"name":"eth0","mac":"aa:bb:cc:dd:ee:f2","sandbox":"/var/run/netns/x"}],'
    b'"ips":[{"interface":2,"address":"10.1.0.5/16","gateway":"10.1.0.1"}],'
    b'"routes":[{"dst":"0.0.0.0/0","gw":"10.1.0.1"}],"dns":{}}'
)


def result_passes_us(number: int = 3000) -> float:
    """CPU of what one ADD does with its delegate's result, in µs: decode, the result-cache
    encoding, conversion to 1.1.0, the interface test, network-status, the printed answer."""
    from cni_shim import results

    def one_add() -> None:
        result = results.decode(_BRIDGE_RESULT, "1.0.0")
        results.to_wire(result)
        latest = results.convert(result, results.LATEST)
        results.has_interfaces_or_ips(latest)
        results.convert(latest, results.LATEST)
        results.render(result, "1.0.0")

    return timeit.timeit(one_add, number=number) / number * 1e6


def main() -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    for loop in LOOPS:
        with tempfile.TemporaryDirectory(prefix="mbp-", dir="/tmp") as tmp:
            out, requests, wall, cpu = asyncio.run(run(Path(tmp), loop=loop))
            runs[loop] = summarize(out)
        runs[loop].update(requests=requests, wall_s=wall, daemon_cpu_s=cpu,
                          cpu_ms_per_request=1000 * cpu / requests)  # fmt: skip
    passes = result_passes_us()
    profile = runs["asyncio"]
    lines = [
        f"Command: `tox -e bench -- profile_add` (as root). {ROUNDS} rounds of {WIDTH} ADDs at",
        "once and then their DELs, per event loop (`multusd --loop`); py-spy at 250 Hz,",
        "sampling the daemon only while a thread of it holds the GIL (`--gil`): Python's own",
        "time, whether computing or blocked in a C call that keeps the GIL.",
        "",
        "| event loop | requests | wall s | daemon CPU s | daemon CPU ms per request |",
        "|---|---|---|---|---|",
        *(
            f"| {loop} | {r['requests']} | {r['wall_s']:.1f} | {r['daemon_cpu_s']:.2f} "
            f"| {r['cpu_ms_per_request']:.2f} |"
            for loop, r in runs.items()
        ),
        "",
        f"One ADD's passes over its delegate's result (decode, cache, conversions, status, "
        f"answer), in-process: {passes:.0f} µs.",
        "",
        f"Where the asyncio daemon's time went ({profile['samples']} GIL-holding samples):",
        "",
        "| daemon function (inclusive) | % of samples |",
        "|---|---|",
        *(f"| `{name}` | {pct} |" for name, pct in profile["inclusive"]),
        "",
        "| running (self) | % of samples |",
        "|---|---|",
        *(f"| `{name}` | {pct} |" for name, pct in profile["self"]),
    ]
    table = "\n".join(lines)
    report("profile_add", table, {"loops": runs, "result_passes_us": passes})
    return runs
