"""Finding and running CNI plugin executables (libcni ``pkg/invoke``), without blocking the loop.

Everything above this module talks to plugins through :class:`PluginExecutor`, so tests and
callers can swap the process boundary (cni ``invoke.Exec``). :class:`SubprocessExecutor` is the
real one. It owns the process for its whole life: each plugin leads its own process group, and on
a timeout or a cancellation the *group* is terminated, killed if it lingers, and reaped before
control returns, because asyncio does none of that by itself and a leaked plugin (or a script's
``sleep`` child, which outlives a killed shell) keeps holding netns and IPAM state. How a group
is ended, and the daemon made the subreaper of its orphans, is :mod:`multusd.cni.reaper`. What
it keeps of a plugin's output is bounded, and a plugin printing more than a result's worth on
stdout is killed the same way (:mod:`multusd.cni.output`).

How long a plugin may run is the shorter of the executor's ``timeout`` and the deadline of the
request it runs for (:func:`plugin_deadline`, a context variable the server sets per request):
every plugin started on a request's behalf stops at that request's deadline, through any number
of layers, without each layer passing it on.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import logging
import os
import stat
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cni_shim import errors
from cni_shim.errors import CNIError
from cni_shim.gofmt import slice_str
from cni_shim.gojsonerr import loads_any
from cni_shim.gojsonerr import type_name as json_type_name
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text, exit_text
from multusd.cni.admission import MemoryAdmission
from multusd.cni.admission import shared as shared_admission
from multusd.cni.orphans import LIVE_PLUGINS
from multusd.cni.output import OutputTooLarge, PluginOutput
from multusd.cni.reaper import kill_and_reap
from multusd.timeline import note_part

log = logging.getLogger(__name__)

#: libcni's ``pluginErr`` builds ``types.Error{Msg: ...}`` without a code: Go's ``ErrUnknown``.
UNKNOWN = 0

#: Spec code for a plugin that ran past the executor's timeout. "Try again later" because the
#: plugin did not fail on its own: the runtime retrying is the useful reaction.
TIMEOUT_CODE = errors.TRY_AGAIN_LATER

#: Code for a plugin that printed more on stdout than the daemon reads (``output.MAX_STDOUT``).
#: Upstream has no such error (libcni reads whatever a plugin prints), so the code is ours: 999,
#: libcni's ``ErrInternal``. Not 6 (decoding failure): nothing was decoded, and the output may
#: well be valid; not 11 (try again later): the same plugin prints the same again, so a retry
#: only repeats it; no other spec code is about a plugin's output.
OUTPUT_CODE = errors.INTERNAL


_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "multusd_plugin_deadline", default=None
)


@contextlib.contextmanager
def plugin_deadline(at: float | None) -> Iterator[None]:
    """Plugins started inside this block (and its tasks) stop at ``at``, event-loop time.

    ``None`` lifts the deadline. A context variable, so concurrent requests each keep their own
    and tasks created inside inherit it.
    """
    token = _deadline.set(at)
    try:
        yield
    finally:
        _deadline.reset(token)


def current_deadline() -> float | None:
    """The deadline :func:`plugin_deadline` set for this context, or ``None``."""
    return _deadline.get()


@dataclass(slots=True)
class Starts:
    """How many plugins were started inside a :func:`counting_starts` block."""

    count: int = 0


_starts: contextvars.ContextVar[Starts | None] = contextvars.ContextVar(
    "multusd_plugin_starts", default=None
)


@contextlib.contextmanager
def counting_starts() -> Iterator[Starts]:
    """Count the plugins this block starts: an ADD whose delegate never got to run a plugin
    (refused for memory, or out of time before it) has nothing of it to roll back."""
    starts = Starts()
    token = _starts.set(starts)
    try:
        yield starts
    finally:
        _starts.reset(token)


class LibcniError(CNIError):
    """An error libcni raises itself as a plain Go ``error`` rather than a CNI error object.

    Upstream distinguishes the two (``errors.As(err, &types.Error)``): STATUS passes CNI error
    objects through unchanged and wraps only these. The code is ours (upstream has none).
    """

    __slots__ = ()


def prefixed(err: CNIError, prefix: str) -> CNIError:
    """``err`` with ``prefix`` in front of its message, keeping its code *and* its kind."""
    if isinstance(err, LibcniError):
        return LibcniError(err.code, prefix + err.msg, err.details)
    return err.with_prefix(prefix)


class PluginExecutor(Protocol):
    """The process boundary: run one plugin once and return its stdout.

    Implementations raise :class:`CNIError` for a failed plugin, decoded as libcni does, and
    must leave no process behind when they return or raise (cancellation included).
    """

    # ASYNC109: the deadline belongs to the executor, which must kill the plugin when it passes.
    async def execute(
        self,
        path: str,
        stdin: bytes,
        env: Mapping[str, str],
        *,
        timeout: float | None,  # noqa: ASYNC109
    ) -> bytes: ...


def find_plugin(plugin_type: str, paths: Sequence[str]) -> str:
    """The first ``<dir>/<type>`` that is a regular file (libcni ``FindInPath``).

    A stat per directory; cheap enough to call from the loop (the same lookup Go does inline).
    """
    if not plugin_type:
        raise LibcniError(errors.INVALID_NETWORK_CONFIG, "no plugin name provided")
    if "/" in plugin_type:
        raise LibcniError(errors.INVALID_NETWORK_CONFIG, f"invalid plugin name: {plugin_type}")
    if not paths:
        raise LibcniError(errors.INVALID_ENVIRONMENT, "no paths provided")
    for directory in paths:
        candidate = os.path.normpath(Path(directory, plugin_type))
        try:
            if stat.S_ISREG(Path(candidate).stat().st_mode):
                return candidate
        except OSError:
            continue
    raise LibcniError(
        errors.INVALID_NETWORK_CONFIG,
        f"failed to find plugin {go_quote(plugin_type)} in path {slice_str(paths)}",
    )


def plugin_error(reason: str, stdout: bytes, stderr: bytes) -> CNIError:
    """Decode a failed plugin's output exactly as libcni's ``pluginErr`` does.

    ``reason`` is Go's text for why the run failed (``exit status 1``, ``fork/exec ...``).
    """
    if not stdout:
        if not stderr:
            return CNIError(UNKNOWN, f"netplugin failed with no error message: {reason}")
        return CNIError(UNKNOWN, f"netplugin failed: {go_quote(stderr)}")
    try:
        return decode_error_object(stdout)
    except ValueError as exc:
        return CNIError(
            UNKNOWN,
            "netplugin failed but error parsing its diagnostic message "
            f"{go_quote(stdout)}: {exc!s}",
        )


_ERROR_FIELDS = ("code", "msg", "details")


def decode_error_object(stdout: bytes) -> CNIError:
    """``json.Unmarshal(stdout, &types.Error{})``: keys case-insensitive, unknown keys ignored.

    An object without ``msg`` still decodes (to an empty message), as in Go.
    """
    obj = loads_any(stdout)
    if not isinstance(obj, dict):
        raise ValueError(
            f"json: cannot unmarshal {json_type_name(obj)} into Go value of type types.Error"
        )
    fields: dict[str, Any] = {}
    for key, value in obj.items():
        name = key.lower()
        if name in _ERROR_FIELDS and value is not None:
            fields[name] = value
    code = fields.get("code", 0)
    if isinstance(code, bool) or not isinstance(code, int) or code < 0:
        raise ValueError(
            f"json: cannot unmarshal {json_type_name(code)} into Go struct field "
            "Error.code of type uint"
        )
    for name in ("msg", "details"):
        if not isinstance(fields.get(name, ""), str):
            raise ValueError(
                f"json: cannot unmarshal {json_type_name(fields[name])} into Go struct "
                f"field Error.{name} of type string"
            )
    return CNIError(code, fields.get("msg", ""), fields.get("details", ""))


def _chroot_into(directory: str) -> Callable[[], None]:
    def enter() -> None:  # runs in the forked child, before exec
        os.chroot(directory)
        os.chdir("/")

    return enter


Sleep = Callable[[float], Awaitable[Any]]


class SubprocessExecutor:
    """Runs plugins as asyncio subprocesses, optionally chrooted (``chrootDir``).

    The plugin path is resolved by the caller in the daemon's filesystem; with ``chroot_dir``
    only the child enters the chroot, so the same path must exist in both trees (as upstream).
    A spawn failing with ``ETXTBSY`` (the binary is still being written) is retried with a
    fresh process, ``busy_retries`` times, ``busy_delay`` seconds apart.
    """

    def __init__(
        self,
        chroot_dir: str | None = None,
        *,
        busy_retries: int = 5,
        busy_delay: float = 1.0,
        kill_grace: float = 1.0,
        sleep: Sleep = asyncio.sleep,
        admission: MemoryAdmission | None = None,
    ) -> None:
        self.chroot_dir = chroot_dir
        self.busy_retries = busy_retries
        self.busy_delay = busy_delay
        self.kill_grace = kill_grace
        self._sleep = sleep
        self.admission = admission if admission is not None else shared_admission()  # admission.py

    async def execute(
        self,
        path: str,
        stdin: bytes,
        env: Mapping[str, str],
        *,
        timeout: float | None,  # noqa: ASYNC109 - see PluginExecutor.execute
    ) -> bytes:
        urgent = env.get("CNI_COMMAND") == "DEL"  # a DEL gives memory back: it goes first
        async with self.admission.admitted(_deadline.get(), f"netplugin {path}", urgent=urgent):
            return await self._run(path, stdin, env, timeout)

    async def _run(
        self,
        path: str,
        stdin: bytes,
        env: Mapping[str, str],
        timeout: float | None,  # noqa: ASYNC109 - see PluginExecutor.execute
    ) -> bytes:
        limit, why = _limit(timeout, _deadline.get())
        if why and limit is not None and limit <= 0:
            raise CNIError(TIMEOUT_CODE, f"netplugin {path} not run: the request's deadline passed")
        stdin_fd = _stdin_file(stdin)
        name = os.path.basename(path)
        started = time.monotonic()
        try:
            proc = await LIVE_PLUGINS.spawned(self._spawn(path, env, stdin_fd))  # orphans.py
        finally:
            os.close(stdin_fd)  # the child holds its own copy
        spawned = time.monotonic()
        note_part(f"spawn[{name}]", spawned - started)
        if (starts := _starts.get()) is not None:
            starts.count += 1
        assert proc.stdout is not None and proc.stderr is not None  # pipes, from _spawn
        output = PluginOutput(proc.stdout, proc.stderr)  # read from now on (output.py)
        try:
            try:
                async with asyncio.timeout(limit):
                    await output.ended()
                    await proc.wait()
            except TimeoutError:
                await kill_and_reap(proc, self.kill_grace)
                raise CNIError(
                    TIMEOUT_CODE,
                    f"netplugin {path} did not finish within {limit:.3g}s{why} and was killed",
                ) from None
            except OutputTooLarge as exc:
                await kill_and_reap(proc, self.kill_grace)
                raise CNIError(
                    OUTPUT_CODE,
                    f"netplugin {path} printed more than {exc.cap} bytes on stdout (the most "
                    "the daemon reads of a plugin's result) and was killed",
                ) from None
            except BaseException:
                # Cancellation (or anything else): never leave the plugin running behind us.
                await kill_and_reap(proc, self.kill_grace)
                raise
        finally:
            await output.close()  # the pipes were read until the plugin was reaped
        note_part(f"run[{name}]", time.monotonic() - spawned)
        returncode = proc.returncode
        assert returncode is not None  # wait() returns only after the process exited
        stdout, stderr = output.stdout, output.stderr
        if returncode != 0:
            error = plugin_error(exit_text(returncode), stdout, stderr)
            if not stdout and output.stderr_dropped:  # the message quotes only stderr's end
                error = CNIError(error.code, error.msg, _tail_note(output))
            raise error
        if stderr:
            note = f" ({_tail_note(output)})" if output.stderr_dropped else ""
            log.debug("plugin %s stderr%s: %s", path, note, stderr.decode("utf-8", "replace"))
        return stdout

    async def _spawn(
        self, path: str, env: Mapping[str, str], stdin_fd: int
    ) -> asyncio.subprocess.Process:
        preexec = _chroot_into(self.chroot_dir) if self.chroot_dir is not None else None
        attempt = 0
        while True:
            try:
                return await asyncio.create_subprocess_exec(
                    path,
                    stdin=stdin_fd,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=dict(env),
                    preexec_fn=preexec,  # chroot must happen in the child only
                    close_fds=True,
                    # Its own session, so its own group: killed and reaped as one (reaper.py).
                    # (Not process_group=0: uvloop, our --loop option, does not take it.)
                    start_new_session=True,
                )
            except OSError as exc:
                if exc.errno == errno.ETXTBSY and attempt < self.busy_retries:
                    attempt += 1
                    log.debug("plugin %s is busy (ETXTBSY), retry %d", path, attempt)
                    await self._sleep(self.busy_delay)
                    continue
                reason = f"fork/exec {path}: {errno_text(exc.errno)}"
                raise plugin_error(reason, b"", b"") from exc
            except subprocess.SubprocessError as exc:
                # Only the chroot preexec hook can fail this way; the child's errno is lost.
                reason = f"fork/exec {path}: chroot {self.chroot_dir}: {exc}"
                raise plugin_error(reason, b"", b"") from exc


def _stdin_file(data: bytes) -> int:
    """The plugin's stdin: an in-memory file holding the whole config, read from the start.

    Not a pipe: a plugin that exits without reading stdin (a DEL that has nothing to do) makes
    a pipe write fail with EPIPE, and asyncio leaves that error in a future nobody awaits, which
    is logged as "Future exception was never retrieved" with a traceback. A file cannot break,
    needs no writer task on the loop, and holds any size of config (a pipe buffer holds 64 KiB).
    """
    fd = os.memfd_create("cni-stdin", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _tail_note(output: PluginOutput) -> str:
    return f"stderr: its last {len(output.stderr)} of {output.stderr_total} bytes"


def _limit(timeout: float | None, deadline: float | None) -> tuple[float | None, str]:
    """Seconds this run may take and, when the request's deadline is the tighter bound, why."""
    if deadline is None:
        return timeout, ""
    remaining = deadline - asyncio.get_running_loop().time()
    if timeout is None or remaining < timeout:
        return remaining, " (the request's deadline)"
    return timeout, ""
