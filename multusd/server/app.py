"""The aiohttp application: routes, body limit, and upstream's 404/405 shapes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from cni_shim.errors import CNIError
from multusd.errors import INTERNAL
from multusd.metrics import Recorder
from multusd.server.handlers import Handlers, error_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def upstream_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer routing errors as Go's mux does, and oversized bodies with a CNI error."""
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


def build_app(
    handlers: Handlers, *, max_request_bytes: int, metrics: Recorder | None = None
) -> web.Application:
    # The metrics middleware sits outside upstream_errors so it counts the final status.
    middlewares: list[Middleware] = [(metrics or Recorder()).middleware, upstream_errors]
    app = web.Application(client_max_size=max_request_bytes, middlewares=middlewares)
    app.router.add_post("/cni", handlers.cni)
    app.router.add_post("/delegate", handlers.delegate)
    for path, handler in (("/healthz", handlers.healthz), ("/readyz", handlers.readyz)):
        app.router.add_get(path, handler, allow_head=False)
        app.router.add_post(path, handler)
    return app
