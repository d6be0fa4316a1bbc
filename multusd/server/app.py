"""The aiohttp application: routes, body limit, upstream's 404/405 shapes, and how the HTTP
server treats its connections.

aiohttp's defaults suit a web site, not a node daemon: a handler keeps running after its client
is gone, a connection may stay idle (or send half a header) for an hour, and a malformed
request prints a traceback. Here (through ``handler_args``, which aiohttp passes to every
connection's protocol):

* ``handler_cancellation``: a closed connection cancels its handler, which cancels the request
  (its plugins are killed, an ADD rolls back); that is how the runtime killing the shim reaches
  the daemon;
* ``keepalive_timeout`` is ``requestHeaderTimeoutSeconds``: aiohttp arms it when a connection
  opens and after each answer, and closes the connection if no complete header has arrived by
  then -- an idle and a slow-header timeout in one;
* the protocol's logger turns aiohttp's "Error handling request" tracebacks into one line.

No request ever gets an HTTP 500: anything that escapes a handler is a CNI error object.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from cni_shim.errors import INTERNAL, CNIError
from multusd.cni.reaper import adopt_orphans
from multusd.errors import internal
from multusd.metrics import Recorder
from multusd.server.handlers import Handlers, error_response
from multusd.server.listener import protocol_options

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def upstream_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer routing errors as Go's mux does, oversized bodies with a CNI error, and anything
    else that escapes a handler as a CNI error object (never aiohttp's HTTP 500)."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed:
        return web.Response(status=405, text="Method not allowed\n")
    except web.HTTPNotFound:
        return web.Response(status=404)
    except web.HTTPRequestEntityTooLarge as exc:
        response = error_response(
            CNIError(INTERNAL, f"request body too large: {exc.text or ''}".strip())
        )
        response.set_status(413)
        return response
    except web.HTTPException as exc:
        response = error_response(internal(exc.text or exc.reason))
        if 400 <= exc.status < 500:
            response.set_status(exc.status)
        return response
    except Exception as exc:  # a bug: keep the traceback, answer as a CNI error
        log.exception("%s %s failed unexpectedly", request.method, request.path)
        return error_response(internal(f"internal error: {exc!r}"))


@web.middleware
async def one_request_per_connection(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer ends its connection (``Connection: close``), as upstream's server, which
    disables keep-alive: a connection is one request, so the intake's slot for it ends with
    it (``server.intake``), and a client that shut down its write side gets its answer."""
    response = await handler(request)
    response.force_close()
    return response


def build_app(
    handlers: Handlers, *, max_request_bytes: int, metrics: Recorder | None = None
) -> web.Application:
    # The metrics middleware sits outside upstream_errors so it counts the final status.
    middlewares: list[Middleware] = [
        (metrics or Recorder()).middleware,
        one_request_per_connection,
        upstream_errors,
    ]
    app = web.Application(
        client_max_size=max_request_bytes,
        middlewares=middlewares,
        handler_args=protocol_options(handlers),
    )
    app.router.add_post("/cni", handlers.cni)
    app.router.add_post("/delegate", handlers.delegate)
    for path, handler in (("/healthz", handlers.healthz), ("/readyz", handlers.readyz)):
        app.router.add_get(path, handler, allow_head=False)
        app.router.add_post(path, handler)
    app.on_startup.append(_adopt_orphans)
    # aiohttp runs on_shutdown after it stopped listening and before it waits (up to its
    # shutdown_timeout, 60 s) for handlers: cancelling here makes that wait short.
    app.on_shutdown.append(lambda _app: handlers.cancel_all())
    return app


async def _adopt_orphans(app: web.Application) -> None:
    """Serving plugins: become their descendants' subreaper (``reaper.adopt_orphans``)."""
    if not adopt_orphans():
        log.warning("could not become a child subreaper: a killed plugin's children go to PID 1")
