"""``multusd cert-approver``: upstream's ``cert-approver``, which clusters that enable
``perNodeCertificate`` run (once, as a Deployment) so that the daemons' certificate requests are
approved. The controller is :class:`multusd.k8s.certs.approver.CertApprover`; this module is its
command line, its logging and its signals.

Upstream takes no options and reads the in-cluster config; ``--kubeconfig`` (or
``$KUBECONFIG``) points it elsewhere, as the daemon's own ``kubeconfig`` key does. It runs until
SIGTERM or SIGINT (exit 0); a configuration that does not load ends it at once with exit 255,
as upstream's ``klog.Fatal``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from multusd import logs
from multusd.errors import StartupError

log = logging.getLogger("multusd.cert_approver")

EXIT_FATAL = 255
"""``klog.Fatal``'s exit code."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multusd cert-approver",
        description="Approve the CertificateSigningRequests of multusd's per-node certificates "
        "(perNodeCertificate): upstream's cert-approver.",
    )
    parser.add_argument(
        "--kubeconfig",
        default="",
        help="a kubeconfig to use (default: $KUBECONFIG, else the in-cluster config)",
    )
    parser.add_argument(
        "--log-level",
        default="verbose",
        choices=("debug", "verbose", "error", "panic"),
        help="the least severe level written to stderr, as the daemon's logLevel "
        "(default %(default)s)",
    )
    return parser


async def run(kubeconfig: str, environ: dict[str, str]) -> int:
    """Approve until SIGTERM or SIGINT."""
    from multusd.k8s.apiconfig import load_api_config
    from multusd.k8s.certs.approver import CertApprover
    from multusd.k8s.client import ClientSettings, KubeClient

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info("starting cert-approver")
    config = await load_api_config(kubeconfig, environ)
    log.info("Kubernetes API %s (%s)", config.server, config.source)
    async with KubeClient(config, ClientSettings(protobuf_pods=False)) as client:
        approver = CertApprover(client)
        task = asyncio.create_task(approver.run(), name="cert-approver")
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            task.cancel()
            results = await asyncio.gather(task, stopping, return_exceptions=True)
        failure = results[0]
        if not stop.is_set() and not isinstance(failure, asyncio.CancelledError | None):
            log.error("cert approver stopped: %r", failure)
            return 1
    log.info("cert-approver stopped (%d approved, %d left alone, %d dropped)",
             approver.approved, approver.left, approver.dropped)  # fmt: skip
    return 0


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    logs.configure(level=args.log_level, to_stderr=True, log_file="", log_options=None)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(run(args.kubeconfig, dict(os.environ)))
        return 0
    except StartupError as exc:
        print(f"multusd cert-approver: {exc}", file=sys.stderr)
        return EXIT_FATAL
    finally:
        logs.shutdown()
