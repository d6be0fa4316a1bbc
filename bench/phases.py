"""Where one request's wall time goes: our daemon's per-phase timeline, over many requests.

Our daemon runs as deployed (``bench.peer``: in-cluster credentials over TLS, auto mode, pod
cache filtered to the node, 2,000 pods on the node and 10,000 elsewhere, as in
``bench/sidebyside.py``) at ``logLevel`` debug, so that every CNI request ends with its phases
line (``multusd.timeline``). ADDs and DELs go one at a time through our shim, bridge +
host-local, one real network namespace per pod. The benchmark reads the lines back and reports
each phase's and part's median, and what the shim and the socket add on top: the shim's wall
time, measured here, minus the daemon's.

``--interpreter NAME=DAEMON`` runs the same with another daemon entry point, e.g. a venv of a
newer CPython (``/work/venv-3.12.1/bin/multusd``), so that the interpreters can be compared;
the default is the running environment's, Debian's 3.11.2 under ``.ci/setup``.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import re
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    call_shim,
    chart,
    publishing_options,
    report,
    save,
    saved,
    short_id,
)
from bench.peer import PeerDaemon, bridge_conflist, emulator, ours, pods_netns_dir
from bench.sidebyside import ELSEWHERE, NODE, ON_NODE, PodPool, _bridges, _our_commit, netns_envs
from bench.sidebyside import seed as seed_pods
from multusd.shim_install import install_shim

LINE = re.compile(r"/cni (ADD|DEL) phases \(container=(\S+?)\): (.*)$")
ITEM = re.compile(r"([\w\[\]./-]+) ([\d.]+)ms")
SUBNET = "10.213.0.0/16"


def parse_line(text: str) -> tuple[list[tuple[str, float]], dict[str, list[float]]]:
    """A phases line's phases (in order, "other" last) and its parts, in milliseconds; a part
    seen twice in one request (two plugins of one name) is added up."""
    phases: list[tuple[str, float]] = []
    parts: dict[str, list[float]] = defaultdict(list)
    depth = 0
    for token in re.split(r"(\(|\))", text):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        else:
            for name, ms in ITEM.findall(token):
                if depth:
                    parts[f"{phases[-1][0]} / {name}"].append(float(ms))
                else:
                    phases.append((name, float(ms)))
    return phases, parts


def _collect(log: str, containers: set[str]) -> dict[str, dict[str, list[float]]]:
    """Per verb, each phase's (and part's) milliseconds over the requests of ``containers``;
    ``total`` is the sum of the phases (the daemon's wall time)."""
    out: dict[str, dict[str, list[float]]] = {"ADD": defaultdict(list), "DEL": defaultdict(list)}
    for line in log.splitlines():
        found = LINE.search(line)
        if not found or found.group(2) not in containers:
            continue
        verb, _, text = found.groups()
        phases, parts = parse_line(text)
        for name, ms in phases:
            out[verb][name].append(ms)
        for name, values in parts.items():
            out[verb][name].append(sum(values))
        out[verb]["total"].append(sum(ms for _, ms in phases))
    return out


async def measure(
    daemon_path: Path, calls: int, w: Path, sim: Any, pool: PodPool
) -> dict[str, Any]:
    """``calls`` ADDs then as many DELs, one at a time, in blocks of 10, on ``daemon_path``."""
    bridge = f"mph{short_id()[:8]}"
    with _bridges([bridge]), pods_netns_dir(w / "netns") as netns_dir:
        network = bridge_conflist(bridge, SUBNET, w / "ipam")
        shim = await asyncio.to_thread(install_shim, w / "bin")
        async with PeerDaemon(daemon_path, w / "daemon", sim, network, node=NODE,
                              netns_dir=netns_dir, log_level="debug") as peer:  # fmt: skip
            shim_ms: dict[str, list[float]] = {"ADD": [], "DEL": []}
            containers: dict[str, str] = {}
            failures: list[str] = []
            done = offset = 0
            warm = True
            while done < calls:
                block = pool.take(min(10, calls - done) if not warm else 2)
                async with netns_envs(block, netns_dir) as envs:
                    for verb in ("ADD", "DEL"):
                        for env in envs:
                            call = await call_shim(shim, verb, peer.runtime_conf, env)
                            if not call.ok:
                                failures.append(f"{verb}: {call.error()}")
                            elif not warm:
                                shim_ms[verb].append(call.seconds * 1000)
                                containers[env["CNI_CONTAINERID"]] = verb
                if warm:  # the warm-up's lines are not counted: the log from here on is
                    warm = False
                    await asyncio.sleep(0.5)  # (its writer thread catches up first)
                    offset = peer.log_path.stat().st_size
                    continue
                done += len(block)
            await asyncio.sleep(0.5)  # the log writer thread catches up
            with peer.log_path.open("rb") as handle:
                handle.seek(offset)
                log = handle.read().decode(errors="replace")
            version = await _version(daemon_path)
    phases = _collect(log, set(containers))
    return {"daemon": str(daemon_path), "python": version, "calls": calls,
            "failures": failures, "shim_ms": shim_ms,
            "phases": {verb: dict(v) for verb, v in phases.items()}}  # fmt: skip


async def _version(daemon_path: Path) -> str:
    """The interpreter the daemon entry point runs on (its shebang's)."""
    shebang = daemon_path.read_text(errors="replace").splitlines()[0].removeprefix("#!").split()
    proc = await asyncio.create_subprocess_exec(
        *shebang, "-c", "import platform; print(platform.python_version())",
        stdout=subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return out.decode().strip() or platform.python_version()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mph-", dir="/tmp") as tmp:
        async with emulator(bookmark_interval=5.0) as sim:
            pool = PodPool(seed_pods(sim, args.on_node, args.elsewhere))
            for label, daemon_path in args.interpreters:
                w = Path(tmp) / label
                runs[label] = await measure(Path(daemon_path), args.calls, w, sim, pool)
    return {"ours": _our_commit(), "runs": runs, "seconds": time.monotonic() - started,
            "pods": {"on_node": args.on_node, "elsewhere": args.elsewhere}}  # fmt: skip


# --- publishing -------------------------------------------------------------------------------


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _rows(run: dict[str, Any]) -> list[tuple[str, float | None, float | None]]:
    """Phase and part names in the order an ADD then a DEL meets them, with both medians."""
    names: list[str] = []
    for verb in ("ADD", "DEL"):
        for name in run["phases"][verb]:
            if name not in names and name not in ("other", "total"):
                names.append(name)
    names += ["other", "total"]
    return [(n, _median(run["phases"]["ADD"].get(n)), _median(run["phases"]["DEL"].get(n)))
            for n in names]  # fmt: skip


def summarize(data: dict[str, Any], command: str) -> str:
    labels = list(data["runs"])
    first = data["runs"][labels[0]]
    lines = [
        f"Command (as root): `{command}`. Ours: commit {data['ours']}. Our daemon as deployed "
        "(`bench/peer.py`, auto mode, the pod cache filtered to its node; "
        f"{data['pods']['on_node']:,} pods on the node and {data['pods']['elsewhere']:,} "
        "elsewhere in the emulator) at `logLevel` debug; bridge + host-local, a real network "
        f"namespace per pod; {first['calls']} ADDs and {first['calls']} DELs one at a time "
        f"through our shim, after 2 of each to warm up. The run took {data['seconds']:.0f} s.",
        "",
        "Medians in ms; a part (indented) is inside the phase above it; a request has only "
        "the phases it went through. \"shim and socket\" is the shim's wall time, measured "
        "by the benchmark, minus the daemon's (interpreter start, the `/readyz` probe, the "
        "connection, printing the result).",
        "",
        "| phase | " + " | ".join(f"ADD ({label}, Python {data['runs'][label]['python']}) | "
                                  f"DEL ({label})" for label in labels) + " |",
        "|---|" + "---|---|" * len(labels),
    ]  # fmt: skip
    by_label = {label: {n: (a, d) for n, a, d in _rows(data["runs"][label])} for label in labels}
    order = [n for n, _, _ in _rows(first)]
    for label in labels[1:]:
        order += [n for n in by_label[label] if n not in order]
    for name in order:
        shown = ("  · " + name.split(" / ", 1)[1]) if " / " in name else name
        if name == "total":
            shown = "**daemon total**"
        cells = []
        for label in labels:
            add, dele = by_label[label].get(name, (None, None))
            cells += [_cell(add), _cell(dele)]
        lines.append(f"| {shown} | " + " | ".join(cells) + " |")
    for what in ("shim and socket", "shim wall (what the runtime sees)"):
        cells = []
        for label in labels:
            run = data["runs"][label]
            for verb in ("ADD", "DEL"):
                wall = _median(run["shim_ms"][verb])
                daemon = _median(run["phases"][verb].get("total"))
                if what.startswith("shim and"):
                    value = None if wall is None or daemon is None else wall - daemon
                else:
                    value = wall
                cells.append(_cell(value))
        lines.append(f"| {what} | " + " | ".join(cells) + " |")
    failures = [f for label in labels for f in data["runs"][label]["failures"]]
    lines += ["", f"Failures: {len(failures)}" + (f"; first: `{failures[0]}`" if failures else ".")]
    lines += ["", "![Where an ADD's and a DEL's wall time goes](images/phases.png)"]
    return "\n".join(lines)


def _chart(data: dict[str, Any]) -> None:
    """One stacked bar per verb and interpreter: the top-level phases' medians."""
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    for label, run in data["runs"].items():
        for verb in ("ADD", "DEL"):
            names = [n for n in run["phases"][verb] if " / " not in n and n != "total"]
            pieces = [(n, _median(run["phases"][verb][n]) or 0.0) for n in names]
            wall = _median(run["shim_ms"][verb]) or 0.0
            pieces.append(("shim and socket", max(wall - sum(ms for _, ms in pieces), 0.0)))
            bars.append((f"{verb} ({label}, {run['python']})", pieces))
    with chart("phases", size=(10, 1.5 + 0.6 * len(bars))) as ax:
        cmap = __import__("matplotlib").colormaps["tab20"]
        colours: dict[str, Any] = {}
        for y, (_, pieces) in enumerate(bars):
            left = 0.0
            for name, ms in pieces:
                key = name.split("[")[0]  # delegate[bridge] and delegate[macvlan]: one colour
                new = key not in colours
                colour = colours.setdefault(key, cmap(len(colours) % 20))
                ax.barh(y, ms, left=left, color=colour, edgecolor="white",
                        label=key if new else None)  # fmt: skip
                if ms >= 3:
                    ax.text(left + ms / 2, y, f"{ms:.0f}", ha="center", va="center", fontsize=7)
                left += ms
        ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("median wall time, ms (one request at a time)")
        ax.legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.3))


def _command(argv: Sequence[str]) -> str:
    return " ".join(["python -m bench phases", *argv])


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench phases",
        description="Our daemon's per-phase wall time, one request at a time.",
    )
    parser.add_argument("--calls", type=int, default=100, help="ADDs (and DELs) measured")
    parser.add_argument(
        "--interpreter", action="append", default=[], metavar="NAME=DAEMON",
        help="a label and a daemon entry point (another venv's multusd); repeatable; "
        "default: this environment's",
    )  # fmt: skip
    parser.add_argument("--on-node", type=int, default=ON_NODE, help="pods on the node")
    parser.add_argument("--elsewhere", type=int, default=ELSEWHERE, help="pods on other nodes")
    publishing_options(parser, "phases")
    args = parser.parse_args(list(argv))
    pairs = [tuple(i.split("=", 1)) for i in args.interpreter if "=" in i]
    if len(pairs) != len(args.interpreter):
        parser.error("--interpreter takes NAME=DAEMON")
    args.interpreters = pairs or [("ours", str(ours()))]
    return args


def main(argv: Sequence[str] = ()) -> dict[str, Any]:
    args = parse(argv)
    data = saved("phases") if args.republish else asyncio.run(run(args))
    markdown = summarize(data, _command(argv))
    if args.no_publish:
        save("phases", data)
        print(markdown)
    else:
        _chart(data)
        report("phases", markdown, data)
    return data
