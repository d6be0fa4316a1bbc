"""The server's limits: how long a request may take, how many may wait, how long a client may
dawdle. Read from ``daemon-config.json`` with the project's Go-like decoder, once, when the
server is built (so a bad value stops start-up with one line naming the key).

Why these defaults (docs/configuration.md has the table):

* ``requestTimeoutSeconds`` 120: the kubelet gives ``RunPodSandbox`` twice its
  ``--runtime-request-timeout`` (2 min by default, so 4 min) and Stop/RemovePodSandbox the plain
  2 min; containerd puts no timeout of its own on the CNI call. 120 s ends a hung request well
  before the kubelet gives up, leaves room for the rollback and the runtime's own cleanup, and
  is the same bound for DEL, whose caller waits 2 min. Upstream has no limit at all.
* ``maxPendingRequestsPerContainer`` 16: the kubelet runs one sandbox operation per pod at a
  time and containerd one CNI call per sandbox operation, so a container normally has one or
  two requests (an ADD, then the DELs of Stop and Remove); 16 leaves room for retries while a
  runaway client cannot pile up work behind one hung container.
* ``maxPendingRequests`` 1,024: twice the ADD and DEL of every pod on a 500-pod node at once
  (the kubelet's default ``maxPods`` is 110). Beyond ``maxActiveRequests`` they wait unread,
  costing the daemon a file descriptor each.
* ``maxActiveRequests`` 32: a request read costs the daemon ~50 KiB until it is answered, one
  not yet read nothing (the kernel charges it to the client). 32 keep two cores' worth of
  plugins and the 50-QPS bucket busy (an ADD spends most of its time in plugins, which the
  memory admission runs a few at a time under a 50 Mi limit anyway) at ~1.6 MiB.
* ``requestHeaderTimeoutSeconds`` 10: Go's usual ``ReadHeaderTimeout`` (upstream's own metrics
  server uses 10 s); our shim sends its whole request at once, right after connecting.
* ``requestBodyTimeoutSeconds`` 10: a request body is a few KiB written in one go.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

from multusd.config.schema import SchemaError, check, decode, json_field
from multusd.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ServerSettings:
    request_timeout: float = json_field("requestTimeoutSeconds", 120.0)
    """Deadline of one CNI request, waiting included; plugins are killed when it passes."""
    max_pending_per_container: int = json_field("maxPendingRequestsPerContainer", 16)
    """Requests one container may have in the daemon (running or waiting); more get code 11."""
    max_pending: int = json_field("maxPendingRequests", 1024)
    """CNI requests the daemon holds at once (running or waiting, read or not); more get code 11."""
    max_active: int = json_field("maxActiveRequests", 32)
    """CNI requests read and in the daemon at once; more wait unread (``server.intake``)."""
    header_timeout: float = json_field("requestHeaderTimeoutSeconds", 10.0)
    """From connecting (or the previous answer) to a complete request header."""
    body_timeout: float = json_field("requestBodyTimeoutSeconds", 10.0)
    """From the request header to the complete body."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            check(item.metadata["json"], value > 0, functools.partial(_not_positive, value))


def _not_positive(value: float) -> str:
    return f"must be greater than 0, got {value}"


def load_server_settings(raw: dict[str, Any] | None) -> ServerSettings:
    """The settings in the daemon config ``raw`` (the decoded file), defaults for the rest."""
    try:
        return decode(ServerSettings, raw or {})
    except SchemaError as exc:
        raise ConfigError(f"daemon config: {exc}") from exc
