"""Issue 13's fault matrix, the long runs: what the bounded CI tests hold, held at length.

Four parts, each bounded in count *and* time (it stops by itself, and says how far it got);
the fourth, **bounds** (a pod's network count, a plugin's output, the daemon's adopted
children), is ``bench/faults_bounds.py``:

* **fuzz**: 100,000 fuzzed ``/cni`` and ``/delegate`` bodies (the generator and the judge of
  ``tests/e2e/test_fuzz_requests.py``, shared through ``tests/e2e/fuzzbodies.py``) against a
  real daemon on its socket, 16 at a time. Counted: the HTTP statuses, any 5xx, any 4xx whose
  body is not a CNI error object, answers that never came, tracebacks in the daemon's log, the
  daemon's RSS and open fds before and after, delegate caches left behind.
* **soak**: 10,000 ADD/DEL pairs through the installed shim, real ``bridge`` + ``host-local``
  in real network namespaces (a pool of 16, one per worker, reused; every pair a fresh
  container ID), 16 pairs at a time (8 at a time would not finish in time on 2 shared
  cores). Counted: failed calls, RSS and fds every 500 pairs, what is left at the end in
  ``cniDir`` and host-local's ``dataDir`` (only its ``lock`` and ``last_reserved_ip.0`` may
  stay), interfaces left in the namespaces and on the bridge.
  No API server here: the pod lookups and status writes are part three's, and 10,000 pods'
  worth of them would be paced by the client's 50 QPS rather than by the daemon.
* **api**: the emulator's fault switches (``multusd/kubesim/faults.py``, ``KubeSim.restore``)
  on during a burst of 200 ADDs at once and the 200 DELs after, for pods that exist in the
  emulator; the daemon runs as deployed (``bench.peer.PeerDaemon``: in-cluster TLS, auto
  mode, its pod cache filtered to its node). Per switch: failed pods, wall times, the requests
  the emulator saw, the most in any 1-second window (the client's bound is burst + QPS = 100),
  whether ``/readyz`` says the caches are synced again afterwards, whether a pod created then
  is served from the watch cache, and what the DELs left. The emulator runs in this process
  (its fault switches and ``restore`` are in-process calls), so the shims are forked by a
  helper process and this one runs at nice -10 while measuring: a stalled emulator would stamp
  requests that queued meanwhile as one bunch; how late its loop was is recorded as well.

Node safety: every directory (sockets, caches, host-local's ``dataDir``) is under a temp dir,
the network namespaces are pinned on files of it (never ``ip netns add``, which creates and
mounts ``/run/netns``), the bridges are the benchmark's own, and all are removed on the way
out. The results go to ``bench/results/faults.json`` and the section ``faults`` of
docs/reliability.md ("Fault matrix: the long runs"); ``--only PART`` re-runs one part and keeps
the others' last figures; ``--republish`` rewrites the section from the last results without
running anything.
``--quick`` is a small run (5,000 bodies, 500 pairs, bursts of 50) to try it out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import re
import shlex
import sys
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import faults_bounds
from bench.common import (
    REPO,
    RESULTS,
    call_shim,
    namespaces,
    proc_mib,
    publish,
    save,
    short_id,
    workdir,
)
from bench.kube_requests import sh
from bench.peer import PeerDaemon, bridge_conflist, emulator, ours, pods_netns_dir
from cni_shim import transport
from multusd.kubesim import KubeSim
from multusd.kubesim.faults import ErrorRule, LatencyRule
from multusd.kubesim.stats import RequestRecord
from multusd.kubesim.store import Snapshot
from multusd.shim_install import install_shim
from tests.e2e.conftest import bridge_plugin, daemon_config, pod_env, shim_config, write_json
from tests.e2e.faults import log_barrier, post, request_body
from tests.e2e.fuzzbodies import acceptable, body, cni_error
from tests.e2e.harness import Daemon, ip

NAME = "faults"
RELIABILITY_MD = REPO / "docs" / "reliability.md"
TRACEBACK = "Traceback (most recent call last)"
FUZZ_SUBNET = "10.240.0.0/24"
SOAK_SUBNET = "10.241.0.0/16"
API_SUBNET = "10.242.0.0/16"
NODE = "faults-node"
CLIENT_BOUND = 100
"""The daemon's API client: burst 50 + QPS 50 in any one second (``kubeClientBurst``/``QPS``)."""
CALL_TIMEOUT = 150.0
"""Per shim call: past the daemon's 120 s request deadline, so a time-out here is a hang."""
DROPPED = re.compile(r"dropped (\d+) log lines")
"""The daemon's note when its bounded log queue overflowed (a traceback may be among them)."""
IP_FILE = re.compile(r"[0-9a-f.:]+")
"""host-local names a reservation after its address; ``lock`` and ``last_reserved_ip.0`` stay."""


@dataclass(frozen=True)
class Plan:
    """How much of each part, and for how long at most."""

    bodies: int = 100_000
    fuzz_width: int = 16
    fuzz_seconds: float = 360.0
    seed: int = 1313
    pairs: int = 10_000
    parallel: int = 16
    sample_every: int = 500
    soak_seconds: float = 540.0
    burst: int = 200
    api_seconds: float = 360.0


QUICK = Plan(bodies=5_000, pairs=500, sample_every=100, burst=50)


# --- the daemon's process, and what a run leaves -------------------------------------------------


def sample(pid: int) -> dict[str, float]:
    """The daemon's RSS (MiB) and open file descriptors now."""
    return {"rss_mib": round(proc_mib(pid=pid), 1), "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def files_under(directory: Path) -> list[str]:
    """Every regular file below ``directory``, relative to it (nothing if it does not exist)."""
    if not directory.is_dir():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def reservations(ipam_dir: Path) -> list[str]:
    """host-local's address files (one per allocated address) in any network of ``ipam_dir``."""
    return [f for f in files_under(ipam_dir) if IP_FILE.fullmatch(Path(f).name)]


async def links(netns: str | None, *selector: str) -> list[str]:
    """Link names in ``netns`` (the path it is pinned on; None: the host) from
    ``ip -o link show <selector>`` (``nsenter --net=PATH ip ...``, as ``harness.ip`` runs it)."""
    where = ["-n", netns] if netns else []
    out = await ip(*where, "-o", "link", "show", *selector, check=False)
    return [line.split(": ")[1].split("@")[0] for line in out.splitlines() if ": " in line]


@contextlib.asynccontextmanager
async def local_daemon(w: Path, subnet: str, log_level: str) -> AsyncIterator[Daemon]:
    """A daemon without Kubernetes whose cluster network is bridge + host-local (``dataDir``
    under ``w``), started as the e2e tests start theirs; its bridge is removed on exit."""
    bridge = f"mbf{short_id()[:6]}"
    conflist = write_json(
        w / "net.d" / "10-faults.conflist",
        {"cniVersion": "1.0.0", "name": "faultnet", "plugins": [bridge_plugin(bridge, w, subnet)]},
    )
    config = daemon_config(w, clusterNetwork=str(conflist), logLevel=log_level)
    daemon = Daemon(w, config)
    try:
        await daemon.start()
        yield daemon
    finally:
        code = await daemon.stop()
        await sh("ip", "link", "del", bridge)
        if code != 0:
            print(f"daemon exited {code}; log: {daemon.log_path}")


def loads() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- part 1: fuzzed bodies ------------------------------------------------------------------------


async def fuzz(plan: Plan) -> dict[str, Any]:
    with workdir() as w:
        async with local_daemon(w, FUZZ_SUBNET, "verbose") as daemon:
            assert daemon.proc is not None
            pid = daemon.proc.pid
            before = sample(pid)
            rng, path_rng = random.Random(plan.seed), random.Random(plan.seed + 1)

            def cases() -> Iterator[tuple[bytes, dict[str, str], str]]:
                for _ in range(plan.bodies):
                    data, headers = body(rng)
                    yield data, headers, "/delegate" if path_rng.random() < 0.1 else "/cni"

            statuses: Counter[int] = Counter()
            codes: Counter[int] = Counter()
            server_errors: list[dict[str, Any]] = []
            not_cni: list[dict[str, Any]] = []
            no_answer: list[dict[str, Any]] = []
            samples: list[dict[str, float]] = [{"bodies": 0, **before}]
            sent = 0
            stop_at = time.monotonic() + plan.fuzz_seconds
            it = cases()  # one iterator, shared: next() never awaits, so workers never race

            async def worker() -> None:
                nonlocal sent
                for data, headers, path in it:
                    if time.monotonic() > stop_at:
                        return
                    sent += 1
                    if sent % 10_000 == 0:
                        samples.append({"bodies": sent, **sample(pid)})
                    case = {"path": path, "headers": headers, "body": data[:200].decode("latin-1")}
                    try:
                        answer = await post(daemon.socket_path, data, headers=headers, path=path)
                    except (OSError, TimeoutError, ValueError, IndexError) as exc:
                        no_answer.append({**case, "error": repr(exc)})
                        continue
                    statuses[answer.status] += 1
                    seen = {**case, "status": answer.status,
                            "answer": answer.body[:300].decode("latin-1")}  # fmt: skip
                    if answer.status >= 500:
                        server_errors.append(seen)
                    elif not acceptable(answer.status, answer.body):
                        not_cni.append(seen)
                    elif answer.status != 200 and cni_error(answer.body):
                        codes[int(json.loads(answer.body)["code"])] += 1

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(plan.fuzz_width)))
            wall = time.perf_counter() - start
            healthz = (await daemon.request("GET", "/healthz"))[0]
            await log_barrier(daemon)  # the log writer is a thread: every line is in the file
            after = sample(pid)
            hwm = round(proc_mib("VmHWM", pid=pid), 1)
            kept = files_under(daemon.cni_dir)
            swept = await sweep(daemon, kept)
            left = files_under(daemon.cni_dir)
            log = daemon.log()
    return {
        "bodies": plan.bodies,
        "sent": sent,
        "seed": plan.seed,
        "width": plan.fuzz_width,
        "wall_s": round(wall, 1),
        "bodies_per_s": round(sent / wall, 1) if wall > 0 else 0.0,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "cni_codes": {str(k): v for k, v in sorted(codes.items())},
        "server_errors": len(server_errors),
        "server_error_samples": server_errors[:5],
        "not_cni_errors": len(not_cni),
        "not_cni_samples": not_cni[:5],
        "no_answer": len(no_answer),
        "no_answer_samples": no_answer[:5],
        "tracebacks": log.count(TRACEBACK),
        "dropped_log_lines": sum(int(n) for n in DROPPED.findall(log)),
        "healthz_after": healthz,
        "before": before,
        "after": after,
        "rss_hwm_mib": hwm,
        "samples": samples,
        "cache_files_kept": kept,
        "del_sweep_failed": swept,
        "cache_files_left": left,
    }


async def sweep(daemon: Daemon, kept: list[str]) -> int:
    """DEL every container whose failed ADD left its delegate cache, as the runtime would after
    a failed ADD (the cache is kept for that DEL, as upstream keeps it); the DELs that failed."""
    conf = json.dumps(shim_config(daemon)).encode()
    failed = 0
    for name in kept:
        if "/" in name:  # libcni's results/ entries: only a successful ADD writes those
            continue
        env = {**pod_env("", name), "CNI_COMMAND": "DEL", "CNI_NETNS": ""}
        answer = await post(daemon.socket_path, request_body(env, conf))
        failed += answer.status != 200
    return failed


# --- part 2: the soak --------------------------------------------------------------------------


async def soak(plan: Plan) -> dict[str, Any]:
    with workdir() as w:
        shim = await asyncio.to_thread(install_shim, w / "bin")
        async with (
            local_daemon(w, SOAK_SUBNET, "error") as daemon,
            namespaces(w / "netns", plan.parallel) as pool,
        ):
            assert daemon.proc is not None
            pid = daemon.proc.pid
            conf = json.dumps(shim_config(daemon)).encode()
            path_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
            failures: list[dict[str, Any]] = []
            samples: list[dict[str, float]] = [{"pairs": 0, **sample(pid)}]
            issued = done = 0
            stop_at = time.monotonic() + plan.soak_seconds

            async def worker(ns: str) -> None:
                nonlocal issued, done
                while issued < plan.pairs and time.monotonic() < stop_at:
                    issued += 1
                    cid = f"soak{issued:05d}{short_id()}"
                    env = {**path_env, **pod_env(ns, cid)}
                    for verb in ("ADD", "DEL"):  # a failed ADD is DELeted, as runtimes do
                        call = await call_shim(shim, verb, conf, env, timeout=CALL_TIMEOUT)
                        if not call.ok:
                            failures.append({"pair": issued, "verb": verb, "error": call.error()})
                    done += 1
                    if done % plan.sample_every == 0:
                        samples.append({
                            "pairs": done, **sample(pid),
                            "cache_files": len(files_under(daemon.cni_dir)),
                            "reservations": len(reservations(w / "ipam")),
                        })  # fmt: skip

            start = time.perf_counter()
            await asyncio.gather(*(worker(ns) for ns in pool))
            wall = time.perf_counter() - start
            await asyncio.sleep(1.0)
            after = sample(pid)
            hwm = round(proc_mib("VmHWM", pid=pid), 1)
            in_netns = {ns: [n for n in await links(ns) if n != "lo"] for ns in pool}
            bridge = json.loads(Path(daemon.config["clusterNetwork"]).read_text())["plugins"][0]
            ports = await links(None, "master", bridge["bridge"])
            log = daemon.log()
            result = {
                "pairs": plan.pairs,
                "done": done,
                "parallel": plan.parallel,
                "namespaces": len(pool),
                "wall_s": round(wall, 1),
                "pairs_per_s": round(done / wall, 1) if wall else 0.0,
                "failures": len(failures),
                "failure_samples": failures[:10],
                "samples": samples,
                "after": after,
                "rss_hwm_mib": hwm,
                "cache_files_left": files_under(daemon.cni_dir),
                "ipam_files_left": files_under(w / "ipam"),
                "reservations_left": reservations(w / "ipam"),
                "links_left_in_netns": {ns: names for ns, names in in_netns.items() if names},
                "bridge_ports_left": ports,
                "tracebacks": log.count(TRACEBACK),
            }
    return result


# --- part 3: the API fault switches during bursts -------------------------------------------------

During = Callable[[KubeSim, Snapshot], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Switch:
    """One fault switch: ``during`` runs from the first ADD of the burst to the last DEL (then
    it is cancelled and every fault reset); ``injected`` says what it does, for the table."""

    name: str
    injected: str
    during: During


async def _nothing(sim: KubeSim, snap: Snapshot) -> None:
    pass


def _rules(*, latency: Sequence[LatencyRule] = (), errors: Sequence[ErrorRule] = ()) -> During:
    async def during(sim: KubeSim, snap: Snapshot) -> None:
        sim.faults.latency = list(latency)
        sim.faults.errors = list(errors)

    return during


def _every(period: float, action: Callable[[KubeSim], object]) -> During:
    async def during(sim: KubeSim, snap: Snapshot) -> None:
        while True:
            await asyncio.sleep(period)
            action(sim)

    return during


def _expire(sim: KubeSim) -> None:
    sim.expire_next_watches(2)  # the resumed watches get 410 Expired: the caches relist
    sim.drop_watches("eof")


async def _stall(sim: KubeSim, snap: Snapshot) -> None:
    sim.faults.set_stall(True)


async def _restore(sim: KubeSim, snap: Snapshot) -> None:
    await asyncio.sleep(0.5)  # into the burst, with status writes in flight
    sim.restore(snap)


SWITCHES = [
    Switch("none", "no fault (the reference)", _nothing),
    Switch(
        "latency",
        "every request 0.2–0.8 s late",
        _rules(latency=[LatencyRule(seconds=0.2, jitter=0.6)]),
    ),
    Switch(
        "errors-500",
        "20 % of all requests (lists, watches, PATCHes, events) answered 500",
        _rules(errors=[ErrorRule(code=500, rate=0.2)]),
    ),
    Switch(
        "429s",
        "50 % of all requests answered 429 with `Retry-After: 1`",
        _rules(errors=[ErrorRule(code=429, rate=0.5, retry_after=1)]),
    ),
    Switch(
        "drop-watches",
        "every watch reset (connection aborted) twice a second",
        _every(0.5, lambda sim: sim.drop_watches("reset")),
    ),
    Switch(
        "expire-watches",
        "every second: the watches closed and the next two answered 410 Expired",
        _every(1.0, _expire),
    ),
    Switch("stall", "every watch stalled (no events, no bookmarks) throughout", _stall),
    Switch(
        "restore",
        "0.5 s into the ADDs: an etcd restore to the backup taken after the pods were created "
        "(older resourceVersions, every watch cut, the status writes so far lost)",
        _restore,
    ),
]


def _verb(record: RequestRecord) -> str:
    sub = f"/{record.subresource}" if record.subresource else ""
    return f"{record.verb} {record.resource}{sub}"


def peak_per_second(stamps: list[float]) -> tuple[int, float]:
    """The most requests in any 1-second window (``stamps`` sorted), and where it starts."""
    best, start = 0, 0.0
    for i, t in enumerate(stamps):
        count = bisect_left(stamps, t + 1.0) - i
        if count > best:
            best, start = count, t
    return best, start


async def ready(socket_path: str, timeout: float = 60.0) -> tuple[float, str]:
    """Seconds until ``/readyz`` answers 200 with ``caches synced`` and nothing failing, and
    what it said then (or last, when it never did: -1 s)."""
    start = time.monotonic()
    said = ""
    while time.monotonic() - start < timeout:
        with contextlib.suppress(transport.TransportError, ValueError):
            status, _, raw = await asyncio.to_thread(
                transport.post, socket_path, "/readyz", b"null", 5.0
            )
            said = str(json.loads(raw).get("caches", ""))
            if status == 200 and said == "caches synced":
                return round(time.monotonic() - start, 1), said
        await asyncio.sleep(0.2)
    return -1.0, said


async def quiet(sim: KubeSim, seconds: float = 2.0, cap: float = 60.0) -> None:
    """Until the daemon sent no request but watches for ``seconds`` (its queued events
    posted), or ``cap``."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        recent = [r for r in sim.stats.requests(200) if r.verb != "watch"]
        if not recent or time.monotonic() - max(r.started for r in recent) > seconds:
            return
        await asyncio.sleep(0.25)


async def burst(
    shim: Path, conf: bytes, verb: str, envs: list[dict[str, str]]
) -> tuple[float, list[str]]:
    """``verb`` for every env at once: wall seconds and the errors of the calls that failed.

    The shims are started by a helper process (:func:`burst_main`), not from this event loop,
    which is also the emulator's: forking 200 shims here stalls the loop for a second or more,
    and a stalled emulator stamps every request that queued meanwhile as if they had all
    arrived together, which is not what the daemon sent."""
    job = {"shim": str(shim), "conf": conf.decode(), "verb": verb, "envs": envs}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from bench.faults import burst_main; burst_main()",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    out, _ = await proc.communicate(json.dumps(job).encode())
    done = json.loads(out)
    return float(done["wall_s"]), list(done["errors"])


def burst_main() -> None:
    """The helper of :func:`burst`: a job on stdin, ``{"wall_s", "errors"}`` on stdout."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)  # the shims at the ordinary priority: prompt()
    job = json.loads(sys.stdin.read())

    async def calls() -> dict[str, Any]:
        start = time.perf_counter()
        done = await asyncio.gather(*(
            call_shim(job["shim"], job["verb"], job["conf"].encode(), env, timeout=CALL_TIMEOUT)
            for env in job["envs"]
        ))  # fmt: skip
        return {
            "wall_s": time.perf_counter() - start,
            "errors": [c.error() for c in done if not c.ok],
        }

    print(json.dumps(asyncio.run(calls())))


@contextlib.contextmanager
def prompt() -> Iterator[None]:
    """This process (the emulator) at nice -10 while the daemon and the shims run at 0: on 2
    shared cores a busy machine otherwise leaves the emulator waiting for a core, and it then
    stamps the requests that queued meanwhile as one bunch. The daemon's own timing is not
    changed; only the measuring side gets to look promptly."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(PermissionError):  # not root: measured as it comes
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    try:
        yield
    finally:
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, before)


class LoopLag:
    """How late this event loop (the emulator's) woke a 10 ms sleeper: when it was late by
    ``lag`` seconds, requests that arrived during the stall were stamped up to that late."""

    def __init__(self) -> None:
        self.stalls: list[tuple[float, float]] = []  # (woke at, late by), over 20 ms

    async def watch(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            woke = time.monotonic()
            if woke - before - 0.01 > 0.02:
                self.stalls.append((woke, woke - before - 0.01))

    def worst(self, start: float, end: float) -> float:
        """The longest stall that ended in ``[start, end]``, seconds."""
        return max((lag for woke, lag in self.stalls if start <= woke <= end), default=0.0)


def create_pod(sim: KubeSim, name: str) -> str:
    """A pod on the daemon's node; its UID."""
    pod = sim.create({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
    })  # fmt: skip
    return str(pod["metadata"]["uid"])


def cni_env(ns: str, cid: str, pod: str, uid: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **pod_env(ns, cid, pod=pod)}
    env["CNI_ARGS"] = env["CNI_ARGS"].replace(f"uid-{cid}", uid)
    return env


@dataclass
class ApiRig:
    """The emulator with the burst's pods, the daemon as deployed, a namespace per pod."""

    sim: KubeSim
    daemon: PeerDaemon
    shim: Path
    pool: list[str]
    pods: list[tuple[str, str]]
    snap: Snapshot
    workdir: Path
    lag: LoopLag

    async def new_pod(self, switch: str) -> dict[str, Any]:
        """A pod created after the fault, ADDed at once and DELeted: served from the watch
        cache (no pod GET) when the daemon's watch came back."""
        name = f"fa-{switch}"
        uid = create_pod(self.sim, name)
        env = cni_env(self.pool[0], f"after-{switch}-{short_id()}", name, uid)
        gets = self.sim.stats.count("get", "pods")
        added = await call_shim(self.shim, "ADD", self.daemon.runtime_conf, env)
        deleted = await call_shim(self.shim, "DEL", self.daemon.runtime_conf, env)
        self.sim.delete("pods", "default", name)
        return {
            "ok": added.ok and deleted.ok,
            "add_ms": round(added.seconds * 1000),
            "pod_gets": self.sim.stats.count("get", "pods") - gets,
            "error": "" if added.ok and deleted.ok else (added.error() or deleted.error()),
        }

    async def run(self, switch: Switch) -> dict[str, Any]:
        """The switch on from the first ADD of the burst to the last DEL, then reset."""
        envs = [
            cni_env(ns, f"{switch.name}-{name}-{short_id()}", name, uid)
            for ns, (name, uid) in zip(self.pool, self.pods, strict=True)
        ]
        conf = self.daemon.runtime_conf
        self.sim.faults.reset()
        self.sim.stats.reset()
        began = time.monotonic()
        fault = asyncio.create_task(switch.during(self.sim, self.snap))
        try:
            add_wall, add_failed = await burst(self.shim, conf, "ADD", envs)
            del_wall, del_failed = await burst(self.shim, conf, "DEL", envs)
        finally:
            fault.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fault
            self.sim.faults.reset()
        ready_after, readyz = await ready(self.daemon.socket_path)
        await quiet(self.sim)  # the burst's queued events posted
        records = self.sim.stats.requests()
        events = [r for r in records if r.verb == "create" and r.resource == "events"]
        peak, peak_at = peak_per_second(sorted(r.started for r in records))
        return {
            "switch": switch.name,
            "injected": switch.injected,
            "pods": len(envs),
            "add_failed": len(add_failed),
            "del_failed": len(del_failed),
            "errors": sorted(Counter(add_failed + del_failed).items())[:5],
            "add_wall_s": round(add_wall, 1),
            "del_wall_s": round(del_wall, 1),
            "requests": len(records),
            "by_code": dict(Counter(str(r.code) for r in records)),
            "by_verb": dict(Counter(map(_verb, records))),
            "events_posted": sum(r.code == 201 for r in events),
            "peak_per_second": peak,
            "loop_late_in_peak_ms": round(self.lag.worst(peak_at, peak_at + 1.0) * 1000),
            "loop_late_max_ms": round(self.lag.worst(began, time.monotonic()) * 1000),
            "ready_after_s": ready_after,
            "readyz": readyz[:200],
            "rss_mib": round(self.daemon.rss_mib(), 1),
            "cache_files_left": len(files_under(self.workdir / "d" / "cache")),
            "reservations_left": len(reservations(self.workdir / "ipam")),
            "new_pod_after": await self.new_pod(switch.name),
        }


async def api_faults(plan: Plan) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + plan.api_seconds
    with workdir() as w, pods_netns_dir(w / "netns") as netns_dir:
        shim = await asyncio.to_thread(install_shim, w / "bin")
        bridge = f"mbf{short_id()[:6]}"
        network = bridge_conflist(bridge, API_SUBNET, w / "ipam")
        (w / "d").mkdir()
        async with emulator(bookmark_interval=5.0, log_limit=100_000) as sim:
            pods = [
                (name, create_pod(sim, name)) for name in (f"fp{i:03d}" for i in range(plan.burst))
            ]
            snap = sim.snapshot()  # what the restore switch goes back to: the pods, no status
            try:
                async with (
                    PeerDaemon(ours(), w / "d", sim, network, node=NODE,
                               netns_dir=netns_dir) as daemon,
                    namespaces(netns_dir, plan.burst) as pool,
                ):  # fmt: skip
                    rig = ApiRig(sim, daemon, shim, pool, pods, snap, w, LoopLag())
                    first_ready, _ = await ready(daemon.socket_path)
                    watching = asyncio.create_task(rig.lag.watch())
                    with prompt():
                        for switch in SWITCHES:
                            if time.monotonic() > deadline:
                                rows.append({"switch": switch.name, "skipped": "time budget"})
                                continue
                            rows.append(await rig.run(switch))
                            print(f"   {switch.name}: {json.dumps(rows[-1])[:300]}", flush=True)
                    watching.cancel()
                    log = daemon.log_path.read_text(errors="replace")
                    hwm = round(daemon.rss_mib("VmHWM"), 1)
            finally:
                await sh("ip", "link", "del", bridge)
    return {
        "burst": plan.burst,
        "first_ready_s": first_ready,
        "switches": rows,
        "tracebacks": log.count(TRACEBACK),
        "rss_hwm_mib": hwm,
    }


# --- the report --------------------------------------------------------------------------------

PARTS: dict[str, Callable[[Plan], Coroutine[Any, Any, dict[str, Any]]]] = {
    "fuzz": fuzz,
    "soak": soak,
    "api": api_faults,
    "bounds": faults_bounds.bounds,
}


def _lost(*counts: int) -> str:
    return "nothing" if not any(counts) else "**see the figures**"


def _fuzz_row(f: dict[str, Any]) -> str:
    ok = f["statuses"].get("200", 0)
    errors = f["sent"] - ok - f["server_errors"] - f["not_cni_errors"] - f["no_answer"]
    codes = ", ".join(f"{k}: {v}" for k, v in f["cni_codes"].items())
    did = (
        f"{ok:,} successes and {errors:,} 4xx CNI error objects (codes {codes}); "
        f"**{f['server_errors']}** HTTP 5xx, **{f['not_cni_errors']}** other 4xx bodies, "
        f"**{f['no_answer']}** unanswered, **{f['tracebacks']}** tracebacks in the log; "
        f"`/healthz` {f['healthz_after']} after; RSS {f['before']['rss_mib']} → "
        f"{f['after']['rss_mib']} MiB (peak {f['rss_hwm_mib']}), fds {f['before']['fds']} → "
        f"{f['after']['fds']}; {len(f['cache_files_kept'])} delegate caches of failed ADDs "
        f"kept for the runtime's DEL (as upstream keeps them), a DEL of each then failed "
        f"{f['del_sweep_failed']} times and left {len(f['cache_files_left'])} files in `cniDir`"
    )
    lost = _lost(
        f["server_errors"], f["not_cni_errors"], f["no_answer"], f["tracebacks"],
        f["del_sweep_failed"], len(f["cache_files_left"]),
    )  # fmt: skip
    rate = f.get("bodies_per_s")
    if rate is None:  # results saved before the rate was: it follows from the count and time
        rate = round(f["sent"] / f["wall_s"], 1) if f["wall_s"] else 0.0
    return (
        f"| Fuzzed bodies, the long run | {f['sent']:,} of {f['bodies']:,} seeded bodies "
        f"(seed {f['seed']}, the CI test's generator), {f['width']} at a time, 10 % to "
        f"`/delegate`, in {f['wall_s']} s ({rate:,} bodies/s) | {did} | "
        f"{lost} |"
    )


def _soak_row(s: dict[str, Any]) -> str:
    rss = [x["rss_mib"] for x in s["samples"]]
    fds = [int(x["fds"]) for x in s["samples"]]
    left_netns = sum(len(v) for v in s["links_left_in_netns"].values())
    others = [f for f in s["ipam_files_left"] if f not in s["reservations_left"]]
    warm = rss[1] if len(rss) > 1 else rss[0]
    did = (
        f"**{s['failures']}** failed calls; {s['pairs_per_s']} pairs/s; RSS every "
        f"{s['samples'][1]['pairs'] if len(s['samples']) > 1 else '-'} pairs: "
        f"{min(rss)}–{max(rss)} MiB (first {rss[0]}, after the first sample {warm}, last "
        f"{rss[-1]}: **{rss[-1] - warm:+.1f} MiB** after warm-up; peak {s['rss_hwm_mib']}), "
        f"fds {min(fds)}–{max(fds)}; left: {len(s['cache_files_left'])} files in `cniDir`, "
        f"{len(s['reservations_left'])} host-local reservations (its other files: "
        f"{', '.join(f'`{o}`' for o in others) or 'none'}), {left_netns} interfaces in the "
        f"namespaces, {len(s['bridge_ports_left'])} bridge ports; "
        f"**{s['tracebacks']}** tracebacks"
    )
    lost = _lost(
        s["failures"], len(s["cache_files_left"]), len(s["reservations_left"]), left_netns,
        len(s["bridge_ports_left"]), s["tracebacks"],
    )  # fmt: skip
    return (
        f"| The soak | {s['done']:,} of {s['pairs']:,} ADD/DEL pairs through the installed "
        f"shim, bridge + host-local, {s['parallel']} at a time in a pool of {s['namespaces']} "
        f"reused namespaces, a fresh container ID each, in {s['wall_s']} s | {did} | {lost} |"
    )


def _api_rows(a: dict[str, Any]) -> list[str]:
    out = []
    for r in a["switches"]:
        if "skipped" in r:
            out.append(f"| API: {r['switch']} | skipped ({r['skipped']}) | | | |")
            continue
        injected = sum(v for k, v in r["by_code"].items() if k in ("429", "500"))
        after = r["new_pod_after"]
        events = r["by_verb"].get("create events", 0)
        did = (
            f"{r['pods']} ADDs at once in {r['add_wall_s']} s, then the DELs in "
            f"{r['del_wall_s']} s: **{r['add_failed']}** ADDs and **{r['del_failed']}** DELs "
            f"failed; the emulator saw {r['requests']} requests ({injected} answered with an "
            f"injected error), at most **{r['peak_per_second']}** in a second"
            f"{' (**above the client bound**)' if r['peak_per_second'] > CLIENT_BOUND else ''} "
            f"(the emulator up to {r['loop_late_in_peak_ms']} ms late then); "
            f"{r['events_posted']} `AddedInterface` events posted "
            f"({events} tries); `/readyz` `caches synced` {r['ready_after_s']} s after the "
            f"reset; a pod created then: ADD {'ok' if after['ok'] else 'FAILED'} in "
            f"{after['add_ms']} ms, {after['pod_gets']} pod GETs (0: from the watch cache); "
            f"left: {r['cache_files_left']} caches, {r['reservations_left']} addresses"
        )
        lost = _lost(
            r["add_failed"], r["del_failed"], r["cache_files_left"], r["reservations_left"],
            r["ready_after_s"] < 0, not after["ok"],
        )  # fmt: skip
        if not lost.startswith("**") and r["events_posted"] < r["pods"]:
            lost = f"{r['pods'] - r['events_posted']} events (below)"
        out.append(f"| API: {r['switch']} | {r['injected']} | {did} | {lost} |")
    return out


def render(data: dict[str, Any]) -> str:
    parts = data["parts"]
    lines = [
        "Everything is real: the daemon, the installed shim, the plugins, the namespaces, the",
        "API emulator. The machine's 2 cores are shared with other work; the load averages",
        "before and after each part say how much.",
        "",
    ]
    for name in PARTS:
        if name in parts:
            p = parts[name]
            lines.append(
                f"- {name}: `{p['command']}` on {p['date']}, {p['wall_s']} s; load average "
                f"(1, 5, 15 min) {p['load_before']} before, {p['load_after']} after."
            )
    lines += ["", "| fault | injected how | what the daemon did | lost |", "|---|---|---|---|"]
    if "fuzz" in parts:
        lines.append(_fuzz_row(parts["fuzz"]["result"]))
    if "soak" in parts:
        lines.append(_soak_row(parts["soak"]["result"]))
    if "bounds" in parts:
        lines += faults_bounds.rows(parts["bounds"]["result"])
    if "api" in parts:
        api = parts["api"]["result"]
        lines += _api_rows(api)
        lines += [
            "",
            f"API switches: {api['burst']} pods in the emulator on the daemon's node first; the "
            "daemon as deployed (`bench.peer.PeerDaemon`: in-cluster TLS, auto mode, the shim "
            "given the generated `00-multus.conf`); each switch on from the first ADD to the "
            "last DEL, then reset. Requests are counted from the switch on until the daemon's "
            "queued events are posted, watches included (each takes a token too), stamped "
            "when the emulator's handler starts; the emulator runs at nice -10 (the daemon and "
            "the shims at 0) and its loop's lateness is recorded, so that a bunch it stamps "
            "after waiting for a core can be told from a bunch the daemon sent. An event "
            "answered 500 is not posted again: a 5xx without `Retry-After` is final for the "
            "client, and client-go's recorder, too, drops an event the server answered with "
            "an error status (it retries only when the server could not be reached). "
            f"{api['tracebacks']} tracebacks in the daemon's log over all switches; its peak "
            f"RSS {api['rss_hwm_mib']} MiB.",
        ]
    if "soak" in parts:
        s = parts["soak"]["result"]
        series = ", ".join(f"{x['rss_mib']:g}" for x in s["samples"])
        fds = ", ".join(str(int(x["fds"])) for x in s["samples"])
        every = s["samples"][1]["pairs"] if len(s["samples"]) > 1 else "-"
        lines += [
            "",
            f"Soak samples (at 0 pairs, then every {every}): RSS MiB {series}; fds {fds}.",
        ]
    return "\n".join(lines)


def parse(argv: Sequence[str]) -> tuple[Plan, list[str], bool]:
    parser = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small run, to try it out")
    parser.add_argument("--only", default=",".join(PARTS), help="parts, comma-separated")
    parser.add_argument("--bodies", type=int, help="fuzzed bodies (100,000)")
    parser.add_argument("--pairs", type=int, help="soak pairs (10,000)")
    parser.add_argument("--parallel", type=int, help="soak pairs at a time (16)")
    parser.add_argument("--burst", type=int, help="pods per API burst (200)")
    parser.add_argument("--seed", type=int, help="the fuzzer's seed (1313)")
    parser.add_argument("--no-publish", action="store_true", help="leave docs/ alone")
    parser.add_argument(
        "--republish", action="store_true", help="only rewrite the section from the last results"
    )
    args = parser.parse_args(list(argv))
    plan = QUICK if args.quick else Plan()
    changes = {
        k: v
        for k, v in vars(args).items()
        if k in ("bodies", "pairs", "parallel", "burst", "seed") and v is not None
    }
    only = [p for p in args.only.split(",") if p]
    unknown = set(only) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; known: {', '.join(PARTS)}")
    if args.republish:
        only = []
    return replace(plan, **changes), only, not args.no_publish


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    plan, only, publishing = parse(argv)
    command = shlex.join(["python", "-m", "bench", NAME, *argv])
    previous = RESULTS / f"{NAME}.json"
    if not only:  # --republish
        data: dict[str, Any] = json.loads(previous.read_text())
        publish(NAME, render(data), doc=RELIABILITY_MD)
        return data
    data = {"parts": {}}
    if set(only) != set(PARTS) and previous.exists():
        data = json.loads(previous.read_text())  # the other parts' last figures stay
    data["plan"] = asdict(plan)
    for name in only:
        print(f"-- {name}", flush=True)
        load_before = loads()
        start = time.perf_counter()
        result = asyncio.run(PARTS[name](plan))
        data["parts"][name] = {
            "command": command,
            "date": datetime.date.today().isoformat(),
            "wall_s": round(time.perf_counter() - start, 1),
            "load_before": load_before,
            "load_after": loads(),
            "result": result,
        }
        save(NAME, data)  # each part kept as soon as it is done
    markdown = render(data)
    if publishing:
        publish(NAME, markdown, doc=RELIABILITY_MD)
    print(markdown)
    return data
