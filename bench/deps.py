"""The figures behind README.md's "Dependencies": what a library would cost the daemon.

Not a benchmark of ``python -m bench`` (nothing here changes with the daemon's code, and it
needs packages the project does not install): run it by hand, as README.md shows.

``python -m bench.deps rss [--site DIR]`` starts one interpreter per row, makes it import (and
where it says so, use) one library, and reads the child's ``/proc/<pid>/status`` while it waits:
``VmRSS`` (what ``top`` shows) and ``RssAnon`` (the private memory a memory cgroup is charged
for; the library's files are page cache, shared and charged once). Each figure is the median
of five runs, minus the same interpreter doing nothing; the second column is the same on top
of the daemon's own imports (``import multusd.daemon``), which is what the daemon would grow
by. ``--site`` adds a throwaway venv's ``site-packages`` to the child's path (pyroute2 is
not installed here: it is what is measured).

``python -m bench.deps layers`` splits the daemon's own imports the same way, one layer on top
of the other (the interpreter; asyncio with ssl, json and logging; then each package of the
design card: aiohttp.web, kubernetes_asyncio, pydantic, aiofiles, watchfiles; everything else
``import multusd.daemon`` brings): what each layer adds to ``RssAnon``, for
docs/performance.md ("Daemon memory") and README.md ("Dependencies").

``python -m bench.deps write [--site DIR]`` writes a delegate-cache-sized file the daemon's way
(one ``asyncio.to_thread`` hop around :func:`multusd.fsutil.atomic_write`) and the same steps
through aiofiles (one thread hop per call), in a directory on disk: latency one at a time, CPU
per write (every thread of the process), and a burst of 32 at once (the daemon's
``maxActiveRequests``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.common import REPO, Stats, proc_mib
from multusd.fsutil import atomic_write

RUNS = 5
DAEMON_IMPORTS = "import multusd.daemon"
ROWS: dict[str, str] = {
    "kubernetes_asyncio (import)": "import kubernetes_asyncio",
    "pydantic (import)": "import pydantic",
    "pydantic (one model, one validation)": (
        "import pydantic\n"
        "class C(pydantic.BaseModel):\n"
        "    cniVersion: str = ''\n"
        "    socketDir: str = '/run/multus/'\n"
        "    logLevel: str = ''\n"
        "C.model_validate({'cniVersion': '1.0.0', 'logLevel': 'debug'})"
    ),
    "pyroute2 (import IPRoute, dump the routes)": (
        "from pyroute2 import IPRoute\nwith IPRoute() as ip:\n    ip.get_routes()"
    ),
    "multusd.cni.rtnetlink (import, dump the routes)": (
        "from multusd.cni.rtnetlink import RouteSocket\n"
        "with RouteSocket() as s:\n"
        "    s.dump_routes()"
    ),
    "aiofiles (import aiofiles, aiofiles.os)": "import aiofiles\nimport aiofiles.os",
    "aiohttp (import aiohttp.web: its server, and the client its package always brings)": (
        "import aiohttp.web"
    ),
}


LAYERS: dict[str, str] = {
    "the bare interpreter": "pass",
    "asyncio, ssl, json, logging": "import asyncio, ssl, json, logging",
    "aiohttp.web (the daemon's listeners; the client under kubernetes_asyncio)": (
        "import aiohttp.web"
    ),
    "kubernetes_asyncio (client and config: every generated model)": (
        "import kubernetes_asyncio.client, kubernetes_asyncio.config"
    ),
    "pydantic (the config models' package)": "import pydantic",
    "aiofiles": "import aiofiles",
    "watchfiles": "import watchfiles",
    "the rest of `import multusd.daemon`": DAEMON_IMPORTS,
}


def _child(code: str, site: str | None) -> tuple[float, float]:
    """(VmRSS, RssAnon) in MiB of a fresh interpreter that ran ``code`` and now waits."""
    prelude = f"import sys\nsys.path.append({site!r})\n" if site else ""
    script = f"{prelude}{code}\nimport sys\nsys.stdout.write('ready\\n')\nsys.stdout.flush()\n"
    script += "sys.stdin.read()\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        if proc.stdout.readline() != b"ready\n":
            raise RuntimeError(f"the child failed running {code!r}")
        return proc_mib("VmRSS", proc.pid), proc_mib("RssAnon", proc.pid)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait()


def _median(code: str, site: str | None) -> tuple[float, float]:
    samples = [_child(code, site) for _ in range(RUNS)]
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
    )


def rss(site: str | None) -> None:
    bare = _median("pass", site)
    daemon = _median(DAEMON_IMPORTS, site)
    print(f"python {sys.version.split()[0]}, {RUNS} runs each, medians, MiB")
    print(f"bare interpreter: VmRSS {bare[0]:.1f}, RssAnon {bare[1]:.1f}")
    print(
        f"{DAEMON_IMPORTS}: VmRSS {daemon[0]:.1f} (+{daemon[0] - bare[0]:.1f}), "
        f"RssAnon {daemon[1]:.1f} (+{daemon[1] - bare[1]:.1f})"
    )
    print()
    print("| what | over a bare interpreter: VmRSS / RssAnon | over the daemon's imports |")
    print("|---|---|---|")
    for label, code in ROWS.items():
        alone = _median(code, site)
        on_daemon = _median(f"{DAEMON_IMPORTS}\n{code}", site)
        print(
            f"| {label} | {alone[0] - bare[0]:+.1f} / {alone[1] - bare[1]:+.1f} "
            f"| {on_daemon[0] - daemon[0]:+.1f} / {on_daemon[1] - daemon[1]:+.1f} |"
        )


def layers() -> None:
    print(f"python {sys.version.split()[0]}, {RUNS} runs each, medians of RssAnon, MiB")
    print("| layer | adds | in all |")
    print("|---|---|---|")
    code, before = "", 0.0
    for label, more in LAYERS.items():
        code = f"{code}\n{more}"
        total = _median(code, None)[1]
        print(f"| {label} | {total - before:+.1f} | {total:.1f} |")
        before = total


PAYLOAD = b"x" * 2048  # a delegate cache entry is a few KiB
WRITES = 300
BURST = 32


async def _one_hop(path: Path) -> None:
    await asyncio.to_thread(atomic_write, path, PAYLOAD, sync_dir=False)


def _aiofiles_write(aiofiles: ModuleType) -> Callable[[Path], Awaitable[None]]:
    """``atomic_write(path, PAYLOAD, sync_dir=False)`` step by step, each step one aiofiles
    call (one thread hop): what "use aiofiles" would mean for the daemon's writes."""
    aos = aiofiles.os
    mkstemp, fchmod, fsync = aos.wrap(tempfile.mkstemp), aos.wrap(os.fchmod), aos.wrap(os.fsync)

    async def write(path: Path) -> None:
        await aos.makedirs(path.parent, mode=0o700, exist_ok=True)
        fd, tmp = await mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            async with aiofiles.open(fd, "wb") as handle:
                await handle.write(PAYLOAD)
                await handle.flush()
                await fchmod(handle.fileno(), 0o600)
                await fsync(handle.fileno())
            await aos.replace(tmp, path)
        except BaseException:
            await aos.remove(tmp)
            raise

    return write


async def _measure(write: Callable[[Path], Awaitable[None]], directory: Path) -> dict[str, Any]:
    for i in range(20):  # warm the executor's threads and the directory
        await write(directory / f"warm-{i}")
    latencies = []
    cpu0 = time.process_time()
    for i in range(WRITES):
        start = time.perf_counter()
        await write(directory / f"c-{i}")
        latencies.append(time.perf_counter() - start)
    cpu_us = (time.process_time() - cpu0) / WRITES * 1e6
    bursts = []
    for round_ in range(10):
        start = time.perf_counter()
        await asyncio.gather(*(write(directory / f"b-{round_}-{i}") for i in range(BURST)))
        bursts.append(time.perf_counter() - start)
    return {
        "one": Stats.of(latencies),
        "cpu_us": cpu_us,
        "burst_ms": statistics.median(bursts) * 1000,
    }


def write(site: str | None) -> None:
    if site:
        sys.path.append(site)
    import aiofiles
    import aiofiles.os

    ways = {
        "one `asyncio.to_thread(atomic_write, ...)` (ours)": _one_hop,
        "aiofiles, one hop per call (9 calls)": _aiofiles_write(aiofiles),
    }
    print(f"{WRITES} writes of {len(PAYLOAD)} bytes one at a time, then 10 bursts of {BURST}")
    print()
    print("| way | median µs | p99 µs | CPU µs per write | burst of 32, median ms |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="mdeps-", dir="/tmp") as tmp:
        for label, way in ways.items():
            directory = Path(tmp) / str(len(os.listdir(tmp)))
            got = asyncio.run(_measure(way, directory))
            one: Stats = got["one"]
            print(
                f"| {label} | {one.median_ms * 1000:.0f} | {one.p99_ms * 1000:.0f} "
                f"| {got['cpu_us']:.0f} | {got['burst_ms']:.1f} |"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.deps", description="What a library would cost the daemon."
    )
    parser.add_argument("what", choices=("rss", "layers", "write"), help="which figures to measure")
    parser.add_argument(
        "--site", default=None, help="a throwaway venv's site-packages, for the measured packages"
    )
    args = parser.parse_args(argv)
    if args.what == "rss":
        rss(args.site)
    elif args.what == "layers":
        layers()
    else:
        write(args.site)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
