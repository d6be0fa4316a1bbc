"""The per-node API configuration: the bootstrap's server and trust, the node's pair as the only
credential (upstream's ``getPerNodeKubeconfig``), and when the bootstrap credentials take over
asking for certificates (a server certificate the CA no longer verifies)."""

from __future__ import annotations

import ssl

from kubernetes_asyncio.client import Configuration

from multusd.k8s.certs.pernode import per_node_configuration, unknown_authority
from multusd.k8s.errors import TransportError


def test_only_the_pair_authenticates() -> None:
    bootstrap = Configuration(host="https://10.0.0.1:6443")
    bootstrap.ssl_ca_cert = "/etc/kubernetes/pki/ca.crt"
    bootstrap.tls_server_name = "kubernetes"
    bootstrap.api_key["BearerToken"] = "Bearer bootstrap"
    bootstrap.username, bootstrap.password = "u", "p"
    bootstrap.cert_file = bootstrap.key_file = "/var/lib/kubelet/pki/kubelet-client-current.pem"
    config = per_node_configuration(bootstrap, "/var/lib/multus/multus-client-current.pem")
    assert config.host == "https://10.0.0.1:6443"
    assert (config.ssl_ca_cert, config.tls_server_name) == (bootstrap.ssl_ca_cert, "kubernetes")
    assert config.verify_ssl
    assert config.cert_file == config.key_file == "/var/lib/multus/multus-client-current.pem"
    assert config.api_key == {} and not config.username and not config.password
    assert config.refresh_api_key_hook is None


def testunknown_authority() -> None:
    def lost(cause: BaseException) -> TransportError:
        try:
            raise TransportError("get /version (GET) failed") from cause
        except TransportError as exc:
            return exc

    verify = ssl.SSLCertVerificationError(1, "certificate verify failed: unable to get issuer")
    assert unknown_authority(lost(verify))
    assert not unknown_authority(lost(ConnectionRefusedError(111, "refused")))
    assert not unknown_authority(lost(TimeoutError()))
