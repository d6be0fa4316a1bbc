"""The emulator's settings and the shared state every request handler reaches."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from multusd.kubesim.certresources import CERT_RESOURCES
from multusd.kubesim.draresources import DRA_RESOURCES
from multusd.kubesim.faults import Faults
from multusd.kubesim.resources import ALL_RESOURCES, Registry
from multusd.kubesim.stats import Stats
from multusd.kubesim.store import Snapshot, Store
from multusd.kubesim.watchcache import WATCH_CACHE_CAPACITY


@dataclass(frozen=True, slots=True)
class Settings:
    """Tunables; every timeout is a named field with the apiserver's default."""

    # The bearer token clients must send; None accepts anonymous requests.
    token: str | None = "kubesim-token"
    # How often an idle watch that asked for bookmarks gets one (the apiserver: about a minute).
    bookmark_interval: float = 60.0
    # A watch without timeoutSeconds ends after a random time in [t, 2t] (--min-request-timeout).
    min_request_timeout: float = 1800.0
    # Changes kept per resource for watches to resume across (the watch cache's window; see
    # watchcache.WATCH_CACHE_CAPACITY for upstream's sizes); older versions get 410 Expired.
    history_limit: int = WATCH_CACHE_CAPACITY
    # Events queued for one slow watcher before it is closed.
    watcher_capacity: int = 100_000
    # Requests kept in the request log.
    log_limit: int = 10_000
    # Largest request body accepted (etcd's object limit is 1.5 MiB).
    max_body_bytes: int = 3 * 1024 * 1024
    # Streaming lists (watch with sendInitialEvents): kube-apiserver's WatchList feature. False
    # answers them with the 422 of a server without it (1.26 and older, 1.33 by default).
    watch_list: bool = True
    # True: a list at resourceVersion "0" is answered whole, ``limit`` ignored, as
    # kube-apiserver's watch cache answers it (any other version with a limit is paged, from
    # etcd). False (the default) pages every list that has a limit.
    watch_cache_ignores_limit: bool = False
    # More bearer tokens, as (token, user, groups): kube-apiserver's --token-auth-file, for a
    # requester with a name (a kubelet's system:node:<node>); ``token`` is the admin's
    # (multusd.kubesim.authn). TLS client certificates from the emulator's CA authenticate too.
    users: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # certificates.k8s.io (multusd.kubesim.certresources, csrsigner): the shortest lifetime a
    # CertificateSigningRequest may ask for (kube-apiserver's validation: 600 s), how far back an
    # issued certificate's NotBefore is set (kube-controller-manager's signer: 5 min), and the
    # longest lifetime issued (--cluster-signing-duration: a year). Tests that renew certificates
    # within seconds lower the first two.
    csr_min_expiration_seconds: int = 600
    csr_backdate_seconds: float = 300.0
    csr_signing_duration: float = 365 * 24 * 3600.0


@dataclass(slots=True)
class State:
    settings: Settings
    registry: Registry = field(
        default_factory=lambda: Registry((*ALL_RESOURCES, *DRA_RESOURCES, *CERT_RESOURCES))
    )
    store: Store = field(init=False)
    faults: Faults = field(default_factory=Faults)
    stats: Stats = field(init=False)
    # host:port clients used to reach us, for /api's serverAddressByClientCIDRs.
    server_address: str = ""
    # The last snapshot taken (``backup.take``), which ``backup.restore`` restores by default.
    snapshot: Snapshot | None = None

    def rotate_token(self, token: str | None) -> None:
        """Accept ``token`` from now on and refuse the old one (a service-account token
        rotated by the kubelet, a secret replaced)."""
        self.settings = replace(self.settings, token=token)

    def __post_init__(self) -> None:
        self.store = Store(
            history_limit=self.settings.history_limit,
            watcher_capacity=self.settings.watcher_capacity,
        )
        self.stats = Stats(log_limit=self.settings.log_limit)
