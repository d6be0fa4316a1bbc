"""``perNodeCertificate`` checked as upstream checks it, before anything heavy is imported.

Upstream's ``NewCNIServer`` checks, in this order and with these texts: an incomplete
configuration (``isPerNodeCertEnabled``), a missing ``MULTUS_NODE_NAME``, a ``certDuration``
that Go's ``time.ParseDuration`` refuses. Each ends the start-up with exit code 3, as upstream's
``failed start the multus thick-plugin listener`` does. This module imports no cryptography
(``multusd.k8s.certs.keys`` costs ~10 MiB), so the daemon checks the settings whether or not
they are enabled, and pays for the rest only when they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from cni_shim.goquote import go_quote
from multusd.errors import EXIT_SERVER, StartupError
from multusd.k8s.certs.duration import GoDurationError, parse_go_duration

__all__ = [
    "CERT_ORGANIZATION",
    "COMMON_NAME_PREFIX",
    "DEFAULT_DURATION",
    "PerNodeSettings",
    "per_node_settings",
]

COMMON_NAME_PREFIX = "system:multus"
"""Upstream's ``certCommonNamePrefix``: the certificate's CN is ``system:multus:<node>``."""
CERT_ORGANIZATION = "system:multus"
"""Upstream's ``certOrganization``: the certificate's one O, the user's group."""
DEFAULT_DURATION = "10m"
"""Upstream's ``DefaultCertDuration``, used when ``certDuration`` is empty."""


class _EnabledConfig(Protocol):
    """The part of the daemon config's ``perNodeCertificate`` read here (the pydantic model in
    ``multusd.config.daemon``, which this layer does not import)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def bootstrap_kubeconfig(self) -> str: ...
    @property
    def cert_dir(self) -> str: ...
    @property
    def cert_duration(self) -> str: ...


@dataclass(frozen=True, slots=True)
class PerNodeSettings:
    """A complete, checked ``perNodeCertificate``."""

    node: str
    bootstrap_kubeconfig: str
    cert_dir: str
    duration_ns: int

    @property
    def common_name(self) -> str:
        return f"{COMMON_NAME_PREFIX}:{self.node}"


def _fail(message: str) -> StartupError:
    return StartupError(message, EXIT_SERVER)


def per_node_settings(
    config: _EnabledConfig | None, environ: Mapping[str, str]
) -> PerNodeSettings | None:
    """``None`` unless enabled; else the checked settings, or upstream's error
    (``isPerNodeCertEnabled``, then the node name, then ``certDuration``)."""
    if config is None or not config.enabled:
        return None
    if not config.bootstrap_kubeconfig or not config.cert_dir:
        raise _fail(
            f"failed to configure PerNodeCertificate: enabled: true, BootstrapKubeconfig: "
            f"{go_quote(config.bootstrap_kubeconfig)}, CertDir: {go_quote(config.cert_dir)}"
        )
    node = environ.get("MULTUS_NODE_NAME", "")
    if not node:
        raise _fail(
            "error getting node name for perNodeCertificate, please check manifest to have "
            "MULTUS_NODE_NAME"
        )
    try:
        duration = parse_go_duration(config.cert_duration or DEFAULT_DURATION)
    except GoDurationError as exc:
        raise _fail(f"failed to parse certDuration: {exc}") from exc
    return PerNodeSettings(node, config.bootstrap_kubeconfig, config.cert_dir, duration)
