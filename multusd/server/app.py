"""The daemon's HTTP API: routes, upstream's 404/405 shapes, and what escapes a handler.

Upstream's server is Go's ``net/http`` with a mux: an unknown path is a 404 with no body, a
known path with the wrong method ``405 Method not allowed``; a body over ``maxRequestBytes`` is
a 413 here, with a CNI error object. No request ever gets an HTTP 500: anything that escapes a
handler is a CNI error object, logged once with its traceback (a bug), while hostile input is
answered with one log line (``server.handlers``). Every answered request is counted under
upstream's metric labels (``multusd.metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cni_shim.errors import DECODING_FAILURE, INTERNAL, CNIError
from multusd.errors import internal
from multusd.httpserver import BadRequest, BodyTooLarge, Request, Response
from multusd.metrics import Recorder, handler_label
from multusd.server.handlers import Handlers, error_response

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]

METHOD_NOT_ALLOWED = Response.text("Method not allowed\n", 405)


def bad_http(error: BadRequest) -> Response:
    """What a request that is not even HTTP gets: a CNI error object, with the 4xx it earned."""
    return error_response(
        CNIError(DECODING_FAILURE, f"bad HTTP request: {error.text}"), error.status
    )


@dataclass
class App:
    """The routes of one listener, and the rules every request of it is answered by."""

    routes: dict[str, dict[str, Handler]]
    metrics: Recorder = field(default_factory=Recorder)

    async def serve(self, request: Request) -> Response:
        response = await self._answer(request)
        self.metrics.count_request(handler_label(request.path), request.method, response.status)
        return response

    async def _answer(self, request: Request) -> Response:
        methods = self.routes.get(request.path)
        if methods is None:
            return Response(404)
        handler = methods.get(request.method)
        if handler is None:
            return METHOD_NOT_ALLOWED
        try:
            return await handler(request)
        except BodyTooLarge as exc:
            return error_response(CNIError(INTERNAL, f"request body too large: {exc.text}"), 413)
        except BadRequest as exc:
            return bad_http(exc)
        except Exception as exc:  # a bug: keep the traceback, answer as a CNI error
            log.exception("%s %s failed unexpectedly", request.method, request.path)
            return error_response(internal(f"internal error: {exc!r}"))


def build_app(handlers: Handlers, *, metrics: Recorder | None = None) -> App:
    """The unix socket's API: ``/cni``, ``/delegate`` and the probes (GET or POST, as upstream's
    shims send; no HEAD)."""
    probe: dict[str, Handler] = {"GET": handlers.healthz, "POST": handlers.healthz}
    ready: dict[str, Handler] = {"GET": handlers.readyz, "POST": handlers.readyz}
    return App(
        routes={
            "/cni": {"POST": handlers.cni},
            "/delegate": {"POST": handlers.delegate},
            "/healthz": probe,
            "/readyz": ready,
        },
        metrics=metrics or Recorder(),
    )
