"""Where the API server is and how to authenticate: a kubeconfig, or the pod's service account.

Upstream's daemon only ever uses in-cluster config; we also take a kubeconfig (the daemon-config
key ``kubeconfig``, then ``$KUBECONFIG``) so developers can point the daemon at kind or kubesim.
``ClusterConfig.source`` says which was chosen; the daemon logs it at start.

This module replaces ``kubernetes_asyncio.config``, whose import alone loads every generated
model (~38 MiB RSS). It supports what a node daemon meets in practice: tokens, token files
(bound service-account tokens rotate, so the client re-reads them), client certificates from
files or inline data (kind's shape), CA files or data, ``insecure-skip-tls-verify``. exec and
auth-provider users are refused with a message naming the method.

Synchronous: it runs once, before the event loop starts.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multusd.errors import EXIT_SERVER, StartupError

__all__ = ["INCLUSTER_DIR", "ClusterConfig", "load_cluster_config"]

INCLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class ClusterConfig:
    """What was loaded, and from where (``source``: "in-cluster" or "kubeconfig PATH (context
    NAME)")."""

    server: str
    source: str
    ca_data: bytes | None = None  # PEM; None means the system trust store
    insecure: bool = False
    token: str | None = None  # the token as read at load time
    token_file: str | None = None  # re-read by the client when it changes
    client_cert_file: str | None = None
    client_key_file: str | None = None
    client_cert_data: bytes | None = None
    client_key_data: bytes | None = None
    namespace: str | None = None  # in-cluster: the service account's namespace

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for ``server`` (None for plain http). Blocking: reads files."""
        if not self.server.lower().startswith("https://"):
            return None
        if self.insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_data is not None:
            ctx = ssl.create_default_context(cadata=self.ca_data.decode("ascii", "replace"))
        else:
            ctx = ssl.create_default_context()
        cert, key = self.client_cert_data, self.client_key_data
        if cert is None and key is None and self.client_cert_file:
            ctx.load_cert_chain(self.client_cert_file, self.client_key_file)
        elif cert is not None or key is not None:
            if cert is None and self.client_cert_file:
                cert = Path(self.client_cert_file).read_bytes()
            if key is None and self.client_key_file:
                key = Path(self.client_key_file).read_bytes()
            _load_cert_chain_from_memory(ctx, cert or b"", key or b"")
        return ctx


def _load_cert_chain_from_memory(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` only reads files: write cert and key to one private (0600) temp file,
    load it, and unlink it at once, so the key never outlives this call on disk."""
    fd, path = tempfile.mkstemp(prefix="multusd-client-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(cert.rstrip(b"\n") + b"\n" + key)
        ctx.load_cert_chain(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _fail(message: str) -> StartupError:
    return StartupError(message, EXIT_SERVER)


def load_cluster_config(
    kubeconfig: str = "",
    environ: Mapping[str, str] = os.environ,
    *,
    incluster_dir: str = INCLUSTER_DIR,
) -> ClusterConfig:
    """The explicit ``kubeconfig`` (daemon-config key), else ``$KUBECONFIG`` (a path list,
    merged first-wins like kubectl), else in-cluster config. Raises ``StartupError``."""
    paths = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if kubeconfig:
        config = _from_kubeconfig([kubeconfig])
    elif paths:
        config = _from_kubeconfig(paths)
    else:
        config = _incluster(environ, incluster_dir)
    try:
        config.ssl_context()  # fail at start, not at the first request, on bad TLS material
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise _fail(f"bad TLS material in {config.source}: {exc}") from exc
    return config


# --- in-cluster --------------------------------------------------------------------------------


def _incluster(environ: Mapping[str, str], directory: str) -> ClusterConfig:
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise _fail(
            "failed to create in-cluster kube client: KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT must be set (or give a kubeconfig: the daemon-config key "
            "'kubeconfig' or $KUBECONFIG)"
        )
    token_file = os.path.join(directory, "token")
    ca_file = os.path.join(directory, "ca.crt")
    token = _read_text(token_file, "in-cluster service-account token").strip()
    ca = _read_bytes(ca_file, "in-cluster CA certificate")
    namespace: str | None = None
    with contextlib.suppress(OSError):
        namespace = Path(directory, "namespace").read_text().strip() or None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return ClusterConfig(
        server=f"https://{host}:{port}",
        source="in-cluster",
        ca_data=ca,
        token=token or None,
        token_file=token_file,
        namespace=namespace,
    )


# --- kubeconfig --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Named:
    body: Mapping[str, Any]
    base: Path  # directory of the file that defined it: relative paths resolve against it


def _read_bytes(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def _read_text(path: str | Path, what: str) -> str:
    return _read_bytes(path, what).decode("utf-8", errors="replace")


def _parse_files(paths: list[str]) -> tuple[str, str, dict[str, dict[str, _Named]]]:
    """Merge kubeconfig files first-wins (kubectl's rule for map entries and current-context).
    Returns (first file, current-context, {"clusters"|"users"|"contexts": {name: entry}})."""
    import yaml  # the in-cluster path never needs it

    merged: dict[str, dict[str, _Named]] = {"clusters": {}, "users": {}, "contexts": {}}
    current = ""
    found = ""
    inner_key = {"clusters": "cluster", "users": "user", "contexts": "context"}
    for raw in paths:
        path = Path(raw).expanduser()
        if len(paths) > 1 and not path.exists():
            continue  # kubectl skips missing entries of a KUBECONFIG list
        text = _read_text(path, "kubeconfig")
        try:
            doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            raise _fail(f"kubeconfig {path} is not valid YAML: {exc}") from exc
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise _fail(f"kubeconfig {path}: expected a mapping at the top level")
        found = found or str(path)
        base = path.resolve().parent
        current = current or str(doc.get("current-context") or "")
        for section, inner in inner_key.items():
            for item in doc.get(section) or []:
                if not isinstance(item, dict) or not item.get("name"):
                    continue
                body = item.get(inner) or {}
                if not isinstance(body, dict):
                    raise _fail(f"kubeconfig {path}: {section} entry {item['name']!r} is invalid")
                merged[section].setdefault(str(item["name"]), _Named(body, base))
    if not found:
        raise _fail(f"no kubeconfig file found in {os.pathsep.join(paths)}")
    return found, current, merged


def _decode_data(value: Any, what: str, origin: str) -> bytes:
    try:
        return base64.b64decode(str(value), validate=False)
    except (binascii.Error, ValueError) as exc:
        raise _fail(f"kubeconfig {origin}: {what} is not valid base64") from exc


def _resolve(base: Path, value: Any) -> str:
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() else base / path)


def _from_kubeconfig(paths: list[str]) -> ClusterConfig:
    origin, current, merged = _parse_files(paths)
    contexts = merged["contexts"]
    if not contexts:
        raise _fail(f"kubeconfig {origin} has no contexts")
    name = current if current else next(iter(contexts))
    context = contexts.get(name)
    if context is None:
        raise _fail(f"kubeconfig {origin}: current-context {name!r} is not defined")
    cluster_name = str(context.body.get("cluster") or "")
    cluster = merged["clusters"].get(cluster_name)
    if cluster is None:
        raise _fail(f"kubeconfig {origin}: context {name!r} names unknown cluster {cluster_name!r}")
    server = str(cluster.body.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise _fail(f"kubeconfig {origin}: cluster {cluster_name!r} has no http(s) server URL")

    ca: bytes | None = None
    if cluster.body.get("certificate-authority-data"):
        ca = _decode_data(cluster.body["certificate-authority-data"], "CA data", origin)
    elif cluster.body.get("certificate-authority"):
        ca = _read_bytes(_resolve(cluster.base, cluster.body["certificate-authority"]), "CA file")

    user_name = str(context.body.get("user") or "")
    user = merged["users"].get(user_name) if user_name else None
    if user_name and user is None:
        raise _fail(f"kubeconfig {origin}: context {name!r} names unknown user {user_name!r}")
    auth: dict[str, Any] = {}
    if user is not None:
        auth = _user_auth(user, origin, user_name)
    return ClusterConfig(
        server=server,
        source=f"kubeconfig {origin} (context {name})",
        ca_data=ca,
        insecure=bool(cluster.body.get("insecure-skip-tls-verify", False)),
        namespace=str(context.body["namespace"]) if context.body.get("namespace") else None,
        **auth,
    )


def _user_auth(user: _Named, origin: str, user_name: str) -> dict[str, Any]:
    body = user.body
    for method in ("exec", "auth-provider"):
        if body.get(method):
            raise _fail(
                f"kubeconfig {origin}: user {user_name!r} authenticates with {method!r}, which "
                "multusd does not support; use a token, tokenFile or client certificate"
            )
    if body.get("username") or body.get("password"):
        raise _fail(
            f"kubeconfig {origin}: user {user_name!r} uses basic auth (username/password), "
            "which multusd does not support; use a token, tokenFile or client certificate"
        )
    auth: dict[str, Any] = {}
    if body.get("token"):
        auth["token"] = str(body["token"]).strip()
    elif body.get("tokenFile"):
        token_file = _resolve(user.base, body["tokenFile"])
        auth["token_file"] = token_file
        auth["token"] = _read_text(token_file, "token file").strip() or None
    if body.get("client-certificate-data"):
        auth["client_cert_data"] = _decode_data(
            body["client-certificate-data"], "client certificate data", origin
        )
    elif body.get("client-certificate"):
        auth["client_cert_file"] = _resolve(user.base, body["client-certificate"])
    if body.get("client-key-data"):
        auth["client_key_data"] = _decode_data(body["client-key-data"], "client key data", origin)
    elif body.get("client-key"):
        auth["client_key_file"] = _resolve(user.base, body["client-key"])
    has_cert = "client_cert_data" in auth or "client_cert_file" in auth
    has_key = "client_key_data" in auth or "client_key_file" in auth
    if has_cert != has_key:
        raise _fail(
            f"kubeconfig {origin}: user {user_name!r} has a client certificate without a key "
            "(or a key without a certificate)"
        )
    return auth
