"""Applying a delegate's default-route plan: in the pod's namespace and in libcni's cache.

Upstream (``pkg/netutils``) edits both places right after the delegate's ADD: the kernel
routes, so the pod really uses the requested gateway, and the cached result, so that CHECK and
DEL later see what the pod has (after a gateway request every attachment loses all its default
routes and only the requesting one gets one back:
docs/compatibility.md, "The upstream quirks, one by one"). The plan itself comes from
:mod:`multusd.networks.gateways`. Netlink work runs in a namespace thread, file work in a worker
thread; nothing here blocks the event loop.

One module per place, because they share nothing but the plan:

* :mod:`.plan`: :class:`RouteActions`, what one delegate's ADD is followed by;
* :mod:`.kernel`: the pod's routing table, over rtnetlink in the pod's namespace;
* :mod:`.cached`: the routes of the attachment's cached result.

Callers import from this package. Kept as upstream in both places: errors abort without
touching the other attachments.
"""

from __future__ import annotations

from multusd.cni.routes.cached import rewrite_cached_routes
from multusd.cni.routes.kernel import apply_default_routes
from multusd.cni.routes.plan import NO_ACTIONS, RouteActions

__all__ = ["NO_ACTIONS", "RouteActions", "apply_default_routes", "rewrite_cached_routes"]
