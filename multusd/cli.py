"""Command line: ``multusd [--config PATH]`` runs the daemon; subcommands do the rest.

This is the only place that turns outcomes into process exit codes (see ``multusd.errors``).
Upstream's Go flags are single-dash (``-config``); both spellings are accepted so existing
DaemonSet manifests work unchanged.

Every import beyond ``argparse`` and ``sys`` is made by the subcommand that needs it: the exec
probes (``multusd probe``, ``multusd.probe``) run in the daemon's memory cgroup several times a
minute, and importing asyncio alone would double what one costs (``python -X importtime -m
multusd probe``).

Every subcommand and option has a help line, and ``multusd --help`` lists the subcommands from
:data:`SUBCOMMANDS`. The daemon's and the installers' options are declared here; ``probe``,
``demo``, ``kubesim`` and ``cert-approver`` declare theirs in their own modules, which this one
imports only when that subcommand runs. Help texts are plain text, never reST: argparse prints
them as written.
"""

from __future__ import annotations

import argparse
import sys

from multusd import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Sequence

SUBCOMMANDS = {
    "cert-approver": "approve the per-node certificates' requests (perNodeCertificate)",
    "demo": "one pod wired up on this machine, with real plugins (root)",
    "install-plugins": "copy the CNI plugins a node lacks, never replacing one",
    "install-shim": "write multus-shim (and passthru) into the node's CNI bin dir",
    "kubesim": "the Kubernetes API emulator and its fault controls",
    "probe": "the DaemonSet's exec probe of /healthz or /readyz",
}
"""Each subcommand's help line, as ``multusd --help`` lists them (the first argument names one)."""
LOOPS = ("asyncio", "uvloop", "auto")


def version_line(program: str = "multus-daemon") -> str:
    return f"{program}: version:{__version__}(multusd), commit:unknown commit, date:unknown date"


def _daemon_parser() -> argparse.ArgumentParser:
    from multusd.config.daemon import DEFAULT_CONFIG_PATH

    width = max(map(len, SUBCOMMANDS))
    parser = argparse.ArgumentParser(
        prog="multusd",
        # Raw: the subcommand table keeps its columns (the options' help is still wrapped).
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Multus CNI thick-plugin daemon (asyncio). Without a subcommand, it runs "
        "the daemon.",
        epilog="subcommands (multusd SUBCOMMAND --help for each one's options):\n"
        + "\n".join(f"  {name:<{width}}  {line}" for name, line in SUBCOMMANDS.items()),
    )
    parser.add_argument(
        "-config",
        "--config",
        dest="config",
        default=None,
        metavar="PATH",
        help=f"the daemon config to run with (default {DEFAULT_CONFIG_PATH})",
    )
    parser.add_argument(
        "-version",
        "--version",
        dest="version",
        action="store_true",
        help="print the version line and exit",
    )
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="asyncio",
        help="event loop: asyncio (default), uvloop, or auto (uvloop when installed)",
    )
    return parser


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event-loop factory for ``--loop`` (None: asyncio's own). uvloop is optional: ``auto``
    falls back to asyncio without it, ``uvloop`` is a start-up error without it."""
    from multusd.errors import StartupError

    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise StartupError("--loop uvloop: uvloop is not installed") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_daemon(argv: Sequence[str]) -> int:
    import asyncio

    from multusd import heap, logs
    from multusd.config.daemon import DEFAULT_CONFIG_PATH, load_daemon_config
    from multusd.daemon import run
    from multusd.errors import StartupError

    heap.tune_allocator()  # before the first thread (the log writer) starts
    args = _daemon_parser().parse_args(argv)
    if args.version:
        print(version_line())
        return 0
    try:
        config, raw, _data = load_daemon_config(args.config or DEFAULT_CONFIG_PATH)
    except StartupError as exc:
        print(f"multusd: {exc}", file=sys.stderr)
        return exc.exit_code
    logs.configure(
        level=config.log_level,
        to_stderr=config.log_to_stderr,
        log_file=config.log_file,
        log_options=config.log_options,
    )
    try:
        with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
            return runner.run(run(config, raw))
    except StartupError as exc:
        print(f"multusd: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        logs.shutdown()  # write out what is queued before the process ends


def run_install_shim(argv: Sequence[str]) -> int:
    """``multusd install-shim``: the shim, and upstream's ``passthru`` plugin beside it (the
    auxiliary CNI chain's first plugin), into the node's CNI bin dir, which must exist (as for
    ``install-plugins``, a missing one means the host's directory is not mounted where it was
    expected, and creating it would put the shim where no runtime looks); exit 1 if it does not."""
    from multusd.plugins_install import PluginsInstallError, check_dir
    from multusd.shim_install import install_passthru, install_shim

    parser = argparse.ArgumentParser(
        prog="multusd install-shim",
        description="Write the multus-shim, and the passthru plugin beside it, each as one "
        "self-contained executable (atomic replace).",
    )
    parser.add_argument(
        "--dest",
        default="/opt/cni/bin",
        help="the node's CNI bin dir (must exist; default %(default)s)",
    )
    parser.add_argument(
        "--interpreter",
        default="/usr/bin/python3",
        help="the Python the shim's #! line names (default %(default)s; ignored with --bundle)",
    )
    parser.add_argument(
        "--name",
        default="multus-shim",
        help="the shim's file name in --dest (default %(default)s; ignored with --bundle)",
    )
    parser.add_argument(
        "--bundle",
        action="store_true",
        help="also install a private interpreter next to the shim: for hosts without Python",
    )
    parser.add_argument(
        "--host-dir",
        default=None,
        help="with --bundle: where --dest is on the host (e.g. /opt/cni/bin when --dest is "
        "/host/opt/cni/bin in an init container)",
    )
    args = parser.parse_args(argv)
    from pathlib import Path

    try:
        check_dir(Path(args.dest), "destination")
    except PluginsInstallError as exc:  # the same check and words as install-plugins
        print(f"multusd install-shim: {exc}", file=sys.stderr)
        return 1
    # stdout names the shim, as it always has (scripts read it); passthru, which upstream's
    # installer copies beside the shim too, is reported on stderr.
    if args.bundle:
        from multusd.shim_bundle import install_host_passthru, install_host_shim

        host = Path(args.host_dir) if args.host_dir else None
        print(install_host_shim(Path(args.dest), host_dest_dir=host))
        passthru = install_host_passthru(Path(args.dest), host_dest_dir=host)
    else:
        print(install_shim(Path(args.dest), interpreter=args.interpreter, name=args.name))
        passthru = install_passthru(Path(args.dest), interpreter=args.interpreter)
    print(f"multusd install-shim: installed {passthru}", file=sys.stderr)
    return 0


def run_install_plugins(argv: Sequence[str]) -> int:
    """``multusd install-plugins``: copy the CNI plugins the node lacks (the kind overlay's
    init container); one line per plugin, exit 1 when a directory or a plugin is missing."""
    from pathlib import Path

    from multusd.plugins_install import PluginsInstallError, install_plugin, plan

    parser = argparse.ArgumentParser(
        prog="multusd install-plugins",
        description="Install the CNI plugins missing from --dest; never replaces a file.",
    )
    parser.add_argument("--src", default="/usr/lib/cni", help="directory (default %(default)s)")
    parser.add_argument(
        "--dest", required=True, help="the node's CNI bin dir (must exist), e.g. /host/opt/cni/bin"
    )
    parser.add_argument(
        "--only", default=None, help="comma list of plugin names (default: all in --src)"
    )
    args = parser.parse_args(argv)
    only = None if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    src, dest = Path(args.src), Path(args.dest)
    try:
        for name in plan(src, dest, only):
            # Printed as each one lands: a failure later on still shows what was done.
            print(install_plugin(src, dest, name).line(), flush=True)
    except (PluginsInstallError, OSError) as exc:
        print(f"multusd install-plugins: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and not args[0].startswith("-") and args[0] not in SUBCOMMANDS:
        choices = ", ".join(SUBCOMMANDS)
        _daemon_parser().error(f"unknown subcommand {args[0]!r} (choose from {choices})")
    if args and args[0] == "cert-approver":
        from multusd.cert_approver import main as cert_approver_main

        return cert_approver_main(args[1:])
    if args and args[0] == "demo":
        from multusd.demo import main as demo_main

        return demo_main(args[1:])
    if args and args[0] == "install-shim":
        return run_install_shim(args[1:])
    if args and args[0] == "install-plugins":
        return run_install_plugins(args[1:])
    if args and args[0] == "probe":
        from multusd.probe import main as probe_main

        return probe_main(args[1:])
    if args and args[0] == "kubesim":
        from multusd.kubesim.cli import main as kubesim_main

        return kubesim_main(args[1:])
    return run_daemon(args)


if __name__ == "__main__":
    sys.exit(main())
