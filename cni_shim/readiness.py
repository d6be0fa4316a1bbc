"""Is the daemon there? ``/readyz`` polling before ADD/CHECK/GC, one probe for STATUS and DEL.

ADD waits (a daemon that is starting up should delay pod creation, not fail it) but DEL does
not wait on readiness: a draining daemon answers ``/readyz`` with 500 after SIGTERM yet must
still tear pods down, so DEL only asks ``/healthz``. STATUS does not wait either: it *is*
the runtime's readiness question, polled every few seconds, so it asks ``/readyz`` once and
answers "not available" (code 50) at once rather than block the runtime's status loop for up
to a minute (upstream waits 60 s, then answers 999; docs/compatibility.md).

And is it coming back? A daemon that stops and keeps ``00-multus.conf`` for its replacement
(``keepConfigOnExit``) leaves a :class:`RestartNote` in its socket directory. A DEL that finds
no daemon reads it (:class:`DeleteWait`): while the restart window is open it waits for the
replacement like ADD does, then answers "try again later" (code 11) so that the runtime asks
again, and a DEL is never lost to a restart; with no note it is logged and dropped, as upstream
(DEL never fails); once the window has closed the daemon was uninstalled, and the DEL takes the
kept config away, so that the node goes back to its cluster network (docs/operations.md,
"Rolling restarts and uninstall").
"""

from __future__ import annotations

import posix
import time

from cni_shim import gojson, gopath, transport, wire
from cni_shim.errors import INTERNAL, NOT_AVAILABLE, TRY_AGAIN_LATER, CNIError
from cni_shim.log import timestamp

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

READYZ = "/readyz"
HEALTHZ = "/healthz"
POLL_INTERVAL = 0.1
"""Upstream ``APIReadyPollDuration``."""
POLL_TIMEOUT = 60.0
"""Upstream ``APIReadyPollTimeout``."""
PROBE_TIMEOUT = 2.0
"""Bound on one probe, so a daemon that accepts but never answers cannot stall the poll."""
TIMEOUT_ENV = "MULTUS_SHIM_READY_TIMEOUT"
"""TEST-ONLY override of :data:`POLL_TIMEOUT`, in seconds (tests use it to fail fast)."""

RESTART_NOTE = "multus.restarting"
"""The :class:`RestartNote`'s file name, in the daemon's socket directory."""
RESTART_WINDOW = 600.0
"""Seconds after its stop within which a daemon that kept its config is expected back: the
DaemonSet's next pod (scheduling, image pull, start-up waits). Past it, it was uninstalled."""

_NULL_BODY = b"null"  # upstream marshals its nil request


class Unreachable(CNIError):
    """No answer from the daemon: nothing listens on the socket, or the exchange broke off.

    A DEL that gets this may wait for a restarting daemon (:class:`DeleteWait`); a daemon's
    own answer, an error included, is never this.
    """

    __slots__ = ()


class GoneForGood(CNIError):
    """No daemon, and none expected back: the DEL is logged and succeeds (upstream)."""

    __slots__ = ()


def probe(socket_path: str, path: str, timeout: float | None = PROBE_TIMEOUT) -> None:
    """One ``POST <path>`` with body ``null``; raise unless the answer is 200."""
    status, _, body = transport.post(socket_path, path, _NULL_BODY, timeout=timeout)
    if status != 200:
        raise wire.decode_error_body(status, body)


def wait_until_ready(
    socket_path: str,
    timeout: float = POLL_TIMEOUT,
    interval: float = POLL_INTERVAL,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Poll ``/readyz`` immediately, then every ``interval``; give up after ``timeout``.

    Transport errors and non-200 answers both mean "not ready yet". A 404 means a daemon older
    than ``/readyz`` (every upstream release up to v4.3.0 and the seed commit): from then on
    ``/healthz`` is polled instead, so our shim works beside such a daemon during a roll
    (docs/compatibility.md). The failure text is apimachinery's ``timed out waiting for the
    condition`` followed by the last reason, which names the socket.
    """
    deadline = time.monotonic() + timeout
    path = READYZ
    last: Exception | None = None
    while True:
        remaining = deadline - time.monotonic()
        try:
            probe(socket_path, path, timeout=max(min(PROBE_TIMEOUT, remaining), 0.001))
        except transport.TransportError as exc:
            last = exc
        except wire.RequestFailed as exc:
            if path == READYZ and exc.status == 404:
                path = HEALTHZ  # once: an older daemon; ask its /healthz right away
                continue
            last = exc
        except CNIError as exc:
            last = exc
        else:
            return
        if time.monotonic() + interval > deadline:
            raise CNIError(INTERNAL, _timed_out(socket_path, path, last))
        sleep(interval)


def _timed_out(socket_path: str, path: str, last: Exception | None) -> str:
    text = "timed out waiting for the condition"
    if isinstance(last, transport.TransportError):
        return f"{text}: {last}"  # names the socket: ``dial unix <path>: connect: ...``
    if last is not None:
        return f"{text}: {path} on {socket_path}: {last}"
    return text


def check_now(socket_path: str) -> None:
    """One ``/healthz`` probe (no client timeout, as upstream), worded like upstream on failure
    (:class:`Unreachable`)."""
    try:
        probe(socket_path, HEALTHZ, timeout=None)
    except transport.TransportError as exc:
        raise Unreachable(
            INTERNAL, f"CheckAPIReadyNow: Daemon not reachable over socketfile: {exc}"
        ) from exc
    except CNIError as exc:
        raise Unreachable(
            INTERNAL, f"CheckAPIReadyNow: Daemon not reachable over socketfile: {exc}"
        ) from exc


def ready_now(socket_path: str) -> None:
    """One ``/readyz`` probe (``/healthz`` after a 404, as :func:`wait_until_ready`); raise a
    code-50 error (CNI "plugin not available") unless the daemon answers ready.

    Every way of not being ready is code 50 (no socket, refused, a probe that times out after
    :data:`PROBE_TIMEOUT`, a 500 from a daemon starting or draining): runtimes act on 50
    (containerd marks the node's network not ready) and ask again on their next poll.
    """
    path = READYZ
    while True:
        try:
            probe(socket_path, path, timeout=PROBE_TIMEOUT)
        except transport.TransportError as exc:
            raise CNIError(NOT_AVAILABLE, f"daemon not reachable: {exc}") from exc
        except CNIError as exc:
            if path == READYZ and isinstance(exc, wire.RequestFailed) and exc.status == 404:
                path = HEALTHZ  # an older daemon without /readyz
                continue
            raise CNIError(
                NOT_AVAILABLE, f"daemon not ready: {path} on {socket_path}: {exc}"
            ) from exc
        return


def timeout_from_env(environ: Mapping[str, str]) -> float:
    """:data:`POLL_TIMEOUT`, unless the test-only :data:`TIMEOUT_ENV` holds a valid number."""
    raw = environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return POLL_TIMEOUT
    return value if value >= 0 else POLL_TIMEOUT


# ------------------------------------------------------------------------------------------
# restarts


class RestartNote:
    """What a daemon that stopped and kept ``00-multus.conf`` tells the shims it left behind.

    ``stopped`` and ``until`` are Unix times: the stop, and the end of the restart window.
    ``paths`` are where the runtime may see the kept file (the daemon's view of it may not be
    the host's: the DaemonSet mounts the host's ``/etc/cni/net.d`` at ``/host/etc/cni/net.d``);
    ``identity`` (device, inode, size, mtime in ns) and ``sha256`` say which file it is. Every
    write of ``00-multus.conf`` makes a new inode (temp file + rename), so once a replacement
    daemon has written it, the note describes nothing any more: it is stale, and ignored.
    """

    __slots__ = ("identity", "paths", "sha256", "stopped", "until")

    def __init__(
        self,
        stopped: float,
        until: float,
        paths: list[str],
        identity: tuple[int, int, int, int],
        sha256: str,
    ) -> None:
        self.stopped = stopped
        self.until = until
        self.paths = paths
        self.identity = identity
        self.sha256 = sha256

    def encode(self) -> bytes:
        device, inode, size, mtime_ns = self.identity
        config = {
            "paths": self.paths,
            "device": device,
            "inode": inode,
            "size": size,
            "mtimeNs": mtime_ns,
            "sha256": self.sha256,
        }
        note = {"stopped": self.stopped, "until": self.until, "config": config}
        return gojson.dumps(note).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> RestartNote | None:
        """The note, or ``None`` for anything that is not one (a note we cannot read is no
        promise that a daemon comes back)."""
        try:
            obj = gojson.loads(data)
            config = obj["config"]
            stopped, until = float(obj["stopped"]), float(obj["until"])
            paths = config["paths"]
            identity = tuple(config[k] for k in ("device", "inode", "size", "mtimeNs"))
            sha256 = config["sha256"]
        except (ValueError, TypeError, KeyError, OverflowError):
            return None
        if not (
            isinstance(paths, list)
            and all(isinstance(p, str) and p.startswith("/") for p in paths)
            and all(isinstance(n, int) and not isinstance(n, bool) for n in identity)
            and isinstance(sha256, str)
        ):
            return None
        device, inode, size, mtime_ns = identity
        return cls(stopped, until, paths, (device, inode, size, mtime_ns), sha256)

    def kept_file(self) -> tuple[str | None, bool]:
        """``(path, seen)``: the path at which the kept file still is, if any, and whether any
        of :attr:`paths` holds a file at all (``True`` with no path: the file was rewritten
        since, so the note is stale)."""
        seen = False
        for path in self.paths:
            try:
                st = posix.stat(path)
            except OSError:
                continue
            seen = True
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == self.identity and (
                _sha256(path) == self.sha256
            ):
                return path, True
        return None, seen


def _sha256(path: str) -> str | None:
    import hashlib  # only here: a DEL that found no daemon

    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def read_note(socket_dir: str) -> RestartNote | None:
    """The socket directory's :class:`RestartNote`, ``None`` when there is none (or not one)."""
    try:
        with open(gopath.join(socket_dir, RESTART_NOTE), "rb") as handle:
            data = handle.read(65536)
    except OSError:
        return None
    return RestartNote.decode(data)


class DeleteWait:
    """What a DEL does when the daemon did not answer: wait for it, give up, or retire.

    One per DEL: the wait is bounded once (``timeout``, ADD's 60 s by default), however often
    the daemon goes away again while the DEL is re-sent.
    """

    def __init__(
        self,
        socket_dir: str,
        socket_path: str,
        timeout: float = POLL_TIMEOUT,
        *,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.socket_dir = socket_dir
        self.socket_path = socket_path
        self.timeout = timeout
        self._now = now
        self._sleep = sleep
        self._deadline: float | None = None

    def after(self, failure: CNIError) -> None:
        """Return once the daemon answers ``/healthz`` again (the caller sends the DEL again).

        Raises :class:`GoneForGood` when no daemon is expected back (no note, a stale one, or
        a closed window that left nothing to retire), and code 11 (try again later) when a
        restarting daemon is still away after the wait, or when this DEL has just retired the
        kept config of an uninstalled daemon: the runtime's next try goes to its cluster
        network instead (containerd reloads its config directory on the removal).
        """
        note = read_note(self.socket_dir)
        if note is None:
            raise GoneForGood(failure.code, failure.msg, failure.details)
        path, seen = note.kept_file()
        if path is None and seen:
            raise GoneForGood(
                failure.code,
                f"{failure.msg} (a daemon wrote the config since it left its restart note)",
            )
        if self._now() >= note.until:
            self._retire(failure, note)
        clock = time.monotonic()
        if self._deadline is None:
            self._deadline = clock + min(self.timeout, note.until - self._now())
        while clock < self._deadline:
            try:
                probe(
                    self.socket_path,
                    HEALTHZ,
                    timeout=max(min(PROBE_TIMEOUT, self._deadline - clock), 0.001),
                )
            except (transport.TransportError, CNIError):
                self._sleep(POLL_INTERVAL)
                clock = time.monotonic()
                continue
            return
        if self._now() >= note.until:
            self._retire(failure, note)
        raise CNIError(
            TRY_AGAIN_LATER,
            f"{failure.msg}: multusd is restarting (it stopped at {timestamp(note.stopped)} and is "
            f"expected back by {timestamp(note.until)}): try again later",
        )

    def _retire(self, failure: CNIError, note: RestartNote) -> None:
        """The window closed: the daemon was uninstalled. Remove the config it kept (only that
        very file: not one a daemon wrote since) and its note; always raises."""
        path, _ = note.kept_file()
        gone = (
            f"multusd has not been back since {timestamp(note.stopped)} "
            f"(its restart window closed at {timestamp(note.until)})"
        )
        if path is None:
            raise GoneForGood(failure.code, f"{failure.msg}: {gone}")
        error = _unlink(path)
        if error is not None:
            raise GoneForGood(failure.code, f"{failure.msg}: {gone}; cannot remove {path}: {error}")
        _unlink(gopath.join(self.socket_dir, RESTART_NOTE))
        raise CNIError(
            TRY_AGAIN_LATER,
            f"{failure.msg}: {gone}: removed {path}, so that the runtime uses its cluster network "
            "again: try again",
        )


def _unlink(path: str) -> OSError | None:
    try:
        posix.unlink(path)
    except OSError as exc:
        return exc
    return None
