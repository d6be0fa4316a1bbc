"""Issue 7 benchmark: start time of the shims we ship, beside the bare interpreter.

``install-shim`` (a single script for hosts with ``/usr/bin/python3``) and
``install-shim --bundle`` (the image's interpreter and a zip of the shim's modules, for hosts
without Python, e.g. kind nodes), both answering ``CNI_COMMAND=VERSION``."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Stats, report, run, timed
from multusd.shim_bundle import install_host_shim
from multusd.shim_install import install_shim


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(runs: int = 100) -> dict[str, Any]:
    env = {"CNI_COMMAND": "VERSION"}
    with tempfile.TemporaryDirectory(prefix="mbs-", dir="/tmp") as tmp:
        single = install_shim(Path(tmp) / "single")
        bundle = install_host_shim(Path(tmp) / "bundle")
        commands = {
            "bare": ["/usr/bin/python3", "-I", "-S", "-c", "pass"],
            "single": [str(single)],
            "bundle": [str(bundle)],
        }
        samples: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(5):
            for cmd in commands.values():
                run(cmd, env=env)
        for _ in range(runs):
            for name, cmd in commands.items():
                samples[name].append(timed(functools.partial(run, cmd, env=env)))
        sizes = {"single": single.stat().st_size, "bundle": _disk(Path(tmp) / "bundle")}
    stats = {k: Stats.of(v) for k, v in samples.items()}
    bare = stats["bare"].median_ms
    single_size = f"{sizes['single'] / 1024:.0f} KiB"
    bundle_size = f"{sizes['bundle'] / 2**20:.1f} MiB"
    rows = [
        ("`/usr/bin/python3 -I -S -c pass` (reference)", stats["bare"], "—"),
        ("`install-shim`: one script for hosts with Python", stats["single"], single_size),
        ("`install-shim --bundle`: for hosts without Python", stats["bundle"], bundle_size),
    ]
    lines = [
        f"Command: `tox -e bench -- host_shim`. {runs} interleaved runs of `CNI_COMMAND=VERSION`.",
        "",
        "| shim | median ms | p99 ms | vs bare interpreter | on disk |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {label} | {s.median_ms:.1f} | {s.p99_ms:.1f} | {s.median_ms / bare:.2f}× | {size} |"
        for label, s, size in rows
    ]
    table = "\n".join(lines)
    data = {k: v.__dict__ for k, v in stats.items()} | {"sizes": sizes}
    report("host_shim", table, data)
    return data
