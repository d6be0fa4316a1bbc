"""Looking inside the running daemon: what upstream's ``enablePprof`` gives Go users (Go's
``net/http/pprof`` on the metrics port), in Python's terms, from the standard library only.

* :func:`capture_tasks`, :func:`capture_threads`, :func:`render_stacks`: every task of the event
  loop with the chain of coroutines it is suspended in, and every thread's stack (Go's
  ``goroutine?debug=2``);
* :class:`CpuProfiler`: ``cProfile`` around an ``await asyncio.sleep(seconds)``, one at a time
  (Go's ``profile?seconds=N``);
* :func:`heap_report`: the largest allocation sites through ``tracemalloc`` (Go's ``heap``).

What each page says, what it costs and why it must not be exposed:
docs/operations.md, "Profiling".

What runs on the event loop is cheap and reads no file: capturing the frames, enabling and
disabling the profiler. What costs (source lines, read per report and not kept; the profile's
table; the heap snapshot) runs in a worker thread, by the caller (``multusd.metrics``).

``cProfile`` hooks the thread that enables it (``sys.setprofile`` semantics, Python 3.11): enabled
from a coroutine it profiles the event loop thread, which is where the daemon's Python code runs;
worker threads (file I/O, netns work, the log writer) are not seen. From Python 3.12 it hooks
``sys.monitoring``, which reports every thread, their calls mixed into one profile.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import inspect
import io
import marshal
import os
import pstats
import sys
import threading
import time
import tokenize
import tracemalloc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import FrameType

Frame = tuple[str, int, str]
"""A frame as shown: file, line, function (its qualified name)."""

__all__ = [
    "DEFAULT_HEAP_LIMIT",
    "DEFAULT_PROFILE_LIMIT",
    "DEFAULT_PROFILE_SECONDS",
    "HEAP_GROUPS",
    "MAX_FRAMES",
    "MAX_LIMIT",
    "MAX_PROFILE_SECONDS",
    "PROFILE_SORTS",
    "BadQuery",
    "CpuProfiler",
    "ProfilerBusy",
    "capture_tasks",
    "capture_threads",
    "choice",
    "dump_profile",
    "heap_report",
    "integer",
    "number",
    "render_profile",
    "render_stacks",
]

DEFAULT_PROFILE_SECONDS = 30.0
"""Go's default for ``/debug/pprof/profile``."""
MAX_PROFILE_SECONDS = 300.0
"""The longest profile one request may ask for: the profiler slows the loop while it runs."""
DEFAULT_PROFILE_LIMIT = 50
"""Rows of the profile's text (the functions with the most cumulative time)."""
PROFILE_SORTS = ("cumulative", "tottime", "ncalls")
DEFAULT_HEAP_LIMIT = 25
HEAP_GROUPS = ("lineno", "traceback", "filename")
MAX_LIMIT = 1000
"""The most rows a profile or a heap report gives."""
MAX_FRAMES = 64
"""Frames shown per task or thread (the innermost ones), and the most a heap trace may keep."""
_HEAP_NOISE = (
    tracemalloc.Filter(False, tracemalloc.__file__),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
    tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
    tracemalloc.Filter(False, "<unknown>"),
)


class BadQuery(ValueError):
    """A query parameter out of its range: the request's fault (HTTP 400)."""


class ProfilerBusy(RuntimeError):
    """A CPU profile is already being taken (HTTP 409); ``retry_after``: seconds until it ends."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def number(query: Mapping[str, str], name: str, default: float, high: float) -> float:
    """``query[name]`` as a number in ``(0, high]``; ``default`` when absent."""
    text = query.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadQuery(f"{name}={text!r}: not a number") from None
    if not 0 < value <= high:  # NaN fails this too
        raise BadQuery(f"{name}={text!r}: must be greater than 0 and at most {high:g}")
    return value


def integer(query: Mapping[str, str], name: str, default: int, high: int) -> int:
    """``query[name]`` as an integer in ``[1, high]``; ``default`` when absent."""
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"{name}={text!r}: not an integer") from None
    if not 1 <= value <= high:
        raise BadQuery(f"{name}={text!r}: must be from 1 to {high}")
    return value


def choice(query: Mapping[str, str], name: str, choices: Iterable[str]) -> str:
    """``query[name]``, one of ``choices`` (the first by default)."""
    allowed = tuple(choices)
    text = query.get(name, allowed[0])
    if text not in allowed:
        raise BadQuery(f"{name}={text!r}: must be one of {', '.join(allowed)}")
    return text


# --- tasks and threads ------------------------------------------------------------------------


class _Sources:
    """Source lines, read for one report and dropped with it (``linecache`` would keep every file
    it is asked about for the life of the daemon)."""

    def __init__(self) -> None:
        self._files: dict[str, list[str]] = {}

    def line(self, filename: str, lineno: int) -> str:
        lines = self._files.get(filename)
        if lines is None:
            try:
                with tokenize.open(filename) as file:  # the file's own encoding
                    lines = file.readlines()
            except (OSError, SyntaxError, ValueError):  # <frozen ...>, gone, not Python
                lines = []
            self._files[filename] = lines
        return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


@dataclass(frozen=True)
class Stack:
    """One task's or thread's stack, outermost frame first, with its source lines not yet read
    (reading them touches files: :func:`render_stacks` does, in a worker thread)."""

    title: str
    frames: list[Frame]
    note: str = ""


def _frame(frame: FrameType) -> Frame:
    code = frame.f_code
    return code.co_filename, frame.f_lineno, code.co_qualname


_BEHIND = frozenset({"async_generator_asend", "async_generator_athrow", "FutureIter"})
"""Awaitables with no frame that show what is behind them only to the garbage collector:
an ``async for`` step (its async generator), ``await future`` (the future, or task)."""


def _behind(node: object) -> object:
    """What ``node`` stands for, when it is one of :data:`_BEHIND`; else ``None``."""
    if type(node).__name__ not in _BEHIND:
        return None
    for referent in gc.get_referents(node):  # one object's references: cheap
        if inspect.isasyncgen(referent) or isinstance(referent, asyncio.Future):
            return referent
    return None


def _await_chain(coro: object) -> tuple[list[Frame], str]:
    """The frames of ``coro`` and of what it awaits, down to the innermost (a task's
    ``get_stack()`` gives only the outermost coroutine's frame); and what the innermost
    awaits, when that is not a coroutine (a future, a task)."""
    frames: list[Frame] = []
    node: object = coro
    for _ in range(4 * MAX_FRAMES):  # a chain is finite; this bounds a cycle all the same
        if node is None:
            return frames[-MAX_FRAMES:], ""
        if isinstance(node, asyncio.Task):
            return frames[-MAX_FRAMES:], f"awaiting task {node.get_name()!r}"
        if isinstance(node, asyncio.Future):
            return frames[-MAX_FRAMES:], "awaiting a future"
        frame = next(
            (f for a in ("cr_frame", "gi_frame", "ag_frame") if (f := getattr(node, a, None))),
            None,
        )
        if frame is None:
            behind = _behind(node)
            if behind is None:
                return frames[-MAX_FRAMES:], f"awaiting {type(node).__qualname__}"
            node = behind
            continue
        frames.append(_frame(frame))
        node = next(
            (n for a in ("cr_await", "gi_yieldfrom", "ag_await") if (n := getattr(node, a, None))),
            None,
        )
    return frames[-MAX_FRAMES:], "deeper awaits left out"


def capture_tasks(loop: asyncio.AbstractEventLoop) -> list[Stack]:
    """Every task of ``loop``, by name; to be called on the loop itself (cheap: no file read)."""
    current = asyncio.current_task(loop)
    stacks = []
    for task in sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name()):
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", type(coro).__name__)
        state = "cancelling" if task.cancelling() else "pending"
        title = f"task {task.get_name()!r} ({state}): {name}"
        if task is current:
            stacks.append(Stack(title, [], "running: this request, on the loop's thread below"))
            continue
        frames, note = _await_chain(coro)
        stacks.append(Stack(title, frames, note))
    return stacks


def capture_threads() -> list[Stack]:
    """Every thread's stack, innermost :data:`MAX_FRAMES` frames (``sys._current_frames``)."""
    threads = {thread.ident: thread for thread in threading.enumerate()}
    stacks = []
    for ident, top in sorted(sys._current_frames().items()):
        thread = threads.get(ident)
        if thread is None:
            title = f"thread {ident} (not started by threading)"
        else:
            kind = ", daemon" if thread.daemon else ""
            title = f"thread {thread.name!r} (native id {thread.native_id}{kind})"
        frames: list[Frame] = []
        frame: FrameType | None = top
        while frame is not None and len(frames) < MAX_FRAMES:
            frames.append(_frame(frame))
            frame = frame.f_back
        frames.reverse()
        stacks.append(Stack(title, frames))
    return stacks


def render_stacks(tasks: list[Stack], threads: list[Stack]) -> str:
    """The text of ``/debug/tasks`` (reads source lines: call it in a worker thread)."""
    out, sources = io.StringIO(), _Sources()
    out.write(f"multusd pid {os.getpid()}: {len(tasks)} tasks on the event loop\n\n")
    for stack in tasks:
        _write_stack(out, stack, sources)
    out.write(f"{len(threads)} thread(s)\n\n")
    for stack in threads:
        _write_stack(out, stack, sources)
    return out.getvalue()


def _write_stack(out: io.StringIO, stack: Stack, sources: _Sources) -> None:
    out.write(stack.title + "\n")
    for filename, lineno, name in stack.frames:  # as a Python traceback
        out.write(f'  File "{filename}", line {lineno}, in {name}\n')
        line = sources.line(filename, lineno)
        if line:
            out.write(f"    {line}\n")
    if stack.note:
        out.write(f"  ({stack.note})\n")
    out.write("\n")


# --- CPU ----------------------------------------------------------------------------------------


_PROFILED = (
    "the event loop thread" if sys.version_info < (3, 12) else "every thread (sys.monitoring)"
)


class CpuProfiler:
    """One ``cProfile`` at a time, around a sleep of the profiling request (the loop serves on)."""

    def __init__(self) -> None:
        self._until: float | None = None

    async def profile(self, seconds: float) -> cProfile.Profile:
        """Profile the calling thread (the event loop's) for ``seconds``; ``ProfilerBusy`` while
        another profile runs. Cancelled (the client left, the daemon stops), it stops at once."""
        if self._until is not None:
            left = max(self._until - time.monotonic(), 0.0)
            raise ProfilerBusy(
                f"a CPU profile is already being taken, {left:.0f}s left: "
                "one at a time, try again when it ends",
                left,
            )
        self._until = time.monotonic() + seconds
        try:
            profiler = cProfile.Profile()
            try:
                profiler.enable()
            except ValueError as exc:  # 3.12+: sys.monitoring's profiler slot is taken
                raise ProfilerBusy(f"cannot start the CPU profiler: {exc}", seconds) from None
            try:
                await asyncio.sleep(seconds)
            finally:
                profiler.disable()
        finally:
            self._until = None
        return profiler


def render_profile(
    profiler: cProfile.Profile, *, seconds: float, limit: int, sort: str = "cumulative"
) -> str:
    """The profile as ``pstats`` text, ``limit`` rows by ``sort`` (call it in a worker thread)."""
    out = io.StringIO()
    out.write(
        f"multusd pid {os.getpid()}: CPU profile of {_PROFILED} for {seconds:g}s "
        f"(cProfile), sorted by {sort}, the first {limit} functions\n"
    )
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(sort).print_stats(limit)
    return out.getvalue()


def dump_profile(profiler: cProfile.Profile) -> bytes:
    """The profile as a ``.pstats`` file (``Profile.dump_stats``' content), for ``python -m
    pstats`` or snakeviz (call it in a worker thread)."""
    profiler.create_stats()
    return marshal.dumps(profiler.stats)


# --- heap ----------------------------------------------------------------------------------------


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if abs(count) < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def heap_report(*, limit: int, group_by: str, frames: int, stop: bool = False) -> str:
    """The text of ``/debug/heap``: the ``limit`` largest allocation sites grouped by
    ``group_by``. Starts ``tracemalloc`` (keeping ``frames`` frames per allocation) when it is
    not tracing, and says so; ``stop``: stop tracing after the report, freeing its memory.
    Blocks for the snapshot: call it in a worker thread."""
    out, sources = io.StringIO(), _Sources()
    out.write(f"multusd pid {os.getpid()}: Python memory allocations (tracemalloc)\n")
    if not tracemalloc.is_tracing():
        tracemalloc.start(frames)
        out.write(
            f"tracemalloc was not tracing: started now, keeping {frames} frame(s) per "
            "allocation. Only what is allocated from now on is counted: ask again later. It "
            "costs memory and CPU on every allocation until stopped (?stop=1).\n"
        )
    else:
        out.write(
            f"tracing, keeping {tracemalloc.get_traceback_limit()} frame(s) per allocation "
            "(set when tracing started)\n"
        )
    if group_by == "traceback" and tracemalloc.get_traceback_limit() == 1:
        out.write(
            "one frame per allocation: grouping by traceback is grouping by line. For more, "
            "stop tracing (?stop=1) and start it again with ?frames=N\n"
        )
    snapshot = tracemalloc.take_snapshot().filter_traces(_HEAP_NOISE)
    current, peak = tracemalloc.get_traced_memory()
    overhead = tracemalloc.get_tracemalloc_memory()
    if stop:
        tracemalloc.stop()
    statistics = snapshot.statistics(group_by)
    out.write(
        f"traced now {_size(current)}, peak {_size(peak)}; tracemalloc's own memory "
        f"{_size(overhead)}\n"
        f"the {min(limit, len(statistics))} largest of {len(statistics)} allocation sites, "
        f"grouped by {group_by}:\n\n"
    )
    for rank, stat in enumerate(statistics[:limit], 1):
        average = stat.size / stat.count if stat.count else 0
        out.write(
            f"#{rank}: {_size(stat.size)} in {stat.count} blocks (average {_size(average)})\n"
        )
        # oldest frame first, as a traceback reads; by lineno or filename, the one frame kept
        for frame in stat.traceback if group_by == "traceback" else stat.traceback[-1:]:
            if group_by == "filename":
                out.write(f"  {frame.filename}\n")
                continue
            out.write(f"  {frame.filename}:{frame.lineno}\n")
            line = sources.line(frame.filename, frame.lineno)
            if line:
                out.write(f"    {line}\n")
        out.write("\n")
    if stop:
        out.write("tracemalloc stopped: its traces are freed; the next request starts it again\n")
    return out.getvalue()
