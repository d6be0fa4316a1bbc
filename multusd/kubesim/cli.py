"""``multusd kubesim ...``: serve the emulator, or drive a running one.

``main(argv)`` takes the arguments after ``kubesim``:

    serve --port N [--host H] [--tls] --kubeconfig-out PATH [--seed FILE ...]
          [--incluster-dir DIR] [--token T] [--bookmark-interval S] [--history N]
          [--no-watch-list] [--watch-cache-ignores-limit]
    faults   --kubeconfig PATH [get | clear | set JSON | update JSON]
    error    --kubeconfig PATH --code 500 [--verb V] [--resource R] [--rate P] [--count N]
    latency  --kubeconfig PATH --seconds S [--verb V] [--resource R]
    hide | unhide --kubeconfig PATH NAMESPACE NAME [--resource pods]
    drop-watches --kubeconfig PATH [--mode eof|reset]
    expire-watches --kubeconfig PATH [--count N]
    snapshot --kubeconfig PATH
    restore  --kubeconfig PATH [--new-uids]
    stats    --kubeconfig PATH [--reset] [--log N]
    seed     --kubeconfig PATH FILE ...

``serve`` writes the kubeconfig only once it is listening, prints one line with the URL, and
runs until SIGTERM or SIGINT. Exit codes: 0 done, 1 failure, 2 usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from multusd.kubesim import client
from multusd.kubesim.errors import ApiError
from multusd.kubesim.server import KubeSim
from multusd.kubesim.state import Settings

_DEFAULTS = Settings()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="multusd kubesim", description="Kubernetes API emulator")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the emulator until SIGTERM/SIGINT")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--tls", action="store_true", help="serve https with a generated CA")
    serve.add_argument(
        "--kubeconfig-out", type=Path, required=True, help="write a kubeconfig for clients here"
    )
    serve.add_argument(
        "--seed", type=Path, action="append", default=[], metavar="FILE",
        help="YAML/JSON manifests to load at start (repeatable)",
    )  # fmt: skip
    serve.add_argument(
        "--incluster-dir", type=Path, help="write a pod service-account dir (token, ca.crt) here"
    )
    serve.add_argument(
        "--token", default=_DEFAULTS.token, help="the bearer token clients must send"
    )
    serve.add_argument(
        "--bookmark-interval", type=float, default=_DEFAULTS.bookmark_interval, metavar="S",
        help="seconds between BOOKMARK events on watches that ask for them",
    )  # fmt: skip
    serve.add_argument(
        "--history",
        type=int,
        default=_DEFAULTS.history_limit,
        metavar="N",
        help="changes kept per resource for watches to resume across (the watch cache)",
    )

    serve.add_argument(
        "--no-watch-list",
        action="store_true",
        help="refuse streaming lists (sendInitialEvents) as a server without WatchList does",
    )
    serve.add_argument(
        "--watch-cache-ignores-limit",
        action="store_true",
        help='answer lists at resourceVersion "0" whole, as kube-apiserver\'s watch cache does',
    )

    def remote(name: str, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text)
        p.add_argument(
            "--kubeconfig", type=Path, required=True, help="the kubeconfig `serve` wrote"
        )
        return p

    faults = remote("faults", "show or change the fault configuration")
    faults.add_argument(
        "action", nargs="?", default="get", choices=["get", "clear", "set", "update"],
        help="print, clear, replace or merge the fault configuration (default: get)",
    )  # fmt: skip
    faults.add_argument("document", nargs="?", help="JSON for set/update")
    error = remote("error", "add an error rule")
    error.add_argument("--code", type=int, required=True, help="HTTP status to answer with")
    error.add_argument(
        "--verb", default="*", help="API verb to match (get, list, watch, patch, ...; * for any)"
    )
    error.add_argument("--resource", default="*", help="resource to match (pods, ...; * for any)")
    error.add_argument(
        "--subresource", default="*", help="subresource to match (status, ...; * for any)"
    )
    error.add_argument(
        "--rate", type=float, default=1.0, help="share of matching requests to fail (0-1)"
    )
    error.add_argument("--count", type=int, help="stop after this many errors (default: never)")
    error.add_argument(
        "--retry-after", type=int, default=1, help="the Retry-After seconds of a 429 or 503"
    )
    latency = remote("latency", "add a latency rule")
    latency.add_argument("--seconds", type=float, required=True, help="delay added to each match")
    latency.add_argument("--verb", default="*", help="API verb to match (* for any)")
    latency.add_argument("--resource", default="*", help="resource to match (* for any)")
    latency.add_argument(
        "--jitter", type=float, default=0.0, help="up to this many seconds more, at random"
    )
    for name in ("hide", "unhide"):
        p = remote(name, f"{name} an object in lists and watches")
        p.add_argument("namespace", help="the object's namespace")
        p.add_argument("name", help="the object's name")
        p.add_argument("--resource", default="pods", help="its resource (default: pods)")
    drop = remote("drop-watches", "close every open watch")
    drop.add_argument(
        "--mode", default="eof", choices=["eof", "reset"],
        help="end the streams cleanly (eof) or abort the connections (reset)",
    )  # fmt: skip
    expire = remote("expire-watches", "answer the next watches with 410")
    expire.add_argument("--count", type=int, default=1, help="how many watches get the 410")
    remote("snapshot", "take an etcd backup of every object (for restore)")
    restore = remote("restore", "go back to the snapshot: older versions, every watch cut")
    restore.add_argument("--new-uids", action="store_true", help="re-create every object")
    stats = remote("stats", "print request counters and the request log")
    stats.add_argument("--reset", action="store_true", help="zero the counters after printing")
    stats.add_argument("--log", type=int, default=20, help="how many recent requests to print")
    seed = remote("seed", "create or replace objects from manifests")
    seed.add_argument("files", type=Path, nargs="+", help="YAML/JSON manifests")
    return parser


async def _serve(args: argparse.Namespace) -> int:
    settings = Settings(
        token=args.token or None,
        bookmark_interval=args.bookmark_interval,
        history_limit=args.history,
        watch_list=not args.no_watch_list,
        watch_cache_ignores_limit=args.watch_cache_ignores_limit,
    )
    sim = KubeSim(settings, host=args.host, port=args.port, tls_enabled=args.tls)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.seed:
            for line in await sim.seed_files(*args.seed):
                print(line, flush=True)
        async with sim:
            if args.incluster_dir:
                await sim.write_incluster(args.incluster_dir)
            await sim.write_kubeconfig(args.kubeconfig_out)
            print(f"kubesim serving on {sim.url} (kubeconfig {args.kubeconfig_out})", flush=True)
            await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0


async def _remote(args: argparse.Namespace) -> int:
    async with await client.connect(args.kubeconfig) as ctl:
        result: Any = None
        cmd = args.command
        if cmd == "faults":
            if args.action == "get":
                result = await ctl.faults()
            elif args.action == "clear":
                await ctl.clear_faults()
                result = await ctl.faults()
            else:
                if not args.document:
                    raise SystemExit(2)
                doc = json.loads(args.document)
                result = await (
                    ctl.set_faults(doc) if args.action == "set" else ctl.update_faults(doc)
                )
        elif cmd == "error":
            await ctl.add_error(
                code=args.code, verb=args.verb, resource=args.resource,
                subresource=args.subresource, rate=args.rate, count=args.count,
                retry_after=args.retry_after,
            )  # fmt: skip
            result = await ctl.faults()
        elif cmd == "latency":
            await ctl.add_latency(
                seconds=args.seconds, verb=args.verb, resource=args.resource, jitter=args.jitter
            )
            result = await ctl.faults()
        elif cmd in ("hide", "unhide"):
            await (ctl.hide if cmd == "hide" else ctl.unhide)(
                args.namespace, args.name, args.resource
            )
            result = await ctl.faults()
        elif cmd == "drop-watches":
            result = {"dropped": await ctl.drop_watches(args.mode)}
        elif cmd == "expire-watches":
            await ctl.expire_next_watches(args.count)
            result = await ctl.faults()
        elif cmd == "snapshot":
            result = {"resourceVersion": str(await ctl.snapshot())}
        elif cmd == "restore":
            result = {"resourceVersion": str(await ctl.restore(new_uids=args.new_uids))}
        elif cmd == "stats":
            result = await ctl.stats(args.log)
            if args.reset:
                await ctl.reset_stats()
        elif cmd == "seed":
            lines: list[str] = []
            for path in args.files:
                text = await asyncio.to_thread(Path(path).read_text, encoding="utf-8")
                lines.extend(await ctl.seed(text))
            result = {"applied": lines}
        print(json.dumps(result, indent=2), flush=True)
    return 0


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else 2
    try:
        if args.command == "serve":
            return asyncio.run(_serve(args))
        return asyncio.run(_remote(args))
    except (ApiError, client.ControlError, OSError, ValueError) as exc:
        print(f"multusd kubesim: {exc}", file=sys.stderr)
        return 1
