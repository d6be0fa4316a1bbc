"""NetworkAttachmentDefinition lookups: the watch cache first, one GET on a miss.

Upstream HEAD reads NADs from its informer only, so a NAD created moments before its pod can be
reported missing and the sandbox retried (docs/upstream.md, "NAD lookups"). One GET on a cache miss
closes that window at the cost of a request only when something is actually missing.
"""

from __future__ import annotations

from typing import Any

from multusd.k8s.client import CustomResource, KubeClient
from multusd.k8s.errors import NotFound
from multusd.k8s.names import checked_name, checked_namespace
from multusd.k8s.store import Store, trim_nad

NADS = CustomResource("k8s.cni.cncf.io", "v1", "network-attachment-definitions")
"""Where the NetworkAttachmentDefinition CRD serves (manifests/base's CRD; a test holds them
together): the reflector lists and watches ``NADS.path``, a cache miss GETs one object."""


class NadLookup:
    def __init__(self, client: KubeClient, store: Store, *, get_timeout: float = 5.0) -> None:
        self.client = client
        self.store = store
        self.get_timeout = get_timeout

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The NAD, or ``None`` if the API server does not have it either.

        Other API errors propagate (``ApiError``): the caller words them for the runtime.
        """
        cached = self.store.get(namespace, name)
        if cached is not None:
            return cached
        try:
            found = await self.client.get_custom(
                NADS,
                checked_namespace(namespace),
                checked_name(name),
                timeout=self.get_timeout,
                retries=self.client.settings.max_retries,
            )
        except NotFound:
            return None
        return trim_nad(found)
