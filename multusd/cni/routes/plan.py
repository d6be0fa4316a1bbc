"""The default-route plan of one delegate's ADD: which default routes go, which gateways come.

:mod:`multusd.networks.gateways` makes it from the pod's ``default-route`` requests;
:mod:`.kernel` carries it out in the pod's namespace and :mod:`.cached` in the cached result.
"""

from __future__ import annotations

from typing import NamedTuple


class RouteActions(NamedTuple):
    """What one delegate's ADD is followed by.

    ``add`` holds the requested gateways in Go's ``net.IP.String()`` form (IPv4 dotted even
    when written v4-mapped), empty when nothing is to be added.
    """

    delete_v4: bool
    delete_v6: bool
    add: tuple[str, ...]

    @property
    def any(self) -> bool:
        return self.delete_v4 or self.delete_v6 or bool(self.add)


NO_ACTIONS = RouteActions(delete_v4=False, delete_v6=False, add=())
