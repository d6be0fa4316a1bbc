"""Per-node client certificates (upstream's ``perNodeCertificate``) and their approver.

* ``pernode``: the daemon's side: the configuration checked with upstream's texts, the first
  certificate waited for, the API config that presents it (``per_node_api_config``);
* ``manager``: client-go's certificate manager (when to renew, how, the back-off);
* ``csr``: one CertificateSigningRequest, sent and watched until it is issued;
* ``store``: the pair on disk, in client-go's file-store layout;
* ``transport``: a renewed certificate reaching the clients already running;
* ``keys``: keys, requests and pairs (the ``cryptography`` package, imported only here);
* ``duration``: Go's ``time.ParseDuration``, for ``certDuration``;
* ``approver``: ``multusd cert-approver``, upstream's ``cmd/cert-approver``.

Nothing here is imported by the daemon unless ``perNodeCertificate.enabled`` is set.
"""
