"""How aiohttp serves each of the daemon's listeners: the ``web.AppRunner`` options they share.

aiohttp's defaults suit a web site, not a node daemon. A handler keeps running after its client
is gone, a connection may stay idle (or send half a header) for an hour, a body is decompressed
before anyone asked for it, every request is written to an access log, and a malformed request
prints a traceback. :func:`runner_options` turns each of those off, through the runner's
keyword arguments (aiohttp hands them to its ``web.Server`` and to every connection's protocol):

* ``handler_cancellation``: a closed connection cancels its handler, which cancels the request
  (its plugins are killed, an ADD rolls back); that is how the runtime killing the shim reaches
  the daemon;
* ``keepalive_timeout`` is the header timeout: aiohttp arms it when a connection opens and closes
  the connection if no whole request head has arrived by then (an idle and a slow-header
  timeout in one; every answer closes its connection, so it never times a second request);
* ``auto_decompress=False``: a body is taken as sent, as Go's server takes it, so a body with
  ``Content-Encoding`` is the undecodable JSON it is (docs/compatibility.md, row 38);
* ``lingering_time``: an answer given before its body was read (too large, too slow) is followed
  by this long reading and dropping what still arrives before the connection closes: closing a
  socket with unread data resets it, and the client would lose the answer. Go's server waits as
  long;
* no access log, and the protocol's errors in one line (:class:`OneLineLogger`);
* ``shutdown_timeout``: what ``runner.cleanup()`` gives a request still running before it is
  cancelled, and its cancellation after (``server.listener``).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

LINGER = 0.5
"""Seconds a connection answered before its body was read is drained before it closes."""
MIN_SHUTDOWN_TIMEOUT = 0.01
"""aiohttp reads a shutdown timeout of 0 as "no limit": the least one given is this."""


class OneLineLogger(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's protocol logger, with every exception reduced to its reason on the same line.

    aiohttp logs a malformed request (bad HTTP, a broken chunk, TLS on the socket) with
    ``logger.exception``, or ``logger.debug`` with the exception attached: a traceback per
    request, which a fuzzer or a confused client turns into a flood. The reason is all an
    operator needs, and a warning is as loud as hostile input deserves.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc_info = kwargs.pop("exc_info", None)
        error: BaseException | None = None
        if isinstance(exc_info, BaseException):
            error = exc_info
        elif isinstance(exc_info, tuple):
            error = exc_info[1]
        elif exc_info:
            error = sys.exc_info()[1]
        if exc_info:
            reason = f"{type(error).__name__}: {error}" if error is not None else "unknown"
            msg, args = f"{msg}: %s", (*args, " ".join(reason.split()))
            level = min(level, logging.WARNING)
        super().log(level, msg, *args, **kwargs)


def runner_options(*, header_timeout: float, shutdown_timeout: float) -> dict[str, Any]:
    """The keyword arguments of every ``web.AppRunner`` the daemon runs (the module docstring
    says why each)."""
    return {
        "handle_signals": False,
        "access_log": None,
        "handler_cancellation": True,
        "keepalive_timeout": header_timeout,
        "auto_decompress": False,
        "lingering_time": LINGER,
        "logger": OneLineLogger(logging.getLogger("aiohttp.server"), {}),
        "shutdown_timeout": max(shutdown_timeout, MIN_SHUTDOWN_TIMEOUT),
    }
