"""The one definition of the shim <-> daemon wire format (upstream ``pkg/server/api``).

Request: ``{"env":{<sorted>},"config":"<std base64 of stdin>"}`` (plus ``interfaceAttributes``
from hot-plug clients); response: ``{"Result":{...}}`` or an empty body; errors: a compact CNI
error object or plain text. Both our daemon and upstream's must accept what this module writes,
and this module must accept what either of them answers, so every byte-level choice here
follows Go's ``encoding/json`` (struct field order, sorted maps, base64 ``[]byte``,
case-insensitive field names).
"""

from __future__ import annotations

import binascii

from cni_shim import gojson, gojsonerr
from cni_shim.errors import DECODING_FAILURE, INTERNAL, CNIError
from cni_shim.versions import LATEST

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

# unicode.IsSpace for the ASCII/Latin-1 range plus the Unicode space separators Go knows.
_GO_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"  # noqa: E501
_B64_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


class RequestFailed(CNIError):
    """A non-200 answer whose body is not a CNI error object (upstream's plain-text form).

    Kept apart from daemon-sent error objects because the shim appends ``: StdinData: ...``
    to these only.
    """

    __slots__ = ("status",)

    def __init__(self, status: int, body: bytes) -> None:
        text = body.decode("utf-8", "replace")
        super().__init__(INTERNAL, f"CNI request failed with status {status}: '{text}'")
        self.status = status


def _go_string(s: str) -> str:
    """What Go's encoder makes of a string: invalid UTF-8 (surrogate escapes) -> U+FFFD."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return s


def env_map(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``env`` map as upstream's shim builds it from ``os.Environ()``.

    Each ``KEY=VALUE`` entry is split at the first ``=``; an entry whose ``=`` is at position 0
    is skipped; the key is whitespace-trimmed (so ``" =x"`` yields the key ``""``); a later
    duplicate wins.
    """
    out: dict[str, str] = {}
    for raw_key, value in environ.items():
        if not raw_key:
            continue
        out[_go_string(raw_key.strip(_GO_SPACE))] = _go_string(value)
    return out


PRINT_REQUEST = "X-Multus-Print-Result"
"""Request header of our shim: "if you can, answer ADD with the exact text I should print".

Converting and pretty-printing the result is the largest part of the shim's own work; the
daemon has the converter loaded already. Upstream's daemon ignores the header and answers
``{"Result":...}``, which the shim then converts itself; upstream's shim never sends it and
gets ``{"Result":...}`` from us.
"""
PRINTED = "X-Multus-Printed"
"""Response header: the body is the shim's stdout, verbatim."""


def encode_request(env: Mapping[str, str], config: bytes) -> bytes:
    """Body of ``POST /cni``: the WHOLE environment and the raw stdin, Go struct order."""
    parts: list[str] = []
    envmap = env_map(env)
    if envmap:  # omitempty
        parts.append('"env":' + gojson.dumps(envmap, sort_keys=True))
    if config:  # omitempty
        parts.append('"config":"' + binascii.b2a_base64(config, newline=False).decode() + '"')
    return ("{" + ",".join(parts) + "}").encode("utf-8")


def _b64decode(text: str) -> bytes:
    """``base64.StdEncoding`` as ``encoding/json`` uses it (CR/LF ignored, padding required)."""
    data = text.replace("\r", "").replace("\n", "").encode("utf-8", "replace")
    for i, ch in enumerate(data):
        if ch not in _B64_ALPHABET and ch != ord("="):
            raise gojsonerr.GoJSONError(f"illegal base64 data at input byte {i}")
    pad = data.find(b"=")
    if (pad >= 0 and data[pad:].strip(b"=")) or len(data) % 4 or data.count(b"=") > 2:
        bad = pad if pad >= 0 else len(data) - len(data) % 4
        raise gojsonerr.GoJSONError(f"illegal base64 data at input byte {bad}")
    try:
        return binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error as exc:
        raise gojsonerr.GoJSONError(f"illegal base64 data at input byte {len(data)}") from exc


def _go_decoded(s: str) -> str:
    """What Go's decoder makes of a JSON string: a lone surrogate escape (``"\\ud800"``) is
    U+FFFD. Python keeps it, and the first ``encode()`` (a log line, a plugin's environment,
    the error answer itself) would fail on it; a valid pair is already one character."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in s)
    return s


def _go_decoded_tree(value: Any) -> Any:
    """:func:`_go_decoded` for every string (keys included) of a decoded JSON value."""
    if isinstance(value, str):
        return _go_decoded(value)
    if isinstance(value, list):
        return [_go_decoded_tree(item) for item in value]
    if isinstance(value, dict):
        return {_go_decoded(k): _go_decoded_tree(v) for k, v in value.items()}
    return value


def _decode_env(value: Any) -> dict[str, str]:
    if value is gojsonerr.MISSING or value is None:
        return {}
    if not isinstance(value, dict):
        raise gojsonerr.field_type_error(value, "Request", "env", "map[string]string")
    env: dict[str, str] = {}
    for key, item in value.items():
        if item is None:
            env[_go_decoded(key)] = ""
        elif isinstance(item, str):
            env[_go_decoded(key)] = _go_decoded(item)
        else:
            raise gojsonerr.field_type_error(item, "Request", "env", "string")
    return env


def _decode_config(value: Any) -> bytes:
    if value is gojsonerr.MISSING or value is None:
        return b""
    if not isinstance(value, str):
        raise gojsonerr.field_type_error(value, "Request", "config", "[]uint8")
    return _b64decode(value)


def decode_request(body: bytes) -> tuple[dict[str, str], bytes, dict[str, Any] | None]:
    """Parse a ``/cni`` or ``/delegate`` body into (env, config bytes, interfaceAttributes).

    Raises :class:`CNIError` (``DECODING_FAILURE``) with Go's decoder wording, e.g.
    ``json: cannot unmarshal object into Go struct field Request.config of type []uint8``.
    Strings are what Go decodes: lone surrogate escapes become U+FFFD.
    ``interfaceAttributes`` is returned as the decoded object for the caller to interpret.
    """
    try:
        obj = gojsonerr.loads(body)
        if obj is None:
            return {}, b"", None
        if not isinstance(obj, dict):
            raise gojsonerr.value_type_error(obj, "api.Request")
        env = _decode_env(gojsonerr.field(obj, "env"))
        config = _decode_config(gojsonerr.field(obj, "config"))
        attrs = gojsonerr.field(obj, "interfaceAttributes")
        if attrs is gojsonerr.MISSING or attrs is None:
            return env, config, None
        if not isinstance(attrs, dict):
            raise gojsonerr.field_type_error(
                attrs, "Request", "interfaceAttributes", "api.DelegateInterfaceAttributes"
            )
        return env, config, _go_decoded_tree(attrs)
    except gojsonerr.GoJSONError as exc:
        raise CNIError(DECODING_FAILURE, _go_decoded(str(exc))) from exc


ANSWER_VERSION_OLD = "1.0.0"
"""The result version every Multus shim can decode: shims built on libcni 1.0/1.1 (upstream
v4.0.x and the seed commit) know no 1.1.0 converter and fail every ADD on a 1.1.0 result with
``no converter for CNI result version 1.1.0 to 1.0.0``
(docs/compatibility.md, "Living beside upstream: rolling either way", row 26)."""


def answer_version(config_version: str) -> str:
    """The ``cniVersion`` of a ``{"Result":...}`` answer to a shim with ``config_version``.

    Upstream's daemon answers at libcni's newest version (1.0.0 up to v4.0.x, 1.1.0 from v4.1),
    which breaks a rolling upgrade whenever a newer daemon meets an older shim. A shim whose
    config declares 1.1.0 passed its own skel check, so its libcni decodes 1.1.0; every other
    shim gets 1.0.0, which all of them decode and convert to their config's version. The
    conversion 1.1.0 -> 1.0.0 changes only the label (libcni keeps the same struct).
    """
    return LATEST if config_version == LATEST else ANSWER_VERSION_OLD


def encode_response(result: dict[str, Any] | None, config_version: str = LATEST) -> bytes:
    """Body of a successful answer: ``{"Result":...}`` at :func:`answer_version`, or empty.

    Upstream's daemon sends an empty body for DEL/CHECK/GC/STATUS, so ``None`` maps to ``b""``
    rather than ``{"Result":null}`` (which upstream's shim would crash on).
    """
    if result is None:
        return b""
    from cni_shim import results

    answer = results.convert(result, answer_version(config_version))
    return ('{"Result":' + results.dumps(answer) + "}").encode("utf-8")


def decode_response(body: bytes) -> dict[str, Any] | None:
    """The ``Result`` of a 200 answer, decoded as Go's ``*types100.Result``.

    ``None`` for an empty body or ``{"Result":null}`` (upstream's shim would crash on the
    latter; the caller decides). Errors are upstream's ``failed to unmarshal response '<body>':
    <Go decoder error>``, code 999.
    """
    if not body:
        return None
    from cni_shim import results

    try:
        return results.decode_response(body)
    except CNIError as exc:
        text = body.decode("utf-8", "replace")
        raise CNIError(INTERNAL, f"failed to unmarshal response '{text}': {exc}") from exc


def _error_object(body: bytes) -> CNIError | None:
    """``json.Unmarshal`` into ``types.Error``; ``None`` on any decode or type error.

    Only a body that can be an object is decoded: a JSON syntax error costs the shim ~15 ms
    (``gojson.loads`` must import ``json.decoder`` to raise it), and the ``404 page not found``
    of an upstream daemon without ``/readyz`` is met on every ADD through that daemon."""
    if not body.lstrip(b" \t\r\n").startswith(b"{"):
        return None
    try:
        obj = gojsonerr.loads(body)
    except gojsonerr.GoJSONError:
        return None
    if not isinstance(obj, dict):
        return None
    code = gojsonerr.field(obj, "code")
    msg = gojsonerr.field(obj, "msg")
    details = gojsonerr.field(obj, "details")
    if code is gojsonerr.MISSING or code is None:
        code = 0
    if not isinstance(code, int) or isinstance(code, bool) or code < 0:
        return None  # Code is a Go uint
    if not isinstance(msg, str) or not msg:
        return None
    if details is gojsonerr.MISSING or details is None:
        details = ""
    if not isinstance(details, str):
        return None
    return CNIError(code, msg, details)


def decode_error_body(status: int, body: bytes) -> CNIError:
    """The error a non-200 answer stands for.

    A body that decodes as a CNI error object with a non-empty ``msg`` is that error, code and
    details intact; anything else is a :class:`RequestFailed` with upstream's text
    ``CNI request failed with status <code>: '<raw body>'``.
    """
    err = _error_object(body)
    return err if err is not None else RequestFailed(status, body)
