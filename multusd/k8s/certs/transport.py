"""A renewed client certificate put to use by live clients, caches and watches untouched.

kubernetes_asyncio builds one SSL context, from files, when its ``ApiClient`` is made, and its
aiohttp connector presents that context's certificate on every connection for the client's
life. client-go instead re-reads the certificate every few seconds and, when it changed, closes
every connection (``connDialer.CloseAll``): requests in flight fail, and every informer re-lists
or re-watches.

We do neither. :class:`RotatingCredentials` is the ``ApiConfig.certificate`` of a per-node
client (``multusd.k8s.apiconfig.ClientCertificate``): every ``KubeClient`` made from that config
attaches to it, and at each renewal each attached client gets a new transport (aiohttp session
and connector) whose SSL context presents the new pair, built in a worker thread. New requests
take the new transport; what was in flight on the old one, watches included, runs to its end
there. The old transport is closed at the next renewal (a certificate lifetime later: by then
every watch of its time has long been re-opened, client-go's watches last 5-10 minutes) or when
the credentials are closed, so a retired one never outlives its successor's successor.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.rest import RESTClientObject

from multusd.k8s.certs.keys import client_ssl_context

__all__ = ["PreparedTransport", "RotatingCredentials"]

log = logging.getLogger(__name__)

_READ_BUFSIZE = 2**21
"""kubernetes_asyncio's: a watch event of a large object must fit aiohttp's read buffer."""


class PreparedTransport(RESTClientObject):
    """kubernetes_asyncio's ``RESTClientObject`` around an SSL context made beforehand: the
    library's constructor builds (and reads the files of) a context of its own, on the loop.
    Everything else is the library's own: ``request``, ``close``, the session's options."""

    # No super().__init__(): the base would build (and read the files of) a context of its own.
    def __init__(self, configuration: Configuration, ssl_context: ssl.SSLContext) -> None:
        # The library's own assignments (its stub types them narrower than its Configuration).
        self.server_hostname = configuration.tls_server_name  # type: ignore[assignment]
        self.proxy = configuration.proxy  # type: ignore[assignment]
        self.proxy_headers = configuration.proxy_headers  # type: ignore[assignment]
        connector = aiohttp.TCPConnector(
            limit=configuration.connection_pool_maxsize, ssl=ssl_context
        )
        self.pool_manager = aiohttp.ClientSession(
            connector=connector, trust_env=True, read_bufsize=_READ_BUFSIZE
        )


class RotatingCredentials:
    """The per-node pair in ``pair_file`` (a fixed path whose content is renewed), and the
    clients that present it."""

    def __init__(self, configuration: Configuration, pair_file: str) -> None:
        self.configuration = configuration
        self.pair_file = pair_file
        self.swaps = 0
        self._clients: list[ApiClient] = []
        self._retired: list[RESTClientObject] = []

    # --- apiconfig.ClientCertificate -----------------------------------------------------------

    def attach(self, api: ApiClient) -> None:
        """``api`` presents the current pair from now on, and every renewed one."""
        if api not in self._clients:
            self._clients.append(api)

    def detach(self, api: ApiClient) -> None:
        if api in self._clients:
            self._clients.remove(api)

    # --- renewal -------------------------------------------------------------------------------

    async def renewed(self) -> None:
        """The pair file holds a new pair: new transports for every attached client (the SSL
        context is built in a worker thread), the previous retired ones closed."""
        config = self.configuration
        context = await asyncio.to_thread(
            client_ssl_context,
            ca_file=config.ssl_ca_cert,
            pair_file=self.pair_file,
            verify=bool(config.verify_ssl),
            strict=not config.disable_strict_ssl_verification,
        )
        previous, self._retired = self._retired, []
        for api in self._clients:
            old = api.rest_client
            api.rest_client = PreparedTransport(api.configuration, context)
            self._retired.append(old)
        self.swaps += 1
        log.info(
            "API clients now present the renewed certificate (%d client(s); the previous "
            "transports finish what they carry)", len(self._clients),
        )  # fmt: skip
        await _close_all(previous)

    async def aclose(self) -> None:
        """Close the retired transports (the attached clients close their own)."""
        retired, self._retired = self._retired, []
        await _close_all(retired)


async def _close_all(transports: list[RESTClientObject]) -> None:
    for transport in transports:
        try:
            await transport.close()
        except (aiohttp.ClientError, OSError) as exc:  # pragma: no cover - closing a session
            log.debug("closing a retired API transport: %s", exc)
