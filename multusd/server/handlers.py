"""``/cni``, ``/healthz`` and ``/readyz``: decode the wire format, build the command, map errors.

Every failure leaves here as HTTP 400 with a CNI error object (``code``, ``msg``, ``details``),
so the code a plugin or the daemon chose reaches the runtime. Upstream's shim understands that
body too (it decodes CNI error objects before falling back to text). A request that cannot even
be read or decoded is logged in one line, never with a traceback: hostile input is not a bug.

Each request runs as a task of the :class:`ContainerQueue` (its container's turn, the caps, a
superseding DEL, its deadline); when its client goes away the handler is cancelled (aiohttp's
``handler_cancellation``, ``server.runner``) and cancels the request with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from cni_shim import gojson, results, wire
from cni_shim.errors import DECODING_FAILURE, INTERNAL, INVALID_ENVIRONMENT, IO_FAILURE, CNIError
from multusd import timeline
from multusd.cni.args import parse_envelope_args
from multusd.commands.add import ROLLBACK_SECONDS, add
from multusd.commands.check import check
from multusd.commands.context import CmdArgs, Services, request_scope
from multusd.commands.delete import delete
from multusd.commands.gc import gc
from multusd.commands.hotplug import hotplug as run_hotplug
from multusd.commands.status import status
from multusd.config.daemon import DaemonConfig, decode_daemon_config
from multusd.config.override import override_config
from multusd.config.schema import decode
from multusd.errors import internal
from multusd.heap import IdleTrim
from multusd.logs.format import request_id
from multusd.networks.netconf import NetConf
from multusd.server.concurrency import ContainerQueue, RequestGate
from multusd.server.connection import Arrivals
from multusd.server.validate import check_config_text, check_env_text, check_pod_env
from multusd.timeline import Phases

log = logging.getLogger(__name__)

POD_COMMANDS = ("ADD", "DEL", "CHECK")
NODE_COMMANDS = ("GC", "STATUS")

CANCEL_GRACE = ROLLBACK_SECONDS + 5.0
"""After its deadline a request's plugins are killed and it rolls back; only if it is still
running this much later (something other than a plugin hangs) is it cancelled outright."""


@dataclass
class DaemonState:
    """What the probes report: ``/readyz`` flips to 500 the moment shutdown begins."""

    shutting_down: bool = False
    in_flight: int = 0
    ready_reason: str = "serving"
    """What ``/readyz`` reports besides its status: how the caches came up."""
    failure: str = ""
    """Set when a background task died; the daemon then exits non-zero."""
    unreachable: str = ""
    """Why the shims cannot reach the daemon at its socket's path (``server.socketguard``),
    ``""`` while they can; ``/healthz`` and ``/readyz`` answer 500 meanwhile."""
    idle: Callable[[], None] | None = field(default=None, repr=False)


def _env_error(msg: str) -> CNIError:
    return CNIError(INVALID_ENVIRONMENT, msg)


def build_cmd_args(env: dict[str, str], config: bytes, *, pod_context: bool = False) -> CmdArgs:
    """Upstream ``extractCniData`` (docs/upstream.md, "Request handling (/cni)", steps 2–5), without
    the override.

    ``pod_context`` demands the pod's variables for every command (``/delegate`` does).
    """
    check_env_text(env)
    command = env.get("CNI_COMMAND")
    if not command:
        raise _env_error("unexpected or missing CNI_COMMAND")
    if command in NODE_COMMANDS and not pod_context:
        return CmdArgs(command, "", "", "", "", config)
    prefix = "could not extract the CNI command args: "
    if "CNI_CONTAINERID" not in env:
        raise _env_error(prefix + "missing CNI_CONTAINERID")
    # Upstream also demands CNI_NETNS on DEL, where the spec makes it optional; a runtime that
    # omits it would never get its delegates deleted (docs/upstream.md, quirk 12). Not here.
    if "CNI_NETNS" not in env and command != "DEL":
        raise _env_error(prefix + "missing CNI_NETNS")
    if "CNI_ARGS" not in env:
        raise _env_error(prefix + "missing CNI_ARGS")
    cni_args = env["CNI_ARGS"]
    try:
        pairs = parse_envelope_args(cni_args)
    except CNIError as exc:
        raise exc.with_prefix("could not extract the kubernetes runtime args: ") from exc
    for key in ("K8S_POD_NAMESPACE", "K8S_POD_NAME"):
        if key not in pairs:
            raise _env_error(f"could not extract the kubernetes runtime args: missing {key}")
    if command in POD_COMMANDS and not (pairs["K8S_POD_NAME"] and pairs["K8S_POD_NAMESPACE"]):
        raise _env_error(
            "required CNI variable missing. pod name: "
            f"{pairs['K8S_POD_NAME']}; pod namespace: {pairs['K8S_POD_NAMESPACE']}"
        )
    container_id = env["CNI_CONTAINERID"]
    netns = env.get("CNI_NETNS", "")
    ifname = env.get("CNI_IFNAME")
    if command in POD_COMMANDS:
        # Before anything uses them: the ID and the name end up in file names.
        check_pod_env(command, container_id, netns, ifname)
    return CmdArgs(
        command=command,
        container_id=container_id,
        netns=netns,
        ifname=ifname or "eth0",  # missing (and, on DEL, empty): eth0, as upstream
        args=cni_args,
        config=config,
    )


Command = Callable[[CmdArgs, Services], Awaitable[dict[str, Any] | None]]


_COMMANDS: dict[str, Command] = {
    "ADD": add,
    "DEL": delete,
    "CHECK": check,
    "STATUS": status,
    "GC": gc,
}


def _config_version(config: bytes) -> str:
    """The ``cniVersion`` of the config the shim was given (what it prints results in)."""
    try:
        conf = gojson.loads(config)
    except ValueError:
        return ""
    version = conf.get("cniVersion", "") if isinstance(conf, dict) else ""
    return version if isinstance(version, str) else ""


def error_response(err: CNIError, status: int = 400) -> web.Response:
    """HTTP 400 (or ``status``) with the CNI error object; code 0 (libcni's ``ErrUnknown``) is
    sent as 999, since a runtime must never read a failure as code 0."""
    if err.code == 0:
        err = CNIError(INTERNAL, err.msg, err.details)
    # "replace": the last line of defence; decoding already turned lone surrogates into U+FFFD.
    body = err.to_json().encode("utf-8", "replace")
    return web.Response(status=status, body=body, content_type="application/json")


@dataclass
class Handlers:
    services: Services
    daemon_raw: dict[str, Any] | None
    ignore_readiness: bool
    state: DaemonState
    gate: RequestGate = field(default_factory=lambda: RequestGate(None))
    readiness_check: Callable[[], Awaitable[None]] | None = None
    """Benchmark-only (``benchmarkReadinessStat``): the seed's per-request readiness stat."""
    config: DaemonConfig | None = None
    """The daemon config, whose server limits apply; ``None``: decoded from ``daemon_raw`` (a
    bad value: ``ConfigError``)."""
    heap: IdleTrim = field(default_factory=IdleTrim)
    arrivals: Arrivals = field(default_factory=dict)
    """When each connection's CNI request arrived, by transport (``server.connection`` fills it
    in): a request's deadline counts from then, time waiting unread in the intake included."""
    limits: DaemonConfig = field(init=False)
    """The server's limits (``requestTimeoutSeconds``, ``maxPendingRequests``, ...)."""
    queue: ContainerQueue = field(init=False)

    def __post_init__(self) -> None:
        self.limits = self.config or decode_daemon_config(self.daemon_raw or {})
        limits = self.limits
        self.queue = ContainerQueue(limits.max_pending_per_container, limits.max_pending, self.gate)

    async def cni(self, request: web.Request) -> web.Response:
        return await self._serve(request, hotplug=False)

    async def delegate(self, request: web.Request) -> web.Response:
        """``/delegate``: the hot-plug API (one delegate, see ``commands.hotplug``)."""
        return await self._serve(request, hotplug=True)

    async def _serve(self, request: web.Request, *, hotplug: bool) -> web.Response:
        started = time.monotonic()
        self.state.in_flight += 1
        self.heap.busy()
        try:
            with timeline.timeline() as phases:
                return await self._handle(request, started, hotplug, phases)
        finally:
            self.state.in_flight -= 1
            if self.state.in_flight == 0:
                self.heap.idle()  # what a burst fragmented goes back to the kernel
                if self.state.idle is not None:
                    self.state.idle()

    @functools.cached_property
    def hotplug_settings(self) -> NetConf:
        """``/delegate``'s Multus settings: defaults overlaid with the daemon config
        (docs/upstream.md, "Hot-plug (/delegate)").

        The daemon config was validated at start-up with the same field types.
        """
        return decode(NetConf, self.daemon_raw or {})

    def _runner(
        self, cmd: CmdArgs, attributes: dict[str, Any] | None, hotplug: bool
    ) -> Callable[[], Awaitable[dict[str, Any] | None]] | None:
        if hotplug:
            settings = self.hotplug_settings
            return lambda: run_hotplug(cmd, attributes, self.services, settings)
        command = _COMMANDS.get(cmd.command)
        return None if command is None else (lambda: command(cmd, self.services))

    async def _read_body(self, request: web.Request) -> bytes:
        """The whole body within ``requestBodyTimeoutSeconds``; unreadable bodies are CNI errors.

        A body that is too large raises aiohttp's 413 (answered by ``app.upstream_errors``): at
        once when its ``Content-Length`` says so, else once more than ``maxRequestBytes`` (the
        app's ``client_max_size``) arrived.
        """
        declared = request.content_length
        if declared is not None and declared > request.client_max_size:
            raise web.HTTPRequestEntityTooLarge(request.client_max_size, declared)
        limit = self.limits.body_timeout
        try:
            async with asyncio.timeout(limit):
                return await request.read()
        except TimeoutError:
            raise CNIError(
                IO_FAILURE, f"the request body did not arrive within {limit:g}s"
            ) from None
        except web.RequestPayloadError as exc:  # broken chunks, a peer that left half-way
            reason = " ".join(str(exc).split())  # aiohttp's texts span lines
            raise CNIError(DECODING_FAILURE, f"could not read the request body: {reason}") from None

    def arrival(self, request: web.BaseRequest) -> float:
        """When ``request`` arrived (the loop's time): as its connection recorded it, or now."""
        transport = request.transport
        arrived = self.arrivals.get(transport) if transport is not None else None
        return arrived if arrived is not None else asyncio.get_running_loop().time()

    async def _handle(
        self, request: web.Request, started: float, hotplug: bool, phases: Phases
    ) -> web.Response:
        try:
            body = await self._read_body(request)
            env, stdin, attributes = wire.decode_request(body)
            cmd = build_cmd_args(env, stdin, pod_context=hotplug)
            check_config_text(stdin)
            config = cmd.config
            if not hotplug:  # /delegate's config is the plugin's own: not a Multus config
                config = override_config(
                    cmd.config, self.daemon_raw, ignore_readiness=self.ignore_readiness
                )
            # From the request's arrival: time spent waiting unread in the intake counts.
            deadline = self.arrival(request) + self.limits.request_timeout
            cmd = dataclasses.replace(cmd, config=config, deadline=deadline)
            runner = self._runner(cmd, attributes, hotplug)
            timeline.note_phase("decode", time.monotonic() - started)  # body read, decoded, checked
        except CNIError as exc:
            log.info("%s rejected: %s", request.path, exc)
            return error_response(exc)  # a body left unread is drained briefly, not waited for
        if runner is None:
            return error_response(_env_error(f"unknown cmd type: {cmd.command}"))
        request_id.set(cmd.request_id)  # this task's log lines carry it from here on
        assert cmd.deadline is not None
        result: dict[str, Any] | None = None
        try:
            result = await self.queue.run(
                cmd.container_id or None,  # node-level commands (GC, STATUS) have none
                functools.partial(self._work, cmd, runner),
                deadline=cmd.deadline + CANCEL_GRACE,
                supersedable=not hotplug and cmd.command in ("ADD", "CHECK"),
                supersedes=not hotplug and cmd.command == "DEL",
                urgent=cmd.command == "DEL",
            )
        except CNIError as exc:
            outcome: CNIError | None = self._wrap(cmd, exc, hotplug)
        except asyncio.CancelledError:
            log.info(
                "%s %s container=%s cancelled after %.1fms: the client closed its connection",
                request.path, cmd.command, cmd.container_id, (time.monotonic() - started) * 1000,
            )  # fmt: skip
            raise
        except Exception as exc:  # a bug must not kill the daemon or hang the runtime
            log.exception("%s failed unexpectedly", cmd.command)
            outcome = self._wrap(cmd, internal(f"internal error: {exc!r}"), hotplug)
        else:
            outcome = None
        seconds = time.monotonic() - started
        self.services.metrics.observe_command(cmd.command, seconds, ok=outcome is None)
        elapsed = seconds * 1000
        log.info(
            "%s %s container=%s args=%s took %.1fms: %s",
            request.path,
            cmd.command,
            cmd.container_id,
            cmd.args,
            elapsed,
            "ok" if outcome is None else outcome,
        )
        with timeline.phase("respond"):
            response = self._response(request, stdin, result, outcome)
        if log.isEnabledFor(logging.DEBUG):  # where the wall time went (docs/performance.md)
            log.debug(
                "%s %s phases (container=%s): %s", request.path, cmd.command, cmd.container_id,
                timeline.phases_text(phases, time.monotonic() - started),
            )  # fmt: skip
        return response

    @staticmethod
    def _response(
        request: web.Request, stdin: bytes, result: dict[str, Any] | None, outcome: CNIError | None
    ) -> web.Response:
        """The answer: the error, nothing (DEL, CHECK...), or the result in the config's
        version, as text ready to print when the shim asks for it (ours does)."""
        if outcome is not None:
            return error_response(outcome)
        if result is None:
            return web.Response()
        try:
            version = _config_version(stdin)
            if wire.PRINT_REQUEST in request.headers:
                text = results.render(result, version)
                return web.Response(text=text, headers={wire.PRINTED: "1"})
            body = wire.encode_response(result, version)
            return web.Response(body=body, content_type="application/json")
        except CNIError as exc:
            return error_response(exc.with_prefix("failed to generate the CNI result: "))

    async def _work(
        self, cmd: CmdArgs, runner: Callable[[], Awaitable[dict[str, Any] | None]]
    ) -> dict[str, Any] | None:
        """The request's turn (its container's, and a ``connectionLimit`` slot): the command,
        its plugins bound by the request's deadline."""
        if self.readiness_check is not None and cmd.command in ("ADD", "CHECK"):
            await self.readiness_check()
        with request_scope(cmd):
            return await runner()

    async def cancel_all(self) -> None:
        """Shutdown: cancel every request still running (plugins killed, ADDs rolled back)."""
        await self.queue.cancel_all()

    @staticmethod
    def _wrap(cmd: CmdArgs, err: CNIError, hotplug: bool = False) -> CNIError:
        if cmd.command == "ADD" and not hotplug:
            k8s = parse_envelope_args(cmd.args)
            err = err.with_prefix(
                f"error configuring pod [{k8s['K8S_POD_NAMESPACE']}/{k8s['K8S_POD_NAME']}] "
                "networking: "
            )
        if cmd.command in POD_COMMANDS:
            err = err.with_prefix(cmd.describe())
        return err

    async def healthz(self, request: web.Request) -> web.Response:
        """200 while the daemon can be reached; 500 with the reason once its socket's path is
        lost and cannot be bound again (``server.socketguard``): on ``healthPort`` the kubelet
        then restarts it, rather than keep a daemon no shim can reach."""
        if self.state.unreachable:
            return web.Response(status=500, text=self.state.unreachable)
        return web.Response()

    async def readyz(self, request: web.Request) -> web.Response:
        """200 while serving, 500 from the moment shutdown begins (upstream HEAD), and while
        the shims cannot reach the daemon (``/healthz``).

        The body says how the daemon came up (``caches synced``, or serving after the bounded
        wait, or no Kubernetes); upstream sends no body and clients only read the status.
        """
        status = 500 if self.state.shutting_down or self.state.unreachable else 200
        body = gojson.dumps({"ready": status == 200, "caches": self.state.ready_reason})
        return web.Response(status=status, text=body, content_type="application/json")
