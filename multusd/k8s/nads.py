"""NetworkAttachmentDefinition lookups: the watch cache first, one GET on a miss.

Upstream HEAD reads NADs from its informer only, so a NAD created moments before its pod can be
reported missing and the sandbox retried (docs/upstream.md, "NAD lookups"). One GET on a cache miss
closes that window at the cost of a request only when something is actually missing.
"""

from __future__ import annotations

from typing import Any

from multusd.k8s.client import KubeClient
from multusd.k8s.errors import NotFound
from multusd.k8s.names import checked_name, checked_namespace
from multusd.k8s.store import Store, trim_nad

NADS_GROUP_PATH = "/apis/k8s.cni.cncf.io/v1"


def nad_path(namespace: str, name: str) -> str:
    """The NAD's path; :class:`~multusd.k8s.names.InvalidName` for a name client-go refuses."""
    namespace, name = checked_namespace(namespace), checked_name(name)
    return f"{NADS_GROUP_PATH}/namespaces/{namespace}/network-attachment-definitions/{name}"


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
            found = await self.client.get_nad(
                checked_namespace(namespace),
                checked_name(name),
                timeout=self.get_timeout,
                retries=self.client.settings.max_retries,
            )
        except NotFound:
            return None
        return trim_nad(found)
