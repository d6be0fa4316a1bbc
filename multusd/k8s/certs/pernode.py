"""``perNodeCertificate``: the daemon talks to the API server as its node, ``system:multus:<node>``.

Upstream (``pkg/server/server.go`` ``NewCNIServer``, ``pkg/k8sclient/kubeconfig.go``
``PerNodeK8sClient``): with ``perNodeCertificate.enabled`` the daemon does not use its service
account. It reads the bootstrap kubeconfig (on a node, the kubelet's), asks with those
credentials for a client certificate of its own (CN ``system:multus:<MULTUS_NODE_NAME>``, O
``system:multus``, signer ``kubernetes.io/kube-apiserver-client``, the lifetime
``certDuration``, 10 minutes by default), waits up to two minutes for a cert approver to let it
be issued, and then uses that certificate alone: the server and CA of the bootstrap kubeconfig,
no token, no other credential. The certificate is renewed before it expires
(``multusd.k8s.certs.manager``), with itself as the credential while it is valid.

Why an operator turns it on: a compromised node then holds credentials scoped to that node
(RBAC or an admission policy can tell ``system:multus:node-a`` from ``node-b``), where a shared
service-account token speaks for every node.

The settings are checked by ``multusd.k8s.certs.config``; what fails here, with upstream's texts
and exit code 3: a bootstrap kubeconfig that does not load, a certificate store that cannot be
recovered, no certificate after two minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Callable

import aiohttp
from kubernetes_asyncio.client import Configuration

from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s.apiconfig import ApiConfig, load_api_config
from multusd.k8s.certs.config import CERT_ORGANIZATION, PerNodeSettings
from multusd.k8s.certs.csr import KUBE_APISERVER_CLIENT, USAGES
from multusd.k8s.certs.keys import CertificateError, IssuedPair, RequestSubject
from multusd.k8s.certs.manager import CertificateManager, Template
from multusd.k8s.certs.store import CertificateStore
from multusd.k8s.certs.transport import RotatingCredentials
from multusd.k8s.client import ClientSettings, KubeClient
from multusd.k8s.errors import ApiError, TransportError

__all__ = ["per_node_api_config", "per_node_configuration", "unknown_authority"]

log = logging.getLogger(__name__)

FIRST_CERTIFICATE_WAIT = 120.0
"""How long start-up waits for the first certificate (upstream: ``wait.PollWithContext(...,
time.Second, 2*time.Minute, ...)``)."""
CSR_CLIENT = ClientSettings(qps=5.0, burst=10, pool_size=2, protobuf_pods=False)
"""The certificate requests' own client: client-go's defaults (5 QPS, burst 10), as upstream's
certificate manager builds its clientset from the bootstrap config without raising them."""


def _fail(message: str) -> StartupError:
    return StartupError(message, EXIT_SERVER)


def per_node_configuration(bootstrap: Configuration, pair_file: str) -> Configuration:
    """The bootstrap config's server and trust, with the per-node pair as the only credential
    (upstream's ``getPerNodeKubeconfig``: the bearer token, token file, basic auth, exec and
    auth providers all cleared)."""
    config = Configuration(host=bootstrap.host)
    config.ssl_ca_cert = bootstrap.ssl_ca_cert
    config.verify_ssl = bootstrap.verify_ssl
    config.tls_server_name = bootstrap.tls_server_name
    config.disable_strict_ssl_verification = bootstrap.disable_strict_ssl_verification
    config.proxy = bootstrap.proxy
    config.proxy_headers = bootstrap.proxy_headers
    config.cert_file = config.key_file = pair_file
    return config


async def _bootstrap(settings: PerNodeSettings) -> ApiConfig:
    try:
        return await load_api_config(settings.bootstrap_kubeconfig, {})
    except StartupError as exc:
        detail = exc.__cause__ or exc
        raise _fail(
            f"error getting perNodeClient: failed to load bootstrap kubeconfig "
            f"{settings.bootstrap_kubeconfig}: {detail}"
        ) from exc


def unknown_authority(exc: BaseException) -> bool:
    """The server's certificate was not signed by the CA we trust (Go: ``x509: certificate
    signed by unknown authority``): the cluster's CA changed under the per-node config."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError | aiohttp.ClientConnectorCertificateError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Clients:
    """Upstream's ``ClientsetFn``: which credentials ask for the next certificate."""

    def __init__(
        self, settings: PerNodeSettings, bootstrap: ApiConfig, credentials: RotatingCredentials
    ) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.credentials = credentials

    @contextlib.asynccontextmanager
    async def client_for(self, current: IssuedPair | None) -> AsyncIterator[KubeClient]:
        """With a valid pair: the node's own certificate, unless the server's certificate no
        longer verifies with the bootstrap CA we loaded, when the bootstrap kubeconfig is read
        again and its credentials ask. Without one: the bootstrap credentials, read afresh (the
        kubelet's own certificate or token may have been renewed since)."""
        if current is not None:
            own = ApiConfig(
                per_node_configuration(self.bootstrap.configuration, self.credentials.pair_file),
                "per-node certificate",
            )
            async with KubeClient(own, CSR_CLIENT) as client:
                if await self._trusted(client):
                    yield client
                    return
        self.bootstrap = await _bootstrap(self.settings)
        self.credentials.configuration.ssl_ca_cert = self.bootstrap.configuration.ssl_ca_cert
        async with KubeClient(self.bootstrap, CSR_CLIENT) as client:
            yield client

    @staticmethod
    async def _trusted(client: KubeClient) -> bool:
        """Upstream's probe of the per-node config (``Discovery().ServerVersion()``): only a
        server certificate our CA no longer verifies sends the request to the bootstrap
        credentials; any other failure is logged and the node's own certificate still asks."""
        try:
            await client.get("/version")
        except TransportError as exc:
            if unknown_authority(exc):
                log.info("per-node config no longer trusted: rebuilding it from the bootstrap "
                         "kubeconfig")  # fmt: skip
                return False
            log.error("failed to validate per-node kubeconfig: %s", exc)
        except ApiError as exc:
            log.error("failed to validate per-node kubeconfig: %s", exc)
        return True


async def _first_certificate(manager: CertificateManager, task: asyncio.Task[None]) -> None:
    """Until the manager has a valid pair, its task ends, or the start-up wait is over."""
    waiter = asyncio.ensure_future(manager.issued.wait())
    try:
        await asyncio.wait(
            {waiter, task}, timeout=FIRST_CERTIFICATE_WAIT, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)


@contextlib.asynccontextmanager
async def per_node_api_config(
    settings: PerNodeSettings, *, on_failure: Callable[[str], None]
) -> AsyncIterator[ApiConfig]:
    """The API config of the node's own certificate, kept current until the block leaves.

    Start-up: the bootstrap kubeconfig loaded, the store recovered, the manager's task started
    and at most :data:`FIRST_CERTIFICATE_WAIT` seconds waited for a valid certificate. Then
    the config is yielded; the task renews the certificate meanwhile and every client made from
    the config follows. On the way out the task is cancelled and awaited, the retired
    transports closed. The task ending on its own (it retries every failure, so only a bug
    ends it) is told to ``on_failure``.
    """
    bootstrap = await _bootstrap(settings)
    store = CertificateStore(settings.cert_dir)
    try:
        await store.recover()
    except (CertificateError, OSError) as exc:
        raise _fail(
            f"error getting perNodeClient: failed to initialize the certificate store: {exc}"
        ) from exc
    pair_file = str(store.current_path)
    config = ApiConfig(
        per_node_configuration(bootstrap.configuration, pair_file),
        f"per-node certificate {pair_file}, bootstrap {bootstrap.source}",
    )
    credentials = RotatingCredentials(config.configuration, pair_file)
    config.certificate = credentials
    clients = _Clients(settings, bootstrap, credentials)

    async def rotated(_pair: IssuedPair) -> None:
        await credentials.renewed()

    subject = RequestSubject(settings.common_name, (CERT_ORGANIZATION,))
    template = Template(subject, KUBE_APISERVER_CLIENT, USAGES, settings.duration_ns)
    manager = CertificateManager(store, template, client_for=clients.client_for,
                                 on_rotated=rotated)  # fmt: skip
    await manager.load()
    task = asyncio.create_task(manager.run(), name="certificate-manager")

    def ended(done: asyncio.Task[None]) -> None:
        if not done.cancelled():
            on_failure(f"{done.get_name()} stopped: {done.exception()!r}")

    task.add_done_callback(ended)
    try:
        log.info("waiting for the certificate of %s for up to %gs",
                 settings.common_name, FIRST_CERTIFICATE_WAIT)  # fmt: skip
        await _first_certificate(manager, task)
        if not manager.issued.is_set():
            raise _fail(
                "error getting perNodeClient: certificate was not signed, last cert store err: "
                f"{manager.store_error or '<nil>'} err: timed out waiting for the condition"
            )
        log.info("certificate found: talking to the API server as %s",
                 settings.common_name)  # fmt: skip
        yield config
    finally:
        task.remove_done_callback(ended)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await credentials.aclose()
