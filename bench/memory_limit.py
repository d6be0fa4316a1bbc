"""Under a memory limit: the daemon in a memory cgroup of upstream's DaemonSet size, plugins
included, through bursts of ADDs and DELs.

Upstream's DaemonSet gives the daemon's container ``requests = limits = 50Mi``, and every plugin
the daemon runs is its child, charged to the same cgroup
(docs/performance.md, "Under a memory limit"). Here the daemon (ours, or any other with
``--daemon PATH --shim PATH``) runs as ``bench.peer`` runs it (in-cluster credentials, auto
mode, the pod cache filtered to its node),
in a fresh memory cgroup of its own: ``memory.limit_in_bytes`` 50 MiB on cgroup v1 with the
swap limit (``memsw``) equal to it, so nothing is swapped out to fit, or ``memory.max`` and
``memory.swap.max = 0`` on v2. The shims run outside it, as the container runtime's children.
500 pods on the node; bursts of 30, 50 and 200 ADDs at once, then as many DELs at once, each
pod in a network namespace of its own, bridge + host-local. Per burst: the cgroup's OOM kills
(``memory.oom_control``/``memory.events``: ``oom_kill``), whether the daemon survived (a killed
one is started again before the next burst, so every burst starts alike), failed calls, what
the DELs left behind (delegate caches, host-local addresses), the cgroup's peak usage
(``memory.max_usage_in_bytes``, ``memory.peak``) and the wall times. For ours, the DaemonSet's
liveness and readiness probes run in the cgroup during the bursts, each on its own clock with
our manifests' periods, as the kubelet runs them: its ``httpGet`` of ``127.0.0.1:<healthPort>``
(``--probes exec``: ``multusd probe`` processes in the cgroup, as before our manifests moved off
them; ``--probes`` for another daemon).

Results are kept per label (``bench/results/memory_limit-<label>.json``; ``ours`` and ``theirs``
by default) and the section shows the last run of each, so ``python -m bench memory_limit``
(ours), ``python -m bench memory_limit --daemon PATH --shim PATH --about TEXT`` (another) and,
say, ``--label ours-capped --daemon-config '{...}'`` fill one table.

:class:`MemoryCgroup` is also the real-cgroup rig of ``tests/e2e/test_faults_memory.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from multusd.cni.admission import MiB
from multusd.cni.cgroup import V1, V2, Level, memory_mount

NAME = "memory_limit"
LIMIT_MIB = 160
"""Our DaemonSet's ``resources: {requests: {memory: 160Mi}, limits: {memory: 160Mi}}`` (the
published runs; upstream's is 50Mi: ``--limit-mib 50`` with ``--daemon``/``--shim`` for its)."""
BURSTS = (30, 50, 200)
ON_NODE = 500
CALL_TIMEOUT = 150.0
"""Per shim call: past the shim's 60 s wait for a daemon that is gone and the daemon's own
request deadline, so a call that times out here is a hang, not a slow answer."""
LIVENESS_PERIOD = 10.0
READINESS_PERIOD = 5.0
PROBE_TIMEOUT = 5.0
"""Our manifests' probes: ``periodSeconds`` 10 (liveness) and 5 (readiness), ``timeoutSeconds``
5 (manifests/base/daemonset.yaml)."""


# --- a memory cgroup of our own --------------------------------------------------------------


class MemoryCgroup:
    """A memory cgroup created for one run (a unique name at the top of the memory hierarchy,
    found from ``/proc/self/mountinfo``), with a limit and swap off; removed on exit.

    Processes join it from birth (:meth:`argv` and :meth:`wrapper` write their own pid into
    ``cgroup.procs`` before they exec), so everything they allocate is charged to it; nothing
    is moved afterwards (v1 would leave the charges behind, v2 cannot move them at all).

    The version is the one the daemon reads (``multusd.cni.cgroup.memory_mount``): v1 where a
    ``memory`` hierarchy is mounted (v1 and hybrid hosts, ours among them), else the unified v2
    hierarchy, Debian 12's default (there ``stat -f -c %T /sys/fs/cgroup`` says
    ``cgroup2fs``). ``mount`` (version, mount point) overrides that choice: the unit tests
    pass a directory laid out as a cgroup tree of either version.
    """

    def __init__(
        self,
        limit: int,
        *,
        prefix: str = "multusd-bench",
        mount: tuple[int, Path] | None = None,
    ) -> None:
        found = mount or memory_mount()
        if found is None:
            raise RuntimeError("no memory cgroup hierarchy is mounted (/proc/self/mountinfo)")
        self.version, self.top = found
        self.limit = limit
        self.path = self.top / f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> MemoryCgroup:
        if self.version == 2:
            self._delegate_memory()
        self.path.mkdir()
        try:
            if self.version == 1:
                self._write("memory.limit_in_bytes", self.limit)
                if (self.path / "memory.memsw.limit_in_bytes").exists():
                    self._write("memory.memsw.limit_in_bytes", self.limit)
            else:
                try:
                    self._write("memory.max", self.limit)
                except (PermissionError, FileNotFoundError) as err:  # kernfs: EACCES
                    raise RuntimeError(
                        f"{self.path}: no memory.max, so the memory controller is not enabled "
                        f"for the children of {self.top} (cgroup.subtree_control)"
                    ) from err
                # Without swap accounting the kernel has no memory.swap.max (and no swap to
                # limit); kernfs answers EACCES for a file it does not have.
                with contextlib.suppress(PermissionError, FileNotFoundError):
                    self._write("memory.swap.max", 0)
        except BaseException:
            self.remove()
            raise
        return self

    def _delegate_memory(self) -> None:
        """v2: a cgroup has the memory controller's files only when its parent lists
        ``memory`` in ``cgroup.subtree_control``. systemd enables it at the root already;
        elsewhere it is enabled here, and left enabled: taking it away again would take it
        from every sibling cgroup too, another run's included. A cgroup other than the root
        can give a controller to its children only while it holds no process itself (the
        "no internal processes" rule), so inside a container whose cgroup namespace puts its
        processes at the mount point this cannot work, and says why."""
        controllers = (self.top / "cgroup.controllers").read_text().split()
        if "memory" not in controllers:
            raise RuntimeError(
                f"{self.top}: the memory controller is not available on this cgroup v2 "
                f"hierarchy (cgroup.controllers: {' '.join(controllers) or 'none'}): it is "
                "bound to a v1 hierarchy, or not delegated here"
            )
        subtree = self.top / "cgroup.subtree_control"
        if "memory" in subtree.read_text().split():
            return
        try:
            subtree.write_text("+memory\n")
        except OSError as err:
            why = (
                "it holds processes itself, and only the root cgroup may give its children "
                "a controller then"
                if err.errno == errno.EBUSY
                else os.strerror(err.errno or 0)
            )
            raise RuntimeError(
                f"{subtree}: cannot enable the memory controller for its children: {why}"
            ) from err

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _write(self, name: str, value: int | str) -> None:
        (self.path / name).write_text(f"{value}\n")

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def _field(self, name: str, key: str) -> int:
        for line in self._read(name).splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return 0

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command``, started inside the cgroup (``sh`` joins it, then ``exec``s)."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.procs), *command]

    def wrapper(self, binary: Path, where: Path) -> Path:
        """An executable at ``where`` that joins the cgroup and ``exec``s ``binary`` with its
        arguments: for runners that take a binary's path (``bench.peer.PeerDaemon``)."""
        where.write_text(
            f"#!/bin/sh\necho $$ > '{self.procs}' || exit 97\nexec '{binary}' \"$@\"\n"
        )
        where.chmod(0o755)
        return where

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(p) for p in self._read("cgroup.procs").split()]
        return []

    def oom_kills(self) -> int:
        if self.version == 1:
            return self._field("memory.oom_control", "oom_kill")
        return self._field("memory.events", "oom_kill")

    def usage(self) -> int:
        return int(self._read("memory.usage_in_bytes" if self.version == 1 else "memory.current"))

    def unreclaimable(self) -> int:
        """Usage minus the page cache the kernel can reclaim: what ``multusd.cni.admission``
        reads (``multusd.cni.cgroup``)."""
        return Level(self.path, *(V1 if self.version == 1 else V2)).unreclaimable()

    def peak(self) -> int | None:
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        with contextlib.suppress(OSError, ValueError):
            return int(self._read(name))
        return None

    def reset_peak(self) -> None:
        """Start a new peak (v1: write 0; v2: any write, on kernels from 6.12)."""
        with contextlib.suppress(OSError):
            self._write("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak", 0)

    def set_limit(self, limit: int) -> None:
        self.limit = limit
        if self.version == 1:
            # memsw must stay >= the limit: raise it first when growing, lower it after.
            memsw = (self.path / "memory.memsw.limit_in_bytes").exists()
            if memsw and limit > int(self._read("memory.limit_in_bytes")):
                self._write("memory.memsw.limit_in_bytes", limit)
            self._write("memory.limit_in_bytes", limit)
            if memsw:
                self._write("memory.memsw.limit_in_bytes", limit)
        else:
            self._write("memory.max", limit)

    def remove(self, timeout: float = 15.0) -> None:
        """Remove the cgroup. What still runs in it is ours (it was made for this run): given
        a moment to exit, then killed by pid. Raises if the cgroup cannot be removed."""
        if not self.path.exists():
            return
        deadline = time.monotonic() + timeout
        killed = False
        while self.pids() and time.monotonic() < deadline:
            if not killed and time.monotonic() > deadline - timeout / 2:
                for pid in self.pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        while True:
            try:
                self.path.rmdir()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cgroup {self.path} could not be removed") from None
                time.sleep(0.1)


# --- the run ---------------------------------------------------------------------------------


def _leftovers(workdir: Path) -> tuple[int, int]:
    """(delegate cache files, host-local addresses) under the daemon's work dir."""
    caches = sum(1 for p in (workdir / "cache").glob("*") if p.is_file())
    addresses = 0
    ipam = workdir / "ipam"
    if ipam.is_dir():
        for network in ipam.iterdir():
            if network.is_dir():
                addresses += sum(
                    1 for p in network.iterdir() if not p.name.startswith(("last_reserved", "lock"))
                )
    return caches, addresses


def _warm(binary: Path) -> None:
    """Read the daemon's executable once from outside the cgroup, so that its page cache is not
    charged to it: the cgroup pays for the file pages its processes bring in *first*. Our
    interpreter and its libraries are in every Python process's page cache on this host
    already; without this the Go binary (51 MB) would be charged to its cgroup on a cold cache
    and not on a warm one, and the same run would give two answers."""
    with binary.open("rb") as file:
        while file.read(1 << 20):
            pass


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Prober:
    """The DaemonSet's liveness (every 10 s) and readiness (every 5 s) probes, each on its own
    clock as the kubelet runs them (so they may overlap), while a burst lasts; the first of
    each at once. ``http`` (our manifests): the kubelet's own GETs of ``127.0.0.1:<healthPort>``,
    made here, outside the cgroup, as the kubelet makes them; ``exec``: ``multusd probe``
    processes in the cgroup. Ours only by default: upstream's DaemonSet has none."""

    def __init__(self, cgroup: MemoryCgroup, socket_dir: Path, mode: str, port: int) -> None:
        multusd = Path(sys.executable).with_name("multusd")
        base = [str(multusd), "probe", "--socket-dir", str(socket_dir)]
        self.mode = mode
        self.port = port
        self.probes = [(cgroup.argv(base), "/healthz", LIVENESS_PERIOD),
                       (cgroup.argv([*base, "--ready"]), "/readyz", READINESS_PERIOD)]  # fmt: skip
        self.runs = self.failures = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def _once(self, argv: list[str], path: str) -> bool:
        if self.mode == "http":
            import aiohttp

            timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
            try:
                async with (
                    aiohttp.ClientSession(timeout=timeout) as session,
                    session.get(f"http://127.0.0.1:{self.port}{path}") as response,
                ):
                    return response.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            code = await asyncio.wait_for(proc.wait(), PROBE_TIMEOUT)
        except TimeoutError:  # the kubelet's timeoutSeconds: a failure
            proc.kill()
            code = await proc.wait() or 1
        return code == 0

    async def _loop(self, argv: list[str], path: str, period: float) -> None:
        while True:
            self.runs += 1
            self.failures += not await self._once(argv, path)
            await asyncio.sleep(period)

    def __enter__(self) -> Prober:
        self._tasks = [asyncio.create_task(self._loop(*probe)) for probe in self.probes]
        return self

    def __exit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()

    async def stopped(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # Imported here: the e2e test imports this module for MemoryCgroup alone.
    from bench.common import call_shim
    from bench.peer import PeerDaemon, bridge_conflist, emulator, ours, pods_netns_dir
    from bench.sidebyside import Calls, PodPool, _our_commit, _sha, netns_envs, seed
    from multusd.shim_install import install_shim

    side = "theirs" if args.daemon else "ours"
    probes = args.probes or ("http" if side == "ours" else "none")
    extra = json.loads(args.daemon_config)
    health_port = _free_port()
    if probes == "http":
        extra.setdefault("healthPort", health_port)
        health_port = extra["healthPort"]
    binary = Path(args.daemon) if args.daemon else ours()
    bridge = f"mbm{uuid.uuid4().hex[:6]}"
    data: dict[str, Any] = {
        "side": side, "daemon": str(binary), "about": args.about, "limit_mib": args.limit_mib,
        "on_node": args.on_node, "elsewhere": args.elsewhere, "bursts": [],
        "daemon_config": json.loads(args.daemon_config), "probes": probes,
        "built": _our_commit() if side == "ours" else f"sha256 {_sha(binary)}",
        "load_before": os.getloadavg(),
    }  # fmt: skip
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="mbm-", dir="/tmp") as tmp,
        MemoryCgroup(args.limit_mib * MiB) as cgroup,
        pods_netns_dir(Path(tmp) / "netns") as netns_dir,
    ):
        w = Path(tmp)
        data["cgroup"] = {"version": cgroup.version, "path": str(cgroup.path)}
        try:
            async with emulator(bookmark_interval=5.0) as sim:
                pool = PodPool(seed(sim, args.on_node, args.elsewhere))
                shim = Path(args.shim) if args.shim else await asyncio.to_thread(
                    install_shim, w / "bin"
                )  # fmt: skip
                await asyncio.to_thread(_warm, binary)
                wrapper = cgroup.wrapper(binary, w / "daemon-in-cgroup")
                network = bridge_conflist(bridge, "10.248.0.0/16", w / "d" / "ipam")
                peer = PeerDaemon(
                    wrapper, w / "d", sim, network, node="sbs-node", netns_dir=netns_dir,
                    log_level=args.log_level, extra=extra,
                )  # fmt: skip
                await peer.start()
                try:
                    data["idle"] = {"usage_mib": cgroup.usage() / MiB,
                                    "unreclaimable_mib": cgroup.unreclaimable() / MiB,
                                    "peak_mib": (cgroup.peak() or 0) / MiB}  # fmt: skip
                    for width in args.bursts:
                        peer = await _ensure_running(peer)
                        data["bursts"].append(
                            await _burst(peer, shim, cgroup, pool.take(width), netns_envs,
                                         call_shim, Calls, probes=probes,
                                         health_port=health_port)
                        )  # fmt: skip
                finally:
                    await peer.stop()
                    if args.keep_log:
                        shutil.copyfile(peer.log_path, args.keep_log)
        finally:
            await asyncio.to_thread(
                subprocess.run, ["ip", "link", "del", bridge], capture_output=True, check=False
            )
    data["seconds"] = time.monotonic() - started
    data["load_after"] = os.getloadavg()
    return data


async def _ensure_running(peer: Any) -> Any:
    """The daemon, started again if the last burst's OOM kill ended it."""
    if peer.proc is not None and peer.proc.returncode is None:
        return peer
    await peer.stop()
    await peer.start()
    return peer


async def _burst(
    peer: Any, shim: Path, cgroup: MemoryCgroup, pods: list[tuple[str, str]],
    netns_envs: Any, call_shim: Any, calls_type: Any, *, probes: str, health_port: int,
) -> dict[str, Any]:  # fmt: skip
    """``pods`` ADDed at once, then DELed at once; the cgroup's figures around them."""
    result: dict[str, Any] = {"width": len(pods)}
    conf = peer.runtime_conf
    caches_before, addresses_before = _leftovers(peer.workdir)
    async with netns_envs(pods, peer.netns_dir) as envs:
        cgroup.reset_peak()
        kills = cgroup.oom_kills()
        prober = Prober(cgroup, peer.socket_dir, probes, health_port) if probes != "none" else None
        with prober or contextlib.nullcontext():
            for command in ("ADD", "DEL"):
                calls = calls_type()
                start = time.perf_counter()
                for call in await asyncio.gather(
                    *(call_shim(shim, command, conf, e, timeout=CALL_TIMEOUT) for e in envs)
                ):
                    calls.add(call)
                calls.wall_s = time.perf_counter() - start
                result[command.lower()] = calls.summary()
            if prober is not None:
                await prober.stopped()
                result["probes"] = {"runs": prober.runs, "failures": prober.failures}
        result["oom_kills"] = cgroup.oom_kills() - kills
        result["peak_mib"] = (cgroup.peak() or 0) / MiB
        result["survived"] = peer.proc is not None and peer.proc.returncode is None
        caches, addresses = _leftovers(peer.workdir)
        result["left_behind"] = {"caches": caches - caches_before,
                                 "addresses": addresses - addresses_before}  # fmt: skip
    return result


# --- publishing ------------------------------------------------------------------------------


def _saved_runs(label: str) -> list[dict[str, Any]]:
    """The last saved run of every other label (``bench/results/memory_limit-<label>.json``)."""
    from bench.common import RESULTS

    runs = []
    for path in sorted(RESULTS.glob(f"{NAME}-*.json")):
        if path.stem != f"{NAME}-{label}":
            with contextlib.suppress(OSError, ValueError):
                runs.append(json.loads(path.read_text()))
    return runs


def _rows(data: dict[str, Any]) -> list[str]:
    label = data.get("label", data["side"])
    rows = []
    for b in data["bursts"]:
        add, dele = b["add"], b["del"]
        left = b["left_behind"]
        probes = b.get("probes")
        rows.append(
            f"| {label} | {b['width']} | {b['oom_kills']} | {'yes' if b['survived'] else 'no'} | "
            f"{add['failures']}/{add['runs']} | {dele['failures']}/{dele['runs']} | "
            f"{left['caches']}, {left['addresses']} | {b['peak_mib']:.1f} | "
            f"{add['wall_s']:.2f} | {dele['wall_s']:.2f} | "
            + (f"{probes['failures']}/{probes['runs']}" if probes else "–")
            + " |"
        )
    return rows


def _errors(data: dict[str, Any]) -> list[str]:
    out = []
    for b in data["bursts"]:
        for verb in ("add", "del"):
            r = b[verb]
            if r["failures"]:
                out.append(
                    f"- {data.get('label', data['side'])}, {b['width']} {verb.upper()}s: "
                    f"{r['failures']} failed; "
                    f"first error: `{r['first_error']}`"
                )
    return out


def summarize(runs: list[dict[str, Any]]) -> str:
    text = []
    for data in runs:
        label = data.get("label", data["side"])
        if data["side"] == "ours":
            who = f"{label} (our daemon, commit {data['built']})"
        else:
            who = f"{label}: {data['about'] or data['daemon']} ({data['built']})"
        extra = data.get("daemon_config") or {}
        if extra:
            who += f", daemon config plus `{json.dumps(extra)}`"
        probes = data.get("probes", "exec" if data["side"] == "ours" else "none")
        who += {"http": ", the probes as the kubelet's HTTP GETs of healthPort",
                "exec": ", the probes as `multusd probe` processes in the cgroup",
                "none": ", no probes"}.get(probes, "")  # fmt: skip
        idle = data.get("idle", {})
        load = (data["load_before"][0], data["load_after"][0])
        text.append(
            f"{who}: command `{data['command']}`; cgroup v{data['cgroup']['version']}, limit "
            f"{data['limit_mib']} MiB, swap off; {data['on_node']:,} pods on the node, "
            f"{data['elsewhere']:,} elsewhere; once healthy the cgroup held "
            f"{idle.get('usage_mib', 0):.1f} MiB ({idle.get('unreclaimable_mib', 0):.1f} MiB "
            f"without reclaimable page cache); the run took {data['seconds']:.0f} s, load average "
            f"{load[0]:.1f} before and {load[1]:.1f} after (2 cores shared with other work)."
        )
    rows = [row for data in runs for row in _rows(data)]
    errors = [line for data in runs for line in _errors(data)] or ["- none: every call succeeded."]
    setup = "\n\n".join(
        textwrap.fill(t, 100, break_long_words=False, break_on_hyphens=False) for t in text
    )
    head = (
        "| daemon | ADDs at once | OOM kills | daemon survived | failed ADDs | failed DELs "
        "| left behind (caches, addresses) | peak usage MiB | ADD wall s | DEL wall s "
        "| probes failed |\n" + "|---" * 11 + "|"
    )
    return f"""{setup}

{head}
{chr(10).join(rows)}

Failures:

{chr(10).join(errors)}"""


def _command(argv: Sequence[str]) -> str:
    """The command line as one would type it (double quotes for prose with apostrophes)."""
    import shlex

    words = ["python", "-m", "bench", NAME, *argv]
    return " ".join(
        f'"{w}"' if shlex.quote(w) != w and not set(w) & set('"$`\\!') else shlex.quote(w)
        for w in words
    )


def main(argv: Sequence[str] = ()) -> int:
    from bench.common import report

    parser = argparse.ArgumentParser(prog=f"python -m bench {NAME}", description=__doc__)
    parser.add_argument("--daemon", default=None, help="another daemon binary (default: ours)")
    parser.add_argument("--shim", default=None, help="its shim (with --daemon)")
    parser.add_argument("--about", default="", help="with --daemon: where it comes from, in words")
    parser.add_argument("--limit-mib", type=int, default=LIMIT_MIB)
    parser.add_argument("--on-node", type=int, default=ON_NODE)
    parser.add_argument("--elsewhere", type=int, default=0)
    parser.add_argument(
        "--bursts", type=lambda s: [int(x) for x in s.split(",")], default=list(BURSTS)
    )
    parser.add_argument(
        "--probes",
        choices=("http", "exec", "none"),
        default=None,
        help="the DaemonSet's probes during the bursts: the kubelet's GETs of healthPort "
        "(default with our daemon, as our manifests), `multusd probe` processes in the cgroup, "
        "or none (default with another daemon: upstream's DaemonSet has none)",
    )
    parser.add_argument("--keep-log", default=None, help="copy the daemon's log here at the end")
    parser.add_argument("--log-level", default="error", help="the daemon config's logLevel")
    parser.add_argument(
        "--daemon-config", default="{}", help="more daemon config keys, as a JSON object"
    )
    parser.add_argument(
        "--label",
        default=None,
        help="the run's name in the table and in bench/results (default: ours, or theirs)",
    )
    parser.add_argument(
        "--no-publish", action="store_true", help="print the table, leave docs/ and results alone"
    )
    args = parser.parse_args(list(argv))
    if bool(args.daemon) != bool(args.shim):
        parser.error("--daemon and --shim go together")
    data = asyncio.run(run(args))
    data["command"] = _command(argv)
    label = args.label or data["side"]
    data["label"] = label
    runs = [data, *_saved_runs(label)]
    runs.sort(key=lambda d: (d["side"] != "ours", d.get("label") != "ours", d.get("label", "")))
    if args.no_publish:
        print(summarize(runs))
        return 0
    report(f"{NAME}-{label}", summarize(runs), data, section=NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
