"""``passthru``: upstream HEAD's pass-through CNI plugin (``cmd/passthru-cni``).

Why it exists: Multus runs ``auxiliaryCNIChainName`` as a conflist of its own whose plugins come
from ``*.conf`` files on the node, and chained plugins (``tuning``, ``portmap``, ...) want a
``prevResult`` to work on. Multus therefore puts this plugin first in that chain: its ADD prints
an empty result in the config's version (any ``prevResult`` it is given is not looked at, as
upstream's), and it touches nothing. DEL, CHECK, GC and STATUS do nothing at all.

Why it lives here: like ``multus-shim`` it runs on the host, so it is standard library only, and
it reuses the shim's port of libcni's skel (:mod:`cni_shim.skel`); ``multusd install-shim``
writes both, on the same interpreter. Only its version list differs from the shim's (0.3.0 to
1.1.0, upstream's ``PluginSupports``), which is why the short dispatch below is its own.
"""

from __future__ import annotations

import sys

from cni_shim import gojson, skel
from cni_shim.errors import (
    INCOMPATIBLE_VERSION,
    INTERNAL,
    INVALID_ENVIRONMENT,
    CNIError,
)
from cni_shim.goquote import go_quote
from cni_shim.process import run_plugin

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, BinaryIO, TextIO

    from cni_shim.godecode import GoType

SUPPORTED_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
ABOUT = "Passthrough CNI Plugin v1.0"
VERSION_OUTPUT = (
    '{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'
)
"""What VERSION prints (skel's ``json.Encoder``: a trailing newline); the installed script
answers it from this constant before importing anything."""

_MAPS = {"capabilities": "map[string]bool", "prevResult": "map[string]interface {}"}
_FIELDS = ("cniVersion", "name", "type", "ipam", "dns", "cni.dev/valid-attachments", *_MAPS)


def _plugin_conf() -> GoType:
    """Upstream's ``NetConf`` for :mod:`cni_shim.godecode`, its two maps aside (checked by
    :func:`_map_error`). Built when an ADD needs it: DEL and CHECK never load the decoder."""
    from cni_shim._resulttypes import DNS
    from cni_shim.godecode import LIST, STR, STRUCT, spec

    string: GoType = (STR, None, "string")
    attachment = spec(
        "types.GCAttachment", (("containerID", string, False), ("ifname", string, False))
    )
    netconf = spec(
        "types.NetConf",
        (
            ("cniVersion", string, True),
            ("name", string, True),
            ("type", string, True),
            ("ipam", (STRUCT, spec("types.IPAM", (("type", string, True),)), "types.IPAM"), True),
            ("dns", (STRUCT, DNS, "types.DNS"), True),
            (
                "cni.dev/valid-attachments",
                (LIST, (STRUCT, attachment, "types.GCAttachment"), "[]types.GCAttachment"),
                True,
            ),
        ),
    )
    # Upstream's NetConf embeds types.NetConf, and Go (1.24 on) names an embedded struct in an
    # error's field path ("Go struct field NetConf.NetConf.type"): a struct holding it here.
    outer = spec("main.NetConf", (("NetConf", (STRUCT, netconf, "types.NetConf"), False),))
    return (STRUCT, outer, "main.NetConf")


def banner() -> str:
    """What an invocation without ``CNI_COMMAND`` prints on stderr."""
    return f"{ABOUT}\nCNI protocol versions supported: {', '.join(SUPPORTED_VERSIONS)}\n"


def _field(key: str) -> str | None:
    """The NetConf field a JSON key fills: its exact name, else a case-insensitive match."""
    from cni_shim.godecode import fold

    if key in _FIELDS:
        return key
    folded = fold(key)
    return next((name for name in _FIELDS if fold(name) == folded), None)


def _first_overflow(value: Any) -> str | None:
    """The first number (document order) that ``interface{}`` cannot hold as a float64."""
    from cni_shim.godecode import Pairs, jkind

    if type(value) is Pairs:
        value = [item for _, item in value]
    if type(value) is list:
        return next((t for t in map(_first_overflow, value) if t is not None), None)
    if jkind(value) != "number":
        return None
    try:
        finite = float(value) not in (float("inf"), float("-inf"))
    except OverflowError:  # an integer literal beyond float64's range
        finite = False
    return None if finite else str(value)


def _map_error(name: str, value: Any) -> str | None:
    from cni_shim.godecode import jkind

    where = f"Go struct field NetConf.NetConf.{name}"
    kind = jkind(value)
    if kind == "null":
        return None
    if kind != "object":
        return f"json: cannot unmarshal {kind} into {where} of type {_MAPS[name]}"
    if name == "capabilities":
        bad = next((jkind(v) for _, v in value if jkind(v) not in ("bool", "null")), None)
        return None if bad is None else f"json: cannot unmarshal {bad} into {where} of type bool"
    number = _first_overflow(value)
    if number is None:
        return None
    return f"json: cannot unmarshal number {number} into {where} of type float64"


def netconf_error(stdin_data: bytes) -> str | None:
    """Go's ``json.Unmarshal`` of the config into upstream's ``NetConf``: its first type error
    (in document order, as Go keeps the first), or ``None``. Syntax was checked by skel."""
    from cni_shim import godecode

    try:
        top = godecode.loads(stdin_data)
    except CNIError as exc:  # pragma: no cover - skel's validateConfig parsed it already
        return exc.msg
    plugin_conf = _plugin_conf()
    Pairs = godecode.Pairs
    for key, value in top if type(top) is Pairs else ():
        name = _field(key)
        if name is None:
            continue
        if name in _MAPS:
            problem = _map_error(name, value)
        else:
            try:
                godecode.unmarshal(plugin_conf, Pairs([("NetConf", Pairs([(name, value)]))]))
                problem = None
            except CNIError as exc:
                problem = exc.msg
        if problem is not None:
            return problem
    return None


def check_version(stdin_data: bytes) -> str:
    """skel's ``checkVersionAndCall``: the config's version must be one this plugin speaks."""
    version = skel.decode_version(stdin_data)
    if version not in SUPPORTED_VERSIONS:
        supported = " ".join(go_quote(v) for v in SUPPORTED_VERSIONS)
        raise CNIError(
            INCOMPATIBLE_VERSION,
            "incompatible CNI versions",
            f"config is {go_quote(version)}, plugin supports [{supported}]",
        )
    return version


def add_output(stdin_data: bytes, version: str) -> str:
    """upstream ``cmdAdd``: an empty 1.0.0-typed result labelled with the config's version.

    libcni prints it without converting (the label already is the version asked for), and its
    1.x encoder drops the empty ``dns`` and the empty lists: only ``cniVersion`` is left.
    """
    problem = netconf_error(stdin_data)
    if problem is not None:
        raise CNIError(
            INTERNAL,
            "passthru cni: error parsing CNI configuration: "
            f"passthru cni: failed to load netconf: {problem}",
        )
    return gojson.dumps_indent({"cniVersion": version})


def run(
    environ: Mapping[str, str],
    stdin: bytes | BinaryIO,
    stdout: TextIO | BinaryIO,
    stderr: TextIO | BinaryIO,
) -> int:
    """One invocation, as skel's ``PluginMainFuncs`` with only ``Add`` and ``Del`` set (DEL's
    handler does nothing); returns the exit code after printing any error on stdout."""
    try:
        args = skel.get_cmd_args(environ, stdin)
        command = args.command
        if command in ("ADD", "DEL"):
            version = check_version(args.stdin_data)
            if command == "ADD":
                skel.emit(stdout, add_output(args.stdin_data, version))
            skel.check_netns(args.netns, args.netns_override)
        elif command in ("CHECK", "GC", "STATUS"):
            # skel's second gate loops over the plugin's versions; the newest of both lists
            # is 1.1.0, so the shim's check answers the same.
            skel.check_version_gate(command, args.stdin_data)
            check_version(args.stdin_data)
        elif command == "VERSION":
            skel.emit(stdout, VERSION_OUTPUT)
        else:
            raise CNIError(INVALID_ENVIRONMENT, f"unknown CNI_COMMAND: {command}")
    except CNIError as exc:
        if exc.code == INVALID_ENVIRONMENT and not environ.get("CNI_COMMAND"):
            skel.emit(stderr, banner())
            return 0
        skel.emit(stdout, exc.to_json_indent())
        return 1
    return 0


def main() -> None:
    """Console entry: exits the process with the plugin's status (arguments are ignored, as
    upstream's binary has no flags)."""
    import posix  # not os: ~2 ms of every start (cni_shim/gopath.py)

    if posix.environ.get(b"CNI_COMMAND") == b"VERSION":
        sys.stdout.write(VERSION_OUTPUT)
        sys.exit(0)
    run_plugin(run, posix.environ)


if __name__ == "__main__":
    main()
