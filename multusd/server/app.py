"""The daemon's HTTP API as an aiohttp application: routes, upstream's 404/405 shapes, what
escapes a handler, one request per connection, and the request count.

Upstream's server is Go's ``net/http`` with a mux: an unknown path is a 404 with no body, a
known path with the wrong method ``405 Method not allowed``; a body over ``maxRequestBytes`` is
a 413 here, with a CNI error object. No request ever gets an HTTP 500: anything that escapes a
handler is a CNI error object, logged once with its traceback (a bug), while hostile input is
answered with one log line (``server.handlers``). Every answered request is counted under
upstream's metric labels (``multusd.metrics``), with the status it was finally answered with.

Requests aiohttp cannot even parse never reach the application: aiohttp answers them itself
(400 with its own text, docs/compatibility.md, row 47). How aiohttp treats the connections
(cancellation, timeouts, logging) is the runner's business (``server.runner``).
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
    except web.HTTPRequestEntityTooLarge:
        limit = request.client_max_size
        declared = request.content_length
        size = f"{declared} bytes" if declared is not None else f"more than {limit} bytes"
        text = f"request body too large: {size}, the limit is {limit} (maxRequestBytes)"
        return error_response(CNIError(INTERNAL, text), 413)
    except web.HTTPException as exc:
        status = exc.status if 400 <= exc.status < 500 else 400
        return error_response(internal(exc.text or exc.reason), status)
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


def api_middlewares(metrics: Recorder | None = None) -> list[Middleware]:
    """The middlewares of every listener of the API; the count sits outside
    :func:`upstream_errors`, so it sees the final status."""
    return [(metrics or Recorder()).middleware, one_request_per_connection, upstream_errors]


def build_app(handlers: Handlers, *, metrics: Recorder | None = None) -> web.Application:
    """The unix socket's API: ``/cni``, ``/delegate`` and the probes (GET or POST, as upstream's
    shims send; no HEAD)."""
    app = web.Application(
        client_max_size=handlers.limits.max_request_bytes, middlewares=api_middlewares(metrics)
    )
    app.router.add_post("/cni", handlers.cni)
    app.router.add_post("/delegate", handlers.delegate)
    for path, handler in (("/healthz", handlers.healthz), ("/readyz", handlers.readyz)):
        app.router.add_get(path, handler, allow_head=False)
        app.router.add_post(path, handler)
    app.on_startup.append(_adopt_orphans)

    async def cancel_requests(_app: web.Application) -> None:
        """Shutdown, once the socket stopped accepting and before the runner waits for the
        handlers (``shutdown_timeout``): every request is cancelled through its queue (plugins
        killed, ADDs rolled back), which makes that wait short."""
        await handlers.cancel_all()

    app.on_shutdown.append(cancel_requests)
    return app


async def _adopt_orphans(_app: web.Application) -> None:
    """Serving plugins: become their descendants' subreaper (``reaper.adopt_orphans``)."""
    if not adopt_orphans():
        log.warning("could not become a child subreaper: a killed plugin's children go to PID 1")
