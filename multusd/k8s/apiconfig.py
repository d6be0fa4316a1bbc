"""Where the API server is and how to authenticate: kubernetes_asyncio's loaders, and the token.

Upstream's daemon only ever uses in-cluster config; we also take a kubeconfig (the daemon-config
key ``kubeconfig``, then ``$KUBECONFIG``, a path list merged as kubectl merges it) so developers
can point the daemon at kind or the emulator. Both go through kubernetes_asyncio's loaders
(``load_kube_config`` with ``client_configuration`` and ``persist_config=False``: nothing is
ever written beside the kubeconfig; ``InClusterConfigLoader``), so every authentication the
library knows works here: tokens, token files, client certificates, exec plugins, OIDC.

What we add is the bearer token's life. Bound service-account tokens rotate (hourly, and at
once when a secret is replaced): :class:`TokenFile` re-reads the token file at most once a
minute when a request goes out (the library's own in-cluster period), and at once when the
server answers 401 (client-go's rule: the request is then sent again with the new token, so a
rotation fails no request but those already in flight). The read goes through aiofiles
(``multusd.fileread``).

A client certificate can have a life too: with ``perNodeCertificate`` the daemon talks to the
API server with a certificate of its node's own that is renewed while it runs
(``multusd.k8s.certs``). Such a config carries a :class:`ClientCertificate`, which every client
made from it attaches to, so that a renewal reaches the clients already running.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_kube_config
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from kubernetes_asyncio.config.kube_config import ConfigNode, KubeConfigMerger

from multusd.errors import EXIT_SERVER, StartupError
from multusd.fileread import read_bytes

__all__ = ["INCLUSTER_DIR", "ApiConfig", "ClientCertificate", "TokenFile", "load_api_config"]

log = logging.getLogger(__name__)

INCLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_RECHECK = 60.0
"""Seconds between two reads of the token file when no 401 asks sooner (kubernetes_asyncio's
in-cluster refresh period, and client-go's cached file token source's)."""
_BEARER = "BearerToken"  # the api_key entry kubernetes_asyncio's auth settings read


class TokenFile:
    """The bearer token, kept in step with its file: the ``refresh_api_key_hook`` of the
    client's ``Configuration`` (checked before every request, read at most every
    ``TOKEN_RECHECK`` seconds), and :meth:`reload` after a 401."""

    def __init__(self, path: str, configuration: Configuration) -> None:
        self.path = path
        self.configuration = configuration
        self.reloads = 0
        """Times the file held a token other than the one in use."""
        self._next_check = time.monotonic() + TOKEN_RECHECK

    async def __call__(self, configuration: Configuration) -> None:
        if time.monotonic() >= self._next_check:
            await self.reload()

    async def reload(self) -> bool:
        """Read the file now; whether it held a new token."""
        self._next_check = time.monotonic() + TOKEN_RECHECK  # before awaiting: one reader
        try:
            value = (await read_bytes(self.path)).decode("utf-8", "replace").strip()
        except OSError as exc:
            log.warning("cannot re-read the API token from %s: %s", self.path, exc)
            return False
        bearer = f"Bearer {value}"
        if not value or self.configuration.api_key.get(_BEARER) == bearer:
            return False
        self.configuration.api_key[_BEARER] = bearer
        self.reloads += 1
        log.info("API token reloaded from %s", self.path)
        return True


class ClientCertificate(Protocol):
    """A client certificate renewed while clients use it: a client made from the config
    attaches when it starts and detaches when it closes; in between, a renewal gives it a
    transport that presents the new certificate (``multusd.k8s.certs.transport``)."""

    def attach(self, api: ApiClient) -> None: ...

    def detach(self, api: ApiClient) -> None: ...


@dataclass
class ApiConfig:
    """What was loaded, and from where (``source``: "in-cluster" or "kubeconfig PATH (context
    NAME)"); ``token`` re-reads a token file, when the credentials came from one;
    ``certificate`` renews a client certificate (per-node certificates)."""

    configuration: Configuration
    source: str
    token: TokenFile | None = None
    certificate: ClientCertificate | None = None

    @property
    def server(self) -> str:
        return str(self.configuration.host)

    @classmethod
    def for_server(
        cls, server: str, *, token: str | None = None, ca_file: str | None = None
    ) -> ApiConfig:
        """A server given by hand (the benchmarks' and tests' peers): its URL, a fixed bearer
        token, a CA file (else the system's trust store)."""
        configuration = Configuration(host=server.rstrip("/"))
        configuration.ssl_ca_cert = ca_file
        if token:
            configuration.api_key[_BEARER] = f"Bearer {token}"
        return cls(configuration, f"server {server}")


def _fail(message: str) -> StartupError:
    return StartupError(message, EXIT_SERVER)


async def load_api_config(
    kubeconfig: str = "",
    environ: Mapping[str, str] = os.environ,
    *,
    incluster_dir: str = INCLUSTER_DIR,
) -> ApiConfig:
    """The explicit ``kubeconfig`` (daemon-config key), else ``$KUBECONFIG`` (a path list,
    merged first-wins like kubectl), else in-cluster config. Raises ``StartupError``.

    The library's loaders read (and, for inline certificates, write temp) files synchronously,
    and an exec plugin runs a process: all of it happens in a worker thread, on a loop of its
    own, so the daemon's loop stays free while it starts."""
    return await asyncio.to_thread(asyncio.run, _load(kubeconfig, dict(environ), incluster_dir))


async def _load(kubeconfig: str, environ: Mapping[str, str], incluster_dir: str) -> ApiConfig:
    paths = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    try:
        if kubeconfig:
            return await _from_kubeconfig([kubeconfig])
        if paths:
            return await _from_kubeconfig(paths)
        return _incluster(environ, incluster_dir)
    except (ConfigException, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise _fail(f"failed to load the Kubernetes client configuration: {exc}") from exc


def _incluster(environ: Mapping[str, str], directory: str) -> ApiConfig:
    if not environ.get("KUBERNETES_SERVICE_HOST") or not environ.get("KUBERNETES_SERVICE_PORT"):
        raise _fail(
            "failed to create in-cluster kube client: KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT must be set (or give a kubeconfig: the daemon-config key "
            "'kubeconfig' or $KUBECONFIG)"
        )
    token_file = os.path.join(directory, "token")
    configuration = Configuration()
    InClusterConfigLoader(
        token_filename=token_file,
        cert_filename=os.path.join(directory, "ca.crt"),
        try_refresh_token=False,  # ours: TokenFile, which also reloads on a 401
        environ=dict(environ),
    ).load_and_set(configuration)
    _trim_token(configuration)
    token = TokenFile(token_file, configuration)
    configuration.refresh_api_key_hook = token
    return ApiConfig(configuration, "in-cluster", token)


async def _from_kubeconfig(paths: list[str]) -> ApiConfig:
    joined = os.pathsep.join(paths)
    merged = KubeConfigMerger(joined)
    if merged.config is None:
        raise _fail(f"no kubeconfig file found in {joined}")
    # kubectl's rule: the first file that names a current-context wins (the library's merger
    # keeps the last).
    current = next(
        (str(doc["current-context"]) for path in merged.paths
         if (doc := merged.config_files[path] or {}).get("current-context")),
        None,
    )  # fmt: skip
    configuration = Configuration()
    loader = await load_kube_config(
        config_file=joined, context=current, client_configuration=configuration,
        persist_config=False,
    )  # fmt: skip
    _trim_token(configuration)
    context: Mapping[str, Any] = loader.current_context or {}
    source = f"kubeconfig {merged.paths[0]} (context {context.get('name', '')})"
    token_file = _token_file(merged, context)
    token = None
    if token_file is not None:
        token = TokenFile(token_file, configuration)
        configuration.refresh_api_key_hook = token
    return ApiConfig(configuration, source, token)


def _trim_token(configuration: Configuration) -> None:
    """The libraries' loaders keep a token file's trailing newline in the header value;
    client-go trims it (and aiohttp refuses a header with a line break)."""
    bearer = configuration.api_key.get(_BEARER)
    if bearer:
        configuration.api_key[_BEARER] = bearer.strip()


def _token_file(merged: KubeConfigMerger, context: Mapping[str, Any]) -> str | None:
    """The context's user's ``tokenFile`` (resolved against its kubeconfig's directory), when
    it authenticates with one: the library reads it once, client-go keeps re-reading it."""
    user_name = (context.get("context") or {}).get("user")
    config = merged.config
    if not user_name or config is None:
        return None
    users = config.safe_get("users")
    user = ConfigNode("users", users).get_with_name(user_name, safe=True) if users else None
    if user is None:
        return None
    body = user.safe_get("user") or {}
    if body.get("token") or not body.get("tokenFile"):
        return None
    path = Path(str(body["tokenFile"])).expanduser()
    if not path.is_absolute() and user.path:
        path = Path(user.path).resolve().parent / path
    return str(path)
