"""libcni's ``pkg/skel`` (v1.3.0) dispatcher: everything a plugin does before its own code runs.

A runtime sees these checks as part of multus-shim's contract (which env is required per
command, in which order the names are listed, the container-id and interface-name rules, the
version gates), so they are reproduced exactly, error codes and texts included. The daemon
re-uses the validators so that both ends reject the same inputs with the same words.
"""

from __future__ import annotations

import io

from cni_shim import gojsonerr
from cni_shim.errors import (
    DECODING_FAILURE,
    INCOMPATIBLE_VERSION,
    INTERNAL,
    INVALID_ENVIRONMENT,
    INVALID_NETWORK_CONFIG,
    IO_FAILURE,
    UNKNOWN_CONTAINER,
    CNIError,
)
from cni_shim.goquote import go_quote
from cni_shim.versions import LATEST, SUPPORTED_VERSIONS, version_ge

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import BinaryIO, TextIO

    Handler = Callable[["CmdArgs"], None]
    Stdin = bytes | BinaryIO
    Output = TextIO | BinaryIO

INVALID_NETNS = 8
"""``ErrInvalidNetNS``: the plugin was asked to work on its own network namespace."""

ABOUT = "meta-plugin that delegates to other CNI plugins"
MAX_IFNAME_LEN = 15

_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_REST = _NAME_FIRST | frozenset("_.-")

# (name, commands that require it) in skel's order; the order is visible in
# the "required env variables [...] missing" text.
_ENV_RULES: tuple[tuple[str, frozenset[str]], ...] = (
    ("CNI_COMMAND", frozenset({"ADD", "CHECK", "DEL", "GC", "STATUS"})),
    ("CNI_CONTAINERID", frozenset({"ADD", "CHECK", "DEL"})),
    ("CNI_NETNS", frozenset({"ADD", "CHECK"})),
    ("CNI_IFNAME", frozenset({"ADD", "CHECK", "DEL"})),
    ("CNI_ARGS", frozenset()),
    ("CNI_PATH", frozenset({"ADD", "CHECK", "DEL", "GC", "STATUS"})),
    ("CNI_NETNS_OVERRIDE", frozenset()),
)

# Minimum config version per gated command, and the word used in the error text.
_VERSION_GATES = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}


def _valid_name(s: str) -> bool:
    # Hand-rolled ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$ (Go RE2 semantics: '$' is end of text), so the
    # shim does not pay for importing ``re``.
    return bool(s) and s[0] in _NAME_FIRST and all(c in _NAME_REST for c in s[1:])


def validate_container_id(container_id: str) -> None:
    """libcni ``utils.ValidateContainerID``."""
    if not container_id:
        raise CNIError(UNKNOWN_CONTAINER, "missing containerID")
    if not _valid_name(container_id):
        raise CNIError(INVALID_ENVIRONMENT, "invalid characters in containerID", container_id)


def validate_network_name(name: str) -> None:
    """libcni ``utils.ValidateNetworkName`` (the trailing colon on empty names is upstream's)."""
    if not name:
        raise CNIError(INVALID_NETWORK_CONFIG, "missing network name:")
    if not _valid_name(name):
        raise CNIError(INVALID_NETWORK_CONFIG, "invalid characters found in network name", name)


def _is_go_space(ch: str) -> bool:
    # unicode.IsSpace: Python's isspace() also accepts U+001C..U+001F, Go does not.
    return ch.isspace() and not "\x1c" <= ch <= "\x1f"


def validate_ifname(ifname: str) -> None:
    """libcni ``utils.ValidateInterfaceName`` (length counted in UTF-8 bytes, as the kernel)."""
    if not ifname:
        raise CNIError(INVALID_ENVIRONMENT, "interface name is empty")
    if len(ifname.encode("utf-8", "surrogateescape")) > MAX_IFNAME_LEN:
        raise CNIError(
            INVALID_ENVIRONMENT,
            "interface name is too long",
            f"interface name should be less than {MAX_IFNAME_LEN + 1} characters",
        )
    if ifname in (".", ".."):
        raise CNIError(INVALID_ENVIRONMENT, "interface name is . or ..")
    if any(c in "/:" or _is_go_space(c) for c in ifname):
        raise CNIError(
            INVALID_ENVIRONMENT, "interface name contains / or : or whitespace characters"
        )


_VALIDATORS = {"CNI_CONTAINERID": validate_container_id, "CNI_IFNAME": validate_ifname}


class CmdArgs:
    """skel.CmdArgs: what a command handler gets."""

    __slots__ = (
        "args",
        "command",
        "container_id",
        "ifname",
        "netns",
        "netns_override",
        "path",
        "stdin_data",
    )

    def __init__(self, env: dict[str, str], stdin_data: bytes) -> None:
        self.command = env["CNI_COMMAND"]
        self.container_id = env["CNI_CONTAINERID"]
        self.netns = env["CNI_NETNS"]
        self.ifname = env["CNI_IFNAME"]
        self.args = env["CNI_ARGS"]
        self.path = env["CNI_PATH"]
        self.netns_override = env["CNI_NETNS_OVERRIDE"]
        self.stdin_data = stdin_data


def version_output() -> str:
    """What ``VERSION`` prints (``json.Encoder`` output, so with a trailing newline)."""
    versions = ",".join(f'"{v}"' for v in SUPPORTED_VERSIONS)
    return f'{{"cniVersion":"{LATEST}","supportedVersions":[{versions}]}}\n'


def banner(about: str = ABOUT) -> str:
    """What an invocation without ``CNI_COMMAND`` prints on stderr."""
    return f"{about}\nCNI protocol versions supported: {', '.join(SUPPORTED_VERSIONS)}\n"


def _read_stdin(stdin: Stdin) -> bytes:
    if isinstance(stdin, bytes | bytearray):
        return bytes(stdin)
    try:
        return stdin.read()
    except OSError as exc:
        raise CNIError(IO_FAILURE, f"error reading from stdin: {exc}") from exc


def validate_config(stdin_data: bytes) -> None:
    """skel ``validateConfig``: stdin must be a JSON object with a valid ``name``."""
    try:
        conf = gojsonerr.loads(stdin_data)
        if conf is not None and not isinstance(conf, dict):
            raise gojsonerr.value_type_error(conf, 'struct { Name string "json:\\"name\\"" }')
        name = gojsonerr.string_field(conf or {}, "name", "")
    except gojsonerr.GoJSONError as exc:
        raise CNIError(DECODING_FAILURE, f"error unmarshall network config: {exc}") from exc
    if not name:
        raise CNIError(INVALID_NETWORK_CONFIG, "missing network name")
    validate_network_name(name)


def get_cmd_args(environ: Mapping[str, str], stdin: Stdin) -> CmdArgs:
    """skel ``getCmdArgsFromEnv``: env checks (validators fire before the missing list), stdin."""
    env = {name: environ.get(name, "") for name, _ in _ENV_RULES}
    cmd = env["CNI_COMMAND"]
    missing: list[str] = []
    for name, required_for in _ENV_RULES:
        required = cmd in required_for
        if not env[name]:
            if required or name == "CNI_COMMAND":
                missing.append(name)
        elif required and name in _VALIDATORS:
            _VALIDATORS[name](env[name])
    if missing:
        raise CNIError(INVALID_ENVIRONMENT, f"required env variables [{','.join(missing)}] missing")
    stdin_data = b"" if cmd == "VERSION" else _read_stdin(stdin)
    if cmd != "VERSION":
        validate_config(stdin_data)
    return CmdArgs(env, stdin_data)


def decode_version(stdin_data: bytes) -> str:
    """libcni ``create.DecodeVersion``: the config's ``cniVersion``, empty meaning ``0.1.0``."""
    try:
        conf = gojsonerr.loads(stdin_data)
        if conf is not None and not isinstance(conf, dict):
            raise gojsonerr.value_type_error(
                conf, 'struct { CNIVersion string "json:\\"cniVersion\\"" }'
            )
        version = gojsonerr.string_field(conf or {}, "cniVersion", "")
    except gojsonerr.GoJSONError as exc:
        raise CNIError(DECODING_FAILURE, f"decoding version from network config: {exc}") from exc
    return version or "0.1.0"


def check_version_supported(config_version: str) -> None:
    """``VersionReconciler.Check``: the config version must be one we speak exactly."""
    if config_version not in SUPPORTED_VERSIONS:
        supported = " ".join(go_quote(v) for v in SUPPORTED_VERSIONS)
        details = f"config is {go_quote(config_version)}, plugin supports [{supported}]"
        raise CNIError(INCOMPATIBLE_VERSION, "incompatible CNI versions", details)


def check_version_gate(command: str, stdin_data: bytes) -> None:
    """CHECK needs a config >= 0.4.0, GC and STATUS >= 1.1.0 (before the usual version check)."""
    minimum = _VERSION_GATES.get(command)
    if minimum is None:
        return
    config_version = decode_version(stdin_data)
    # version_ge raises skel's code-6 parse errors (e.g. 'failed to convert major version ...').
    if not version_ge(config_version, minimum):
        raise CNIError(INCOMPATIBLE_VERSION, f"config version does not allow {command}")
    if not any(version_ge(v, config_version) for v in SUPPORTED_VERSIONS):
        raise CNIError(INCOMPATIBLE_VERSION, f"plugin version does not allow {command}")


def check_netns(netns: str, netns_override: str) -> None:
    """After ADD/DEL: refuse to have worked on our own netns unless ``CNI_NETNS_OVERRIDE``."""
    if netns_override.upper() == "TRUE" or netns_override == "1":
        return
    import posix  # not os: ~2 ms of the shim's start (cni_shim/gopath.py)

    try:
        fd = posix.open(netns, posix.O_RDONLY | posix.O_CLOEXEC)
    except (OSError, ValueError):
        return  # not a valid netns path: the plugin's business (and DEL may see it gone)
    try:
        target = posix.fstat(fd)
    finally:
        posix.close(fd)
    try:
        own = posix.stat("/proc/thread-self/ns/net")
    except OSError as exc:
        raise CNIError(INVALID_NETNS, "get plugin's netns failed") from exc
    if (own.st_dev, own.st_ino) == (target.st_dev, target.st_ino):
        raise CNIError(
            INVALID_NETNS, "plugin's netns and netns from CNI_NETNS should not be the same"
        )


def emit(stream: Output, text: str) -> None:
    """Write ``text`` to a text or binary stream (binary gets UTF-8, as Go writes bytes)."""
    if isinstance(stream, io.TextIOBase):
        stream.write(text)
    else:
        stream.write(text.encode("utf-8", "replace"))  # type: ignore[arg-type]
    stream.flush()


def _call(handler: Handler | None, args: CmdArgs) -> None:
    """``checkVersionAndCall``: version check, then the handler; plain errors become 999."""
    check_version_supported(decode_version(args.stdin_data))
    if handler is None:
        return
    try:
        handler(args)
    except CNIError:
        raise
    except Exception as exc:
        raise CNIError(INTERNAL, str(exc)) from exc


def dispatch(environ: Mapping[str, str], stdin: Stdin, handlers: Mapping[str, Handler]) -> None:
    """skel ``pluginMain`` minus printing: raise :class:`CNIError` on any failure.

    ``handlers`` maps ``ADD``/``CHECK``/``DEL``/``GC``/``STATUS`` to callables; ``VERSION`` is
    handled by the caller (it needs the output stream, nothing else).
    """
    args = get_cmd_args(environ, stdin)
    cmd = args.command
    if cmd in ("ADD", "DEL"):
        _call(handlers.get(cmd), args)
        check_netns(args.netns, args.netns_override)
    elif cmd in _VERSION_GATES:
        check_version_gate(cmd, args.stdin_data)
        _call(handlers.get(cmd), args)
    elif cmd != "VERSION":
        raise CNIError(INVALID_ENVIRONMENT, f"unknown CNI_COMMAND: {cmd}")


def run(
    environ: Mapping[str, str],
    stdin: Stdin,
    stdout: Output,
    stderr: Output,
    handlers: Mapping[str, Handler],
    *,
    about: str = ABOUT,
) -> int:
    """skel ``PluginMainFuncs``: dispatch, print the error JSON on stdout, return the exit code."""
    try:
        dispatch(environ, stdin, handlers)
        if environ.get("CNI_COMMAND") == "VERSION":
            emit(stdout, version_output())
    except CNIError as exc:
        if exc.code == INVALID_ENVIRONMENT and not environ.get("CNI_COMMAND") and about:
            emit(stderr, banner(about))
            return 0
        emit(stdout, exc.to_json_indent())
        return 1
    return 0
