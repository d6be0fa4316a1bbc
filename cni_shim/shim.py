"""multus-shim's command handlers: forward the CNI call to the daemon, print what it answers.

Upstream behaviour (``pkg/server/api/shim.go``) with deliberate differences: a CNI error
object sent by the daemon keeps its code (only ``msg`` gets the ``CmdAdd (shim): `` prefix),
where upstream flattens every failure to 999; STATUS probes the daemon once and answers code 50
("plugin not available") when it is not there or not ready, where upstream waits 60 s and
answers 999. A 200 answer without a result is an error here; upstream dereferences nil and
crashes. A DEL that finds no daemon while it restarts waits for it or asks the runtime to try
again (code 11), where upstream's is lost (``readiness.DeleteWait``).
"""

from __future__ import annotations

from cni_shim import gojson, gojsonerr, gopath, readiness, skel, transport, wire
from cni_shim.errors import INTERNAL, NOT_AVAILABLE, TRY_AGAIN_LATER, CNIError
from cni_shim.log import Logger

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, BinaryIO, TextIO

DEFAULT_SOCKET_DIR = "/run/multus/"
SOCKET_NAME = "multus.sock"
CNI_PATH = "/cni"
_STRUCT = "ShimNetConf"


class ShimConfig:
    """The keys of the network config the shim itself reads (``ShimNetConf``)."""

    __slots__ = ("cni_version", "log_file", "log_level", "log_to_stderr", "socket_dir")

    def __init__(
        self,
        cni_version: str = "",
        socket_dir: str = DEFAULT_SOCKET_DIR,
        log_file: str = "",
        log_level: str = "",
        log_to_stderr: bool = False,
    ) -> None:
        self.cni_version = cni_version
        self.socket_dir = socket_dir or DEFAULT_SOCKET_DIR
        self.log_file = log_file
        self.log_level = log_level
        self.log_to_stderr = log_to_stderr


def parse_shim_config(stdin_data: bytes) -> ShimConfig:
    """Decode the shim's keys with Go's typing rules; a mismatch is upstream's error text."""
    try:
        obj = gojsonerr.loads(stdin_data)
        if obj is not None and not isinstance(obj, dict):
            raise gojsonerr.value_type_error(obj, "api.ShimNetConf")
        obj = obj or {}
        return ShimConfig(
            cni_version=gojsonerr.string_field(obj, "cniVersion", _STRUCT),
            socket_dir=gojsonerr.string_field(obj, "daemonSocketDir", _STRUCT),
            log_file=gojsonerr.string_field(obj, "logFile", _STRUCT),
            log_level=gojsonerr.string_field(obj, "logLevel", _STRUCT),
            log_to_stderr=gojsonerr.bool_field(obj, "logToStderr", _STRUCT),
        )
    except gojsonerr.GoJSONError as exc:
        raise CNIError(
            INTERNAL,
            "invalid CNI configuration passed to multus-shim: "
            f"failed to gather the multus configuration: {exc}",
        ) from exc


def socket_path(socket_dir: str) -> str:
    """Go's ``filepath.Join(dir, "multus.sock")`` (which also cleans the path)."""
    return gopath.join(socket_dir, SOCKET_NAME)


class _Shim:
    """One invocation: the environment to forward, the output streams, the logger."""

    def __init__(
        self, environ: Mapping[str, str], stdout: TextIO | BinaryIO, stderr: TextIO | BinaryIO
    ) -> None:
        self.environ = environ
        self.stdout = stdout
        self.log = Logger(stderr)

    def _configure(self, stdin_data: bytes) -> ShimConfig:
        conf = parse_shim_config(stdin_data)
        self.log.to_stderr = conf.log_to_stderr
        if conf.log_file:
            self.log.file = conf.log_file
        if conf.log_level:
            self.log.set_level(conf.log_level)
        return conf

    def _wait(self, sock: str) -> None:
        readiness.wait_until_ready(sock, timeout=readiness.timeout_from_env(self.environ))

    def _post(
        self,
        args: skel.CmdArgs,
        *,
        ready: Callable[[str], None],
        printed: bool = False,
        unreachable: int = INTERNAL,
        conf: ShimConfig | None = None,
    ) -> tuple[dict[str, Any] | str | None, str]:
        """``ready(socket)``, then ``POST /cni``; returns (result, the shim config's cniVersion).

        With ``printed`` the daemon is asked for the print-ready text; the result is then that
        ``str`` when the daemon obliged (ours does, upstream's does not). ``unreachable`` is the
        code of a failed ``/cni`` exchange (the daemon went away after its probe). ``conf`` is
        the shim config when the caller already read it.
        """
        conf = conf or self._configure(args.stdin_data)
        sock = socket_path(conf.socket_dir)
        ready(sock)
        stdin_text = args.stdin_data.decode("utf-8", "replace")
        try:
            status, headers, body = transport.post(
                sock,
                CNI_PATH,
                wire.encode_request(self.environ, args.stdin_data),
                headers={wire.PRINT_REQUEST: "1"} if printed else None,
            )
        except transport.TransportError as exc:
            raise readiness.Unreachable(unreachable, f"{exc}: StdinData: {stdin_text}") from exc
        if status != 200:
            err = wire.decode_error_body(status, body)
            if isinstance(err, wire.RequestFailed):
                raise CNIError(INTERNAL, f"{err.msg}: StdinData: {stdin_text}") from err
            raise err
        if printed and wire.PRINTED.lower() in headers:
            return body.decode("utf-8", "replace"), conf.cni_version
        return wire.decode_response(body), conf.cni_version

    def _fail(self, prefix: str, exc: CNIError) -> CNIError:
        err = exc.with_prefix(prefix)
        self.log.error(str(err))
        return err

    def add(self, args: skel.CmdArgs) -> None:
        prefix = "CmdAdd (shim): "
        try:
            result, cni_version = self._post(args, ready=self._wait, printed=True)
            if result is None:
                raise CNIError(INTERNAL, "the daemon answered 200 without a result")
            text = result if isinstance(result, str) else _render(result, cni_version)
        except CNIError as exc:
            raise self._fail(prefix, exc) from exc
        self.log.verbose(prefix + (text if isinstance(result, str) else gojson.dumps(result)))
        skel.emit(self.stdout, text)

    def _simple(self, args: skel.CmdArgs, prefix: str) -> None:
        try:
            self._post(args, ready=self._wait)
        except CNIError as exc:
            raise self._fail(prefix, exc) from exc

    def check(self, args: skel.CmdArgs) -> None:
        self._simple(args, "CmdCheck (shim): ")

    def gc(self, args: skel.CmdArgs) -> None:
        self._simple(args, "CmdGC (shim): ")

    def status(self, args: skel.CmdArgs) -> None:
        """One readiness probe, no waiting: a daemon that is absent, starting or draining is
        code 50 at once; once it answers, its own code stands (a delegate's STATUS error)."""
        try:
            self._post(args, ready=readiness.ready_now, unreachable=NOT_AVAILABLE)
        except CNIError as exc:
            raise self._fail("CmdStatus (shim): ", exc) from exc

    def delete(self, args: skel.CmdArgs) -> None:
        """DEL never fails once skel accepted it, unless the daemon is restarting.

        The daemon's own answers, errors included, are only logged (upstream), except code 11
        ("try again later": ours refused it for now, full or shutting down), which fails the
        DEL so that the runtime asks again instead of the DEL being lost. When nobody
        answers, the daemon's :class:`~cni_shim.readiness.RestartNote` decides: none, or a
        stale one, and the DEL is logged and dropped as upstream does; while a restart is
        under way the DEL waits for the replacement (bounded, like ADD) and is sent to it,
        or fails with code 11 so that the runtime asks again (containerd fails the
        Stop/RemovePodSandbox, which the kubelet retries): a restart loses no DEL.
        """
        prefix = "CmdDel (shim): "
        try:
            conf = self._configure(args.stdin_data)
        except CNIError as exc:
            self._fail(prefix, exc)
            return
        sock = socket_path(conf.socket_dir)
        wait = readiness.DeleteWait(
            conf.socket_dir, sock, timeout=readiness.timeout_from_env(self.environ)
        )
        while True:
            try:
                self._post(args, ready=readiness.check_now, conf=conf)
                return
            except readiness.Unreachable as exc:
                try:
                    wait.after(exc)  # the daemon answers again: send the DEL to it
                except readiness.GoneForGood as gone:
                    self._fail(prefix, gone)
                    return
                except CNIError as retry:
                    raise self._fail(prefix, retry) from exc
            except CNIError as exc:
                if exc.code == TRY_AGAIN_LATER:  # refused for now: the runtime must ask again
                    raise self._fail(prefix, exc) from exc
                self._fail(prefix, exc)
                return


def _render(result: dict[str, Any], cni_version: str) -> str:
    """``types.PrintResult`` of a ``{"Result":...}`` answer (an upstream daemon's)."""
    from cni_shim import results

    return results.render(result, cni_version)


def main(
    environ: Mapping[str, str],
    stdin: bytes | BinaryIO,
    stdout: TextIO | BinaryIO,
    stderr: TextIO | BinaryIO,
) -> int:
    """Run one CNI invocation; returns the exit code (0, or 1 after printing an error).

    ``stdin`` may be the bytes already read or a binary stream, read only once the
    environment has been validated (so a bare ``multus-shim`` on a terminal does not block).
    """
    shim = _Shim(environ, stdout, stderr)
    handlers = {
        "ADD": shim.add,
        "CHECK": shim.check,
        "DEL": shim.delete,
        "GC": shim.gc,
        "STATUS": shim.status,
    }
    return skel.run(environ, stdin, stdout, stderr, handlers)
