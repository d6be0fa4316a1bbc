"""Side by side: our daemon and shim against any Multus-compatible daemon and shim given by
path (upstream's Go binaries, typically), alternating in one run against one API emulator.

Both daemons run as deployed and in the same way (``bench.peer``: in-cluster credentials over
TLS in a private mount namespace, auto mode, pod cache filtered to the node) with 2,000 pods
on the node and 10,000 elsewhere; the primary network is bridge + host-local, one real network
namespace per pod (pinned on a file of the run's temp dir), each side on its own bridge and
subnet. Figures:

- one ADD (then one DEL) at a time, in all four shim → daemon pairings, the pairings taking
  turns in every round so that the machine's background load falls on all of them alike;
- 50 and 200 ADDs at once and as many DELs, each side with its own shim, wall time;
- the API requests an ADD and a DEL cost, from the emulator's request log (watches excluded).

A pairing that fails is reported (how many calls failed, the first error) instead of
stopping the run, so a half-compatible peer still gets a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import os
import shlex
import subprocess
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    ShimCall,
    Stats,
    call_shim,
    chart,
    namespaces,
    publishing_options,
    report,
    save,
    saved,
    short_id,
)
from bench.kube_requests import pod_env
from bench.peer import PeerDaemon, bridge_conflist, emulator, ours, pods_netns_dir
from multusd.kubesim import KubeSim
from multusd.kubesim.operations import create
from multusd.kubesim.resources import PODS
from multusd.shim_install import install_shim

NODE = "sbs-node"
ON_NODE = 2_000
ELSEWHERE = 10_000
WIDTHS = (50, 200)
SIDES = ("ours", "theirs")
PAIRINGS = (("ours", "ours"), ("theirs", "theirs"), ("theirs", "ours"), ("ours", "theirs"))
"""(shim, daemon): each side with its own shim, then the two cross pairings."""
SUBNETS = {"ours": "10.250.0.0/16", "theirs": "10.249.0.0/16"}
QUIET = 0.3
"""An ADD's event is posted after the ADD returned; requests are counted once the API has been
quiet this long."""

_CONTAINER = {"name": "app", "image": "registry.example/app:1.2.3",
              "env": [{"name": "CONFIG", "value": "x" * 200}],
              "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}  # fmt: skip


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name[:-3]}},
        "spec": {"nodeName": node, "containers": [_CONTAINER]},
    }  # fmt: skip


def seed(sim: KubeSim, on_node: int, elsewhere: int) -> list[tuple[str, str]]:
    """Pods straight into the store (no HTTP: seconds for 12,000); the node's as (name, uid)."""
    mine = []
    for i in range(on_node):
        entry = create(sim.state, PODS, "default", _pod(f"sbs-{i:05d}", NODE))
        mine.append((entry.name, entry.uid))
    for i in range(elsewhere):
        create(sim.state, PODS, "default", _pod(f"other-{i:05d}", f"node-{i % 100:02d}"))
    return mine


@dataclass
class Side:
    """One side: its daemon (running) and its own shim."""

    daemon: PeerDaemon
    shim: Path


@dataclass
class Calls:
    """Outcomes of one kind of call: successes' timings, failures and the first error."""

    seconds: list[float] = field(default_factory=list)
    failures: int = 0
    first_error: str | None = None
    wall_s: float | None = None

    def add(self, call: ShimCall) -> None:
        if call.ok:
            self.seconds.append(call.seconds)
            return
        self.failures += 1
        if self.first_error is None:
            self.first_error = call.error()

    def summary(self) -> dict[str, Any]:
        stats = asdict(Stats.of(self.seconds)) if self.seconds else None
        return {"runs": len(self.seconds) + self.failures, "failures": self.failures,
                "first_error": self.first_error, "stats": stats, "wall_s": self.wall_s}  # fmt: skip


class PodPool:
    """The node's seeded pods, handed out in turn (reused once all were used: each pod has
    been DELed by then)."""

    def __init__(self, pods: list[tuple[str, str]]) -> None:
        self._pods = itertools.cycle(pods)

    def take(self, count: int) -> list[tuple[str, str]]:
        return [next(self._pods) for _ in range(count)]


@contextlib.asynccontextmanager
async def netns_envs(
    pods: list[tuple[str, str]], directory: Path
) -> AsyncIterator[list[dict[str, str]]]:
    """A fresh network namespace per pod, pinned on a file in ``directory`` (a daemon's
    :attr:`~bench.peer.PeerDaemon.netns_dir`; ``common.namespaces``, in worker threads so the
    emulator in this loop keeps answering), as CNI environments; removed on exit."""
    async with namespaces(directory, len(pods)) as paths:
        yield [pod_env(ns, name, uid) for (name, uid), ns in zip(pods, paths, strict=True)]


def _api_requests(sim: KubeSim) -> list[Any]:
    return [r for r in sim.stats.requests() if r.verb != "watch"]


async def quiet(sim: KubeSim, timeout: float = 10.0) -> None:
    """Until no request (watches aside) arrived for :data:`QUIET` seconds."""
    deadline = time.monotonic() + timeout
    seen = -1
    while time.monotonic() < deadline:
        count = len(_api_requests(sim))
        if count == seen:
            return
        seen = count
        await asyncio.sleep(QUIET)


def request_kinds(sim: KubeSim) -> Counter[str]:
    """Requests since the last reset as ``verb resource[/subresource]`` (plus the response
    code when it was not a success)."""
    out: Counter[str] = Counter()
    for r in _api_requests(sim):
        key = f"{r.verb} {r.resource}" + (f"/{r.subresource}" if r.subresource else "")
        out[key + (f" → {r.code}" if r.code >= 300 else "")] += 1
    return out


async def block(
    sim: KubeSim, shim: Side, daemon: Side, pods: list[tuple[str, str]], adds: Calls, dels: Calls
) -> tuple[Counter[str], Counter[str]]:
    """ADD ``pods`` one at a time, then DEL them one at a time, through ``shim`` to
    ``daemon``; returns the API requests of the ADDs and of the DELs."""
    conf = daemon.daemon.runtime_conf
    async with netns_envs(pods, daemon.daemon.netns_dir) as envs:
        sim.stats.reset()
        for env in envs:
            adds.add(await call_shim(shim.shim, "ADD", conf, env))
        await quiet(sim)
        add_requests = request_kinds(sim)
        sim.stats.reset()
        for env in envs:
            dels.add(await call_shim(shim.shim, "DEL", conf, env))
        await quiet(sim)
        del_requests = request_kinds(sim)
    return add_requests, del_requests


async def one_at_a_time(
    sim: KubeSim, sides: dict[str, Side], pool: PodPool, rounds: int, per_round: int
) -> dict[str, Any]:
    """``rounds`` rounds; in each, every pairing ADDs and DELs ``per_round`` pods (the order
    of the pairings reversed every other round)."""
    calls = {p: (Calls(), Calls()) for p in PAIRINGS}
    requests = {s: (Counter[str](), Counter[str]()) for s in SIDES}
    ops = dict.fromkeys(SIDES, 0)
    for shim, daemon in PAIRINGS:  # warm-up: page cache, first plugin runs, connections
        await block(sim, sides[shim], sides[daemon], pool.take(2), Calls(), Calls())
    for r in range(rounds):
        for shim, daemon in PAIRINGS if r % 2 == 0 else PAIRINGS[::-1]:
            adds, dels = calls[(shim, daemon)]
            add_req, del_req = await block(
                sim, sides[shim], sides[daemon], pool.take(per_round), adds, dels
            )
            requests[daemon][0].update(add_req)
            requests[daemon][1].update(del_req)
            ops[daemon] += per_round
    return {
        "pairings": {
            f"{shim} shim → {daemon} daemon": {"add": a.summary(), "del": d.summary()}
            for (shim, daemon), (a, d) in calls.items()
        },
        "requests": {
            side: {
                verb: {"per_call": sum(c.values()) / ops[side],
                       "kinds": {k: n / ops[side] for k, n in sorted(c.items())}}
                for verb, c in zip(("add", "del"), requests[side], strict=True)
            }
            for side in SIDES
        },
    }  # fmt: skip


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of CPU so far: the daemon's own, its reaped children's (the plugins, with the
    host-local each bridge runs), this process's reaped children's (the shims), this process's
    own (the emulator and the benchmark), and the whole machine's (busy, all cores)."""

    daemon: float
    plugins: float
    shims: float
    bench: float
    machine: float

    @classmethod
    def now(cls, pid: int) -> CpuTimes:
        tick = os.sysconf("SC_CLK_TCK")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        utime, stime, cutime, cstime = (int(v) / tick for v in fields[11:15])
        cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        me = os.times()
        return cls(
            daemon=utime + stime, plugins=cutime + cstime,
            shims=me.children_user + me.children_system, bench=me.user + me.system,
            machine=(sum(cpu) - cpu[3] - cpu[4]) / tick,  # all but idle and iowait
        )  # fmt: skip

    def since(self, before: CpuTimes) -> dict[str, float]:
        return {k: v - getattr(before, k) for k, v in asdict(self).items()}


async def at_once(side: Side, pods: list[tuple[str, str]]) -> dict[str, Any]:
    """All ADDs at once, then (once all are done) all DELs at once, with the side's own shim;
    with the CPU each part of the machine spent meanwhile (:class:`CpuTimes`)."""
    out: dict[str, Any] = {}
    conf = side.daemon.runtime_conf
    assert side.daemon.proc is not None
    pid = side.daemon.proc.pid
    async with netns_envs(pods, side.daemon.netns_dir) as envs:
        for command in ("ADD", "DEL"):
            calls = Calls()
            before = CpuTimes.now(pid)
            start = time.perf_counter()
            for call in await asyncio.gather(
                *(call_shim(side.shim, command, conf, e) for e in envs)
            ):
                calls.add(call)
            calls.wall_s = time.perf_counter() - start
            out[command.lower()] = calls.summary() | {"cpu_s": CpuTimes.now(pid).since(before)}
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def _our_commit() -> str:
    """The commit our side was built from, marked when the work tree differs from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                              check=False)  # fmt: skip
        return done.stdout.strip()

    head, dirty = (
        git("rev-parse", "--short", "HEAD"),
        git("status", "--porcelain", "--", "multusd", "cni_shim"),
    )
    return head + (" with uncommitted changes" if dirty else "")


@contextlib.contextmanager
def _bridges(names: Sequence[str]) -> Iterator[None]:
    try:
        yield
    finally:
        for name in names:
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    binaries = {"ours": Path(args.ours_daemon), "theirs": Path(args.daemon)}
    bridges = {s: f"mbs{s[0]}{short_id()[:6]}" for s in SIDES}
    load_before = os.getloadavg()
    started = time.monotonic()
    data: dict[str, Any] = {
        "pods": {"on_node": args.on_node, "elsewhere": args.elsewhere},
        "daemons": {s: str(p) for s, p in binaries.items()},
        "ours": _our_commit(),
        "sha256": {"their daemon": _sha(binaries["theirs"]), "their shim": _sha(Path(args.shim))},
        "rounds": args.rounds, "per_round": args.per_round, "bursts": args.bursts,
    }  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="mbs-", dir="/tmp") as tmp,
        _bridges(list(bridges.values())),
        pods_netns_dir(Path(tmp) / "netns") as netns_dir,
    ):
        w = Path(tmp)
        async with emulator(bookmark_interval=5.0) as sim:
            pool = PodPool(seed(sim, args.on_node, args.elsewhere))
            our_shim = await asyncio.to_thread(install_shim, w / "bin")
            shims = {"ours": our_shim, "theirs": Path(args.shim)}
            async with contextlib.AsyncExitStack() as stack:
                sides: dict[str, Side] = {}
                data["start"] = {}
                for s in SIDES:
                    network = bridge_conflist(bridges[s], SUBNETS[s], w / s / "ipam")
                    peer = PeerDaemon(binaries[s], w / s, sim, network, node=NODE,
                                      netns_dir=netns_dir)  # fmt: skip
                    t0 = time.monotonic()
                    await stack.enter_async_context(peer)
                    data["start"][s] = {"healthy_after_s": time.monotonic() - t0,
                                        "rss_mib": peer.rss_mib()}  # fmt: skip
                    sides[s] = Side(peer, shims[s])
                data["one_at_a_time"] = await one_at_a_time(
                    sim, sides, pool, args.rounds, args.per_round
                )
                load_between = os.getloadavg()
                bursts: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in SIDES}
                for _, width, s in itertools.product(range(args.bursts), WIDTHS, SIDES):
                    result = await at_once(sides[s], pool.take(width))
                    bursts[s].setdefault(str(width), []).append(result)
                data["at_once"] = bursts
                data["peak_rss_mib"] = {s: sides[s].daemon.rss_mib("VmHWM") for s in SIDES}
    data["seconds"] = time.monotonic() - started
    data["load_average"] = {"before": load_before, "before_bursts": load_between,
                            "after": os.getloadavg()}  # fmt: skip
    return data


# --- publishing -------------------------------------------------------------------------------


def _ms(result: dict[str, Any], key: str) -> float | None:
    stats = result["stats"]
    return None if stats is None else float(stats[key])


def _best_wall(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The burst repeated ``--bursts`` times: the median wall time, failures summed."""
    median = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
    failures = sum(r["failures"] for r in runs)
    errors = [r["first_error"] for r in runs if r["first_error"]]
    return {
        "wall_s": median["wall_s"],
        "cpu_s": median.get("cpu_s"),  # that run's (older results have none)
        "failures": failures,
        "runs": sum(r["runs"] for r in runs),
        "first_error": errors[0] if errors else None,
    }


def _cell(value: float | None, result: dict[str, Any], fmt: str) -> str:
    if _failed(result):
        return f"failed ({result['failures']}/{result['runs']})"
    text = "–" if value is None else fmt.format(value)
    return text + (f" ({result['failures']} failed)" if result["failures"] else "")


def _ratio(a: float | None, b: float | None, ra: dict[str, Any], rb: dict[str, Any]) -> str:
    if (
        a is None
        or b is None
        or not b
        or ra["failures"] == ra["runs"]
        or rb["failures"] == rb["runs"]
    ):
        return "–"
    return f"{a / b:.2f}×"


def _figures(data: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any], str, str]]:
    """(figure, our result, their result, value key, format) for the main table."""
    pair = data["one_at_a_time"]["pairings"]
    mine, theirs = pair["ours shim → ours daemon"], pair["theirs shim → theirs daemon"]
    rows: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
        ("ADD one at a time, p50 ms", mine["add"], theirs["add"], "median_ms", "{:.1f}"),
        ("ADD one at a time, p99 ms", mine["add"], theirs["add"], "p99_ms", "{:.1f}"),
        ("DEL one at a time, p50 ms", mine["del"], theirs["del"], "median_ms", "{:.1f}"),
        ("DEL one at a time, p99 ms", mine["del"], theirs["del"], "p99_ms", "{:.1f}"),
    ]
    for verb in ("add", "del"):
        for width in WIDTHS:
            a, b = (_best_wall([r[verb] for r in data["at_once"][s][str(width)]]) for s in SIDES)
            rows.append((f"{width} {verb.upper()}s at once, wall s", a, b, "wall_s", "{:.2f}"))
    return rows


def _value(result: dict[str, Any], key: str) -> float | None:
    return result.get(key) if key == "wall_s" else _ms(result, key)


def _requests(data: dict[str, Any], side: str, verb: str) -> str:
    r = data["one_at_a_time"]["requests"][side][verb]
    kinds = ", ".join(f"{n:.2g} {k}" for k, n in r["kinds"].items()) or "none"
    return f"{r['per_call']:.2f} ({kinds})"


def _errors(data: dict[str, Any]) -> list[str]:
    """One line per kind of call that failed at least once: how often, and the first error."""
    cases = [
        (f"{pairing}, {verb.upper()} one at a time", result[verb])
        for pairing, result in data["one_at_a_time"]["pairings"].items()
        for verb in ("add", "del")
    ]
    cases += [
        (f"{side}, {width} {verb.upper()}s at once", _best_wall([run[verb] for run in runs]))
        for side in SIDES
        for width, runs in data["at_once"][side].items()
        for verb in ("add", "del")
    ]
    return [
        f"- {what}: {r['failures']}/{r['runs']} failed; first error: `{r['first_error']}`"
        for what, r in cases
        if r["failures"]
    ]


def _failed(result: dict[str, Any]) -> bool:
    return bool(result["failures"]) and result["failures"] == result["runs"]


def _bars(ax: Any, xs: list[float], ys: list[float | None], width: float, label: str) -> None:
    """Bars with their values on top; a missing value (every call failed) is marked so."""
    bars = ax.bar(xs, [y or 0.0 for y in ys], width, label=label)
    texts = ["failed" if y is None else f"{y:.3g}" for y in ys]
    ax.bar_label(bars, texts, fontsize="xx-small", rotation=90, padding=2)


def _chart(data: dict[str, Any]) -> None:
    pair = data["one_at_a_time"]["pairings"]
    groups = [("ADD p50", "add", "median_ms"), ("ADD p99", "add", "p99_ms"),
              ("DEL p50", "del", "median_ms"), ("DEL p99", "del", "p99_ms")]  # fmt: skip
    cases = [(w, verb) for verb in ("add", "del") for w in WIDTHS]
    with chart("sidebyside", cols=2, size=(11, 4.4)) as (left, right):
        width = 0.8 / len(pair)
        for k, (label, result) in enumerate(pair.items()):
            xs = [i + (k - (len(pair) - 1) / 2) * width for i in range(len(groups))]
            ys = [None if _failed(result[v]) else _ms(result[v], key) for _, v, key in groups]
            _bars(left, xs, ys, width, label)
        left.set_xticks(range(len(groups)), [g[0] for g in groups])
        left.set_ylabel("ms")
        left.set_title("One at a time (shim → daemon)")
        for k, side in enumerate(SIDES):
            runs = [_best_wall([r[v] for r in data["at_once"][side][str(w)]]) for w, v in cases]
            xs = [i + (k - 0.5) * 0.4 for i in range(len(cases))]
            _bars(right, xs, [None if _failed(r) else r["wall_s"] for r in runs], 0.4,
                  f"{side} (own shim)")  # fmt: skip
        right.set_xticks(range(len(cases)), [f"{w} {v.upper()}s" for w, v in cases])
        right.set_ylabel("wall s")
        right.set_title("At once")
        for ax in (left, right):
            ax.legend(fontsize="x-small")
            ax.grid(alpha=0.3, axis="y")
            ax.margins(y=0.15)


def summarize(data: dict[str, Any], command: str, about: str) -> str:
    rows = []
    for label, a, b, key, fmt in _figures(data):
        va, vb = _value(a, key), _value(b, key)
        rows.append(
            f"| {label} | {_cell(va, a, fmt)} | {_cell(vb, b, fmt)} | {_ratio(va, vb, a, b)} |"
        )
    for verb in ("add", "del"):
        rows.append(f"| API requests per {verb.upper()} | {_requests(data, 'ours', verb)} | "
                    f"{_requests(data, 'theirs', verb)} | |")  # fmt: skip
    for label, (a, b) in (
        ("daemon RSS once healthy, MiB", [data["start"][s]["rss_mib"] for s in SIDES]),
        ("daemon peak RSS (VmHWM), MiB", [data["peak_rss_mib"][s] for s in SIDES]),
    ):
        rows.append(f"| {label} | {a:.1f} | {b:.1f} | {a / b:.2f}× |" if b else f"| {label} | |")
    pairs = []
    for pairing, r in data["one_at_a_time"]["pairings"].items():
        cells = [
            _cell(_ms(r[v], k), r[v], "{:.1f}")
            for v in ("add", "del")
            for k in ("median_ms", "p99_ms")
        ]
        pairs.append(f"| {pairing} | " + " | ".join(cells) + " |")
    cpu_rows = _cpu_rows(data)
    errors = _errors(data) or ["- none: every call succeeded."]
    load = data["load_average"]
    n = data["rounds"] * data["per_round"]
    sha = ", ".join(f"{k} `{v}`" for k, v in data["sha256"].items())
    pods = data["pods"]
    setup = [
        f"Command (as root): `{command}`.",
        f"Ours: commit {data['ours']}. The other side: {about} (sha256: {sha}).",
        "Both daemons run at once and in the same way, as deployed: in-cluster credentials over"
        " TLS in a private mount namespace (`bench/peer.py`), auto mode, the pod cache filtered"
        f" to their node; {pods['on_node']:,} pods on the node and {pods['elsewhere']:,}"
        " elsewhere in the emulator.",
        "Primary network bridge + host-local, a real network namespace per pod.",
        f"One at a time: {n} ADDs and {n} DELs per pairing, the pairings taking turns"
        f" ({data['rounds']} rounds of {data['per_round']}).",
        f"At once: each side with its own shim, the median of {data['bursts']} run(s).",
        f"The run took {data['seconds']:.0f} s on 2 cores shared with other work: load average"
        f" {load['before'][0]:.1f} before it, {load['before_bursts'][0]:.1f} after the"
        f" one-at-a-time part, {load['after'][0]:.1f} after the bursts (their own processes).",
    ]
    text = textwrap.fill(" ".join(setup), 100, break_long_words=False, break_on_hyphens=False)
    return f"""{text}

| figure | ours | theirs | ours / theirs |
|---|---|---|---|
{chr(10).join(rows)}

All four pairings, one at a time:

| shim → daemon | ADD p50 ms | ADD p99 ms | DEL p50 ms | DEL p99 ms |
|---|---|---|---|---|
{chr(10).join(pairs)}

CPU seconds spent during the 200 at once (the median run), by whom; "machine" is every core's
busy time, so on 2 cores it can reach twice the wall time:

| burst | wall s | machine busy | daemon | its plugins | the shims | emulator and bench |
|---|---|---|---|---|---|---|
{chr(10).join(cpu_rows)}

Failures:

{chr(10).join(errors)}

![Side by side: one at a time in all four pairings, and at once](images/sidebyside.png)"""


def _cpu_rows(data: dict[str, Any]) -> list[str]:
    rows = []
    for side in SIDES:
        for verb in ("add", "del"):
            run = _best_wall([r[verb] for r in data["at_once"][side][str(WIDTHS[-1])]])
            cpu = run.get("cpu_s")
            if cpu is None or run.get("wall_s") is None:
                continue
            cells = [f"{cpu[k]:.2f}" for k in ("machine", "daemon", "plugins", "shims", "bench")]
            rows.append(f"| {side}, {WIDTHS[-1]} {verb.upper()}s | {run['wall_s']:.2f} | "
                        + " | ".join(cells) + " |")  # fmt: skip
    return rows


def _command(argv: Sequence[str]) -> str:
    """The command line as one would type it (double quotes for prose with apostrophes)."""
    words = ["python", "-m", "bench", "sidebyside", *argv]
    return " ".join(
        f'"{w}"' if shlex.quote(w) != w and not set(w) & set('"$`\\!') else shlex.quote(w)
        for w in words
    )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench sidebyside",
        description="Our daemon and shim beside another Multus-compatible pair, given by path.",
    )
    parser.add_argument("--daemon", help="the other side's daemon binary (required)")
    parser.add_argument("--shim", help="the other side's shim binary (required)")
    parser.add_argument(
        "--ours-daemon", default=str(ours()), help="our daemon (default: %(default)s)"
    )
    parser.add_argument(
        "--about",
        default="the daemon and shim given by path",
        help="what the other side is, in words, for docs/performance.md",
    )
    parser.add_argument("--rounds", type=int, default=20, help="rounds of one-at-a-time calls")
    parser.add_argument("--per-round", type=int, default=5, help="pods per pairing per round")
    parser.add_argument("--bursts", type=int, default=3, help="runs of each at-once burst")
    parser.add_argument("--on-node", type=int, default=ON_NODE, help="pods on the node")
    parser.add_argument("--elsewhere", type=int, default=ELSEWHERE, help="pods on other nodes")
    publishing_options(parser, "sidebyside")
    args = parser.parse_args(list(argv))
    if not args.republish and not (args.daemon and args.shim):
        parser.error("--daemon PATH and --shim PATH are required")
    return args


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    args = parse(argv)
    if args.republish:
        data = saved("sidebyside")
    else:
        if max(WIDTHS) > args.on_node:
            raise SystemExit(f"--on-node must be at least {max(WIDTHS)} (the widest burst)")
        data = asyncio.run(run(args))
        data["argv"], data["about"] = list(argv), args.about
        save("sidebyside", data)  # before anything can fail on the way to the table
    table = summarize(data, _command(data["argv"]), data["about"])
    if args.no_publish:
        print(table)
    else:
        _chart(data)
        report("sidebyside", table, data)
    return data
