"""Is the daemon there? ``/readyz`` polling before ADD/CHECK/GC, one probe for STATUS and DEL.

ADD waits (a daemon that is starting up should delay pod creation, not fail it) but DEL does
not wait on readiness: a draining daemon answers ``/readyz`` with 500 after SIGTERM yet must
still tear pods down, so DEL only asks ``/healthz`` once. STATUS does not wait either: it *is*
the runtime's readiness question, polled every few seconds, so it asks ``/readyz`` once and
answers "not available" (code 50) at once rather than block the runtime's status loop for up
to a minute (upstream waits 60 s, then answers 999; docs/compatibility.md).
"""

from __future__ import annotations

import time

from cni_shim import transport, wire
from cni_shim.errors import INTERNAL, NOT_AVAILABLE, CNIError

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

_NULL_BODY = b"null"  # upstream marshals its nil request


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
    """One ``/healthz`` probe (no client timeout, as upstream), worded like upstream on failure."""
    try:
        probe(socket_path, HEALTHZ, timeout=None)
    except transport.TransportError as exc:
        raise CNIError(
            INTERNAL, f"CheckAPIReadyNow: Daemon not reachable over socketfile: {exc}"
        ) from exc
    except CNIError as exc:
        raise CNIError(
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
