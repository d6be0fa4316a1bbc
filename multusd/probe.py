"""``multusd probe [--ready]``: the DaemonSet's exec probes, in a few MiB.

The kubelet runs each probe inside the daemon's container, so every exec is charged to the same
memory cgroup as the daemon and its plugins (upstream's limit: 50 Mi for all of them), up to
three times every 10 s. It used to import the daemon's stack (asyncio through ``multusd.cli``,
the config schema) and peaked at 21.5 MiB. It now imports the stdlib-only HTTP client the shim
uses (``cni_shim.transport``) and ``json``, nothing of the daemon. Measured (``/usr/bin/time
-v``; the cgroup's ``memory.max_usage_in_bytes`` around one run in a cgroup of its own): maximum
RSS 21.8 → 12.6 MiB, charge to the cgroup 12.0 → 6.0 MiB, of which a bare interpreter (``python
-c pass``) is 10.3 and 4.6.

The only thing the probe needs from the daemon config is ``socketDir``, so that is the only key
it reads, decoded as the daemon's decoder does (keys match ignoring case, the last one wins, a
string or an error; absent: the daemon's default). The other keys are the daemon's to check: it
did so when it started, and a probe that failed on a key the running daemon does not act on
would get a healthy daemon restarted into a config that stops it.

A probe is also the process of the cgroup the kernel's OOM killer should take first, never the
daemon: it raises its own ``oom_score_adj`` to the maximum as soon as it runs (raising needs no
privilege). That covers the probe once its interpreter is up, not the interpreter's own start
(most of its 6 MiB); a command that sets the score before ``exec`` covers that too. A probe
killed is one failed probe, which the kubelet's ``failureThreshold`` absorbs.

Exit 0 when ``/healthz`` (``--ready``: ``/readyz``) answers 200, 1 otherwise (no socket, no
answer within ``--timeout``, another status, an unreadable config), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from cni_shim import transport

DEFAULT_CONFIG_PATH = "/etc/cni/net.d/multus.d/daemon-config.json"
"""``multusd.config.daemon.DEFAULT_CONFIG_PATH`` (a test keeps the two equal)."""
DEFAULT_SOCKET_DIR = "/run/multus/"
"""``DaemonConfig.socket_dir``'s default (a test keeps the two equal)."""


class ProbeConfigError(Exception):
    """The daemon config could not give a socket directory; worded as the daemon's errors."""


def socket_dir_of(path: str) -> str:
    """``socketDir`` of the daemon config at ``path``, as ``DaemonConfig`` would decode it."""
    absolute = os.path.abspath(path)
    try:
        with open(absolute, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ProbeConfigError(f"daemon config {absolute}: {exc.strerror or exc}") from exc
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProbeConfigError(f"daemon config {absolute}: not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProbeConfigError(f"daemon config {absolute}: expected a JSON object")
    value: object = DEFAULT_SOCKET_DIR
    for key, item in raw.items():
        if key.lower() == "socketdir":
            value = item
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise ProbeConfigError(
            f"daemon config {absolute}: key 'socketDir': expected a string, got {kind}"
        )
    return value


OOM_SCORE_ADJ_MAX = 1000


def volunteer_for_the_oom_killer(path: str = "/proc/self/oom_score_adj") -> bool:
    """Make this process the OOM killer's first choice in its cgroup; ``False`` if refused."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, str(OOM_SCORE_ADJ_MAX).encode())
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    volunteer_for_the_oom_killer()
    parser = argparse.ArgumentParser(
        prog="multusd probe",
        description="The DaemonSet's exec probes (kubelet cannot speak HTTP over a unix "
        "socket). Exit 0 when /healthz (or /readyz) answers 200, else 1.",
    )
    parser.add_argument("--ready", action="store_true", help="check /readyz instead of /healthz")
    parser.add_argument(
        "-config",
        "--config",
        dest="config",
        default=DEFAULT_CONFIG_PATH,
        metavar="PATH",
        help="the daemon config whose socketDir to probe (default %(default)s)",
    )
    parser.add_argument(
        "--socket-dir", default=None, help="the daemon's socket directory (default: the config's)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for the answer (default %(default)s)",
    )
    args = parser.parse_args(argv)
    socket_dir = args.socket_dir
    if socket_dir is None:
        try:
            socket_dir = socket_dir_of(args.config)
        except ProbeConfigError as exc:
            print(f"multusd probe: {exc}", file=sys.stderr)
            return 1
    path = "/readyz" if args.ready else "/healthz"
    try:
        status, _, _ = transport.post(
            os.path.join(socket_dir, "multus.sock"), path, b"null", timeout=args.timeout
        )
    except transport.TransportError as exc:
        print(f"multusd probe: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"multusd probe: {path} answered {status}", file=sys.stderr)
        return 1
    return 0
