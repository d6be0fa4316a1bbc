"""Shared benchmark plumbing: timing statistics, namespaces, a daemon process, report output."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.netns import pin_netns, unpin_netns

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PERFORMANCE_MD = REPO / "docs" / "performance.md"
PLUGIN_DIR = "/usr/lib/cni"


@dataclass(frozen=True)
class Stats:
    runs: int
    median_ms: float
    p99_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Stats:
        ms = sorted(s * 1000 for s in seconds)
        p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
        return cls(len(ms), statistics.median(ms), p99, statistics.fmean(ms))


def proc_mib(field: str = "VmRSS", pid: int | str = "self") -> float:
    """A memory field of ``/proc/<pid>/status`` in MiB (``VmRSS`` now, ``VmHWM`` the peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def run(cmd: Sequence[str], *, stdin: bytes = b"", env: dict[str, str] | None = None) -> bytes:
    done = subprocess.run(list(cmd), input=stdin, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stdout!r} {done.stderr!r}")
    return done.stdout


def short_id() -> str:
    return uuid.uuid4().hex[:8]


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


@contextlib.contextmanager
def netns(directory: Path) -> Iterator[str]:
    """A network namespace of our own pinned on a file in ``directory`` (under the benchmark's
    work dir), removed on exit; yields its path, the pod's ``CNI_NETNS``. Never ``ip netns
    add``: it creates and mounts ``/run/netns`` on a host that has none (``tests/netns.py``).
    Enter one with ``nsenter --net=PATH`` (``tests.e2e.harness.ip("-n", PATH, ...)``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"mb-{short_id()}"
    pin_netns(path)
    try:
        yield str(path)
    finally:
        unpin_netns(path)


@contextlib.asynccontextmanager
async def namespaces(directory: Path, count: int, *, at_once: int = 16) -> AsyncIterator[list[str]]:
    """``count`` namespaces as :func:`netns` makes them (``at_once`` pinned at a time, in
    worker threads so the event loop, and an emulator in it, keeps going); their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"mb-{short_id()}" for _ in range(count)]
    limit = asyncio.Semaphore(at_once)

    async def pin(path: Path) -> None:
        async with limit:
            await asyncio.to_thread(pin_netns, path)

    try:
        # All settled before any is unpinned: a failure must not leave one being pinned.
        made = await asyncio.gather(*(pin(p) for p in paths), return_exceptions=True)
        failed = next((m for m in made if isinstance(m, BaseException)), None)
        if failed is not None:
            raise failed
        yield [str(p) for p in paths]
    finally:
        await asyncio.gather(*(asyncio.to_thread(unpin_netns, p) for p in paths))


@contextlib.contextmanager
def daemon(directory: Path, config: dict[str, Any]) -> Iterator[str]:
    """A real ``multusd`` process; yields its socket directory."""
    path = directory / "daemon-config.json"
    path.write_text(json.dumps(config))
    sock = os.path.join(config["socketDir"], "multus.sock")
    log = (directory / "daemon.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "multusd", "--config", str(path)], stdout=log, stderr=log, cwd=REPO
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
                probe.connect(sock)
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("daemon did not start")
        yield config["socketDir"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


@dataclass(frozen=True)
class ShimCall:
    """One shim run: its exit status, how long it took, and what it printed."""

    returncode: int
    seconds: float
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def error(self, limit: int = 300) -> str:
        """What went wrong, short: the CNI error's ``msg`` (from ``ERRORED:`` on, where a Go
        shim repeats the whole request first), else the output's last line; the tail is kept,
        since wrapped errors end with their cause."""
        text = (self.stdout.strip() or self.stderr.strip()).decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):
            text = str(json.loads(text).get("msg", text))
        if "ERRORED: " in text:
            text = text.rsplit("ERRORED: ", 1)[-1]
        text = text.strip().splitlines()[-1] if text.strip() else f"exit {self.returncode}"
        return text if len(text) <= limit else "…" + text[-limit:]


async def call_shim(
    shim: str | Path, command: str, conf: bytes, env: dict[str, str], *, timeout: float = 120.0
) -> ShimCall:
    """Run a CNI shim (any: ours, upstream's) with ``conf`` on stdin; a run that outlives
    ``timeout`` is killed and reported as failed (exit -9) instead of hanging the benchmark."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        str(shim), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**env, "CNI_COMMAND": command},
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(conf), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ShimCall(
            -9, time.perf_counter() - start, b"", f"timed out after {timeout} s".encode()
        )
    return ShimCall(proc.returncode or 0, time.perf_counter() - start, out, err)


def save(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def publishing_options(parser: argparse.ArgumentParser, name: str) -> None:
    """``--republish`` and ``--no-publish``, for a benchmark that saves ``bench/results/NAME.json``
    and publishes a section of docs/performance.md."""
    parser.add_argument(
        "--republish",
        action="store_true",
        help=f"no run: table and chart again from bench/results/{name}.json",
    )
    parser.add_argument("--no-publish", action="store_true",
                        help="print the table and save the JSON, leave docs/ alone")  # fmt: skip


def saved(name: str) -> dict[str, Any]:
    """The last run's figures, ``bench/results/NAME.json`` (for ``--republish``)."""
    data: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return data


def report(name: str, markdown: str, data: dict[str, Any], *, section: str | None = None) -> None:
    """A benchmark's ending: its table into docs/performance.md (``section``, default ``name``),
    its raw figures into ``bench/results/NAME.json``, and the table on stdout."""
    publish(section or name, markdown)
    save(name, data)
    print(markdown)


def publish(section: str, markdown: str, doc: Path = PERFORMANCE_MD) -> None:
    """Replace the text between ``<!-- bench:NAME -->`` markers in ``doc`` (by default
    docs/performance.md; the interop check publishes into docs/compatibility.md)."""
    start, end = f"<!-- bench:{section} -->", f"<!-- /bench:{section} -->"
    text = doc.read_text()
    if start not in text:
        text += f"\n{start}\n{end}\n"
    head, rest = text.split(start, 1)
    _old, tail = rest.split(end, 1)
    doc.write_text(f"{head}{start}\n{markdown.strip()}\n{end}{tail}")


IMAGES = REPO / "docs" / "images"


@contextlib.contextmanager
def chart(name: str, *, rows: int = 1, cols: int = 1, size: tuple[float, float]) -> Iterator[Any]:
    """A matplotlib figure (headless) whose axes are yielded and which is written to
    ``docs/images/NAME.png`` on exit. matplotlib is imported here, only by benchmarks that draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(rows, cols, figsize=size, dpi=110)
    try:
        yield axes
        fig.tight_layout()
        IMAGES.mkdir(parents=True, exist_ok=True)
        fig.savefig(IMAGES / f"{name}.png")
    finally:
        plt.close(fig)
