"""CNI results: libcni's decoding, version conversion and encoding, on plain dicts.

Both ends of Multus pass results through libcni (``pkg/types/{020,040,100}``), and what a
runtime sees is what Go's ``encoding/json`` made of them: fields dropped or reshaped by the Go
structs, addresses re-printed by ``net.IP``/``net.IPNet``, version-specific key order. A result
here is a JSON-shaped dict whose ``cniVersion`` names its layout. Every entry point first
normalizes it as ``json.Unmarshal`` into libcni's struct would (case-insensitive keys, last one
wins, unknown keys dropped, Go's error wording), so anything JSON-shaped goes in and Go's bytes
come out.

The normalized (*canonical*) form is the Go struct in field order with ``omitempty`` applied,
``"dns":{}`` included, and two twists: a top-level ``interfaces``/``ips``/``routes`` list is
present exactly when the Go slice is non-nil (Multus tests ``res.Interfaces != nil``, so ``[]``
and absent differ), and a missing ``dst``/``address`` is ``"<nil>"``, which is what Go prints
for a zero ``IPNet``. ``to_wire`` applies the rest of Go's encoding.

Results are values: a function here never edits its argument, and a caller must not edit a
result it got from here and then hand it back (build a new dict instead). That lets
``normalize`` recognise the canonical dicts it made itself and copy them instead of decoding
them again: one ADD passes its result through normalization half a dozen times (cache, prevResult,
conversions, network-status, the answer) at ~70 µs a decode.

Stdlib only, importing nothing beyond ``json``: the shim loads this on every ADD.
"""

from __future__ import annotations

from cni_shim import _resultconv, _resulttypes, godecode, gojson, gonum
from cni_shim.errors import DECODING_FAILURE, INCOMPATIBLE_VERSION, INTERNAL, CNIError
from cni_shim.goquote import go_quote
from cni_shim.versions import LATEST, SUPPORTED_VERSIONS, parse_version, version_ge

# The version helpers live in ``versions`` (cheap to import); they stay part of this API.
__all__ = [
    "LATEST",
    "SUPPORTED_VERSIONS",
    "convert",
    "create_from_bytes",
    "decode",
    "decode_response",
    "dumps",
    "dumps_indent",
    "empty_result",
    "has_interfaces_or_ips",
    "normalize",
    "parse_version",
    "render",
    "to_wire",
    "version_ge",
]

TYPE_CHECKING = False  # typing costs milliseconds at shim start-up; annotations only
if TYPE_CHECKING:
    from typing import Any


# The libcni result type implementing each version. Every ordered pair among these has a
# registered converter upstream, so conversion can fail on content but never on the pair.
_FAMILY = {
    "0.1.0": "020",
    "0.2.0": "020",
    "0.3.0": "040",
    "0.3.1": "040",
    "0.4.0": "040",
    "1.0.0": "100",
    "1.1.0": "100",
}
# What each type's NewResult accepts once decoded (types020 also takes "" and makes it 0.1.0).
_ACCEPTS = {
    "020": ("", "0.1.0", "0.2.0"),
    "040": ("0.3.0", "0.3.1", "0.4.0"),
    "100": ("1.0.0", "1.1.0"),
}


# --------------------------------------------------------------------------------------------
# Parsing


def decode(stdout: bytes, config_version: str) -> dict[str, Any]:
    """Parse a plugin's ADD output as ``invoke.ExecPluginWithResult`` does.

    The version is the output's ``cniVersion`` when that is a non-empty string, otherwise the
    config's ("" meaning 0.1.0); in that case libcni first re-marshals the output through a
    generic map, which collapses duplicate keys and passes numbers through float64.
    """
    raw = godecode.loads(stdout)
    if raw is None:  # "null" decodes to a nil map, which libcni replaces with an empty one
        raw = godecode.Pairs()
    if type(raw) is not godecode.Pairs:
        kind = godecode.jkind(raw)
        raise CNIError(
            DECODING_FAILURE,
            "failed to unmarshal raw result: json: cannot unmarshal "
            f"{kind} into Go value of type map[string]interface {{}}",
        )
    own = None
    for key, val in raw:
        if key == "cniVersion":
            own = val
    if type(own) is str and own:
        return _create(own, raw, lenient=False)
    try:
        fixed = dict(godecode.as_go_map(raw))
    except CNIError as exc:
        raise exc.with_prefix("failed to unmarshal raw result: ") from None
    fixed["cniVersion"] = config_version or "0.1.0"
    return _create(fixed["cniVersion"], dict(sorted(fixed.items())), lenient=False)


def decode_response(body: bytes) -> dict[str, Any] | None:
    """Decode the daemon's ``{"Result": ...}`` answer as the Go shim does.

    Upstream decodes into ``*types100.Result`` with no version check, and ``PrintResult`` then
    treats an empty ``cniVersion`` as 1.1.0, as is done here. ``None``: the answer carried no
    result (upstream dereferences nil and crashes; the caller decides what to do instead).
    """
    data = godecode.loads(body)
    response = _resulttypes.RESPONSE
    state = godecode.unmarshal((godecode.STRUCT, response, response[0]), data)
    result = state.get("Result")
    if result is None:
        return None
    if not result.get("cniVersion"):
        result["cniVersion"] = LATEST
    return godecode.render(_resulttypes.RESULT_100, result)


def create_from_bytes(data: bytes) -> dict[str, Any]:
    """``create.CreateFromBytes`` (libcni's cached results): the version comes from the data
    itself, ``""`` meaning 0.1.0."""
    obj = godecode.loads(data)
    only = _resulttypes.VERSION_ONLY
    try:
        state = godecode.unmarshal((godecode.STRUCT, only, only[0]), obj)
    except CNIError as exc:
        raise exc.with_prefix("decoding version from network config: ") from None
    return _create(state.get("cniVersion") or "0.1.0", obj, lenient=False)


def normalize(result: dict[str, Any]) -> dict[str, Any]:
    """The canonical form of ``result`` (see the module docstring), as a new dict.

    The version is whatever Go would decode from it (``""`` meaning 0.1.0); ``"<nil>"`` is
    accepted for a zero ``dst``/``address`` so that canonical and wire forms normalize again.
    """
    if _made.get(id(result)) is result:
        _remember(_made.pop(id(result)))  # most recently used again
        return _remember(_copy(result))
    return _create(_version_of(result), result, lenient=True)


# The canonical dicts made here most recently used, by identity. The references are strong,
# so an id cannot be reused while it is listed; a miss only costs a decode.
_made: dict[int, dict[str, Any]] = {}
_MADE_KEPT = 256


def _remember(canon: dict[str, Any]) -> dict[str, Any]:
    _made[id(canon)] = canon
    if len(_made) > _MADE_KEPT:
        del _made[next(iter(_made))]  # the oldest: dicts keep insertion order
    return canon


def _copy(obj: Any) -> Any:
    """A deep copy of a canonical dict, whose values are only dicts, lists, str and int."""
    if type(obj) is dict:
        return {key: _copy(val) for key, val in obj.items()}
    if type(obj) is list:
        return [_copy(item) for item in obj]
    return obj


def _create(version: str, obj: Any, *, lenient: bool) -> dict[str, Any]:
    """``convert.Create`` with the type's ``NewResult``: decode, then check the version."""
    family = _FAMILY.get(version, "020" if version == "" else "")
    if not family:
        quoted = go_quote(version)
        raise CNIError(INCOMPATIBLE_VERSION, f"unsupported CNI result version {quoted}")
    spec = _resulttypes.BY_FAMILY[family]
    state = godecode.unmarshal((godecode.STRUCT, spec, spec[0]), obj, lenient=lenient)
    got = state.get("cniVersion") or ""
    if got not in _ACCEPTS[family]:
        raise CNIError(
            INCOMPATIBLE_VERSION,
            f"result type supports [{' '.join(_ACCEPTS[family])}] but unmarshalled CNIVersion "
            f"is {go_quote(got)}",
        )
    state["cniVersion"] = got or "0.1.0"
    return _remember(godecode.render(spec, state))


def _version_of(result: Any) -> str:
    """The ``cniVersion`` Go decodes: any key spelling, the last string one wins."""
    found = ""
    if type(result) is dict:
        for key, val in result.items():
            if type(val) is str and godecode.fold(key) == "cniversion":
                found = val
    return found


# --------------------------------------------------------------------------------------------
# Conversion


def convert(result: dict[str, Any], to_version: str) -> dict[str, Any]:
    """libcni ``convert.Convert``: a new canonical dict at ``to_version`` ("" means 0.1.0).

    What each conversion keeps and drops is described in :mod:`cni_shim._resultconv`.
    """
    to_version = to_version or "0.1.0"
    from_version = _version_of(result) or "0.1.0"
    if from_version != to_version and not (from_version in _FAMILY and to_version in _FAMILY):
        raise CNIError(
            INTERNAL, f"no converter for CNI result version {from_version} to {to_version}"
        )
    src = normalize(result)
    if from_version == to_version:
        return src
    source, target = _FAMILY[from_version], _FAMILY[to_version]
    if source == "100":
        if target == "100":
            src["cniVersion"] = to_version
            return src
        via = _resultconv.to_04x(src, "0.4.0" if target == "020" else to_version)
        return _resultconv.to_02x(via, to_version) if target == "020" else via
    if source == "040":
        if target == "020":
            return _resultconv.to_02x(src, to_version)
        if target == "040":
            return _resultconv.within_040(src, to_version)
        return _resultconv.from_04x(src, to_version)
    if target == "020":
        return _resultconv.within_020(src, to_version)
    via = _resultconv.from_02x(src, "0.4.0" if target == "100" else to_version)
    return _resultconv.from_04x(via, to_version) if target == "100" else via


def has_interfaces_or_ips(result: dict[str, Any]) -> bool:
    """Multus's ``res.Interfaces != nil || res.IPs != nil`` after conversion to 1.1.0.

    Nil-ness, not length: a 1.x result with ``"interfaces":[]`` counts, a 0.x one does not,
    because the down/up converters rebuild the slices by appending.
    """
    converted = convert(result, LATEST)
    return "interfaces" in converted or "ips" in converted


def empty_result(version: str, ifname: str, netns: str) -> dict[str, Any]:
    """The "pod not found" result (Multus ``emptyCNIResult``), properly at ``version``.

    Upstream builds a 1.x object and only labels it with the config version, so the daemon
    panics for 0.x labels and fails for ""; this builds it at 1.1.0 and converts it instead
    ("" → 0.1.0: ``ip4`` only, as 0.x results have no interfaces).
    """
    base = {
        "cniVersion": LATEST,
        "interfaces": [{"name": ifname, "sandbox": netns}],
        "ips": [{"address": "0.0.0.0/0", "gateway": "0.0.0.0"}],
    }
    return convert(base, version)


# --------------------------------------------------------------------------------------------
# Encoding


def to_wire(result: dict[str, Any]) -> dict[str, Any]:
    """The dict whose ``gojson`` encoding is Go's encoding of ``result``.

    0.x: struct order, ``omitempty`` applied, ``"dns":{}`` always present. 1.x: libcni
    v1.3.0's ``Result.MarshalJSON`` re-marshals through a map, so keys are sorted at every
    level, numbers pass through float64, and an empty ``dns`` is dropped.
    """
    canon: dict[str, Any] = _drop_empty_lists(normalize(result))
    if _FAMILY[canon["cniVersion"]] != "100":
        return canon
    if not canon["dns"]:
        del canon["dns"]
    wire: dict[str, Any] = _remarshal(canon)
    return wire


def dumps(result: dict[str, Any]) -> str:
    """Compact: what the daemon sends and libcni caches."""
    return gojson.dumps(to_wire(result))


def dumps_indent(result: dict[str, Any]) -> str:
    """What ``Result.Print`` writes (skel's ``PrintResult``): 4-space indent, no newline."""
    return gojson.dumps_indent(to_wire(result))


def render(result: dict[str, Any], cni_version: str) -> str:
    """What the shim prints for an ADD: the result in its config's version, 4-space indented.

    An empty ``cni_version`` means 0.1.0, as libcni's converter has it. The daemon uses this
    too, to answer our shim in print-ready form (see ``cni_shim.wire.PRINT_REQUEST``).
    """
    try:
        return dumps_indent(convert(result, cni_version or "0.1.0"))
    except CNIError:
        raise
    except Exception as exc:  # conversion errors are returned unprefixed, as upstream
        raise CNIError(INTERNAL, str(exc)) from exc


def _drop_empty_lists(obj: Any) -> Any:
    # omitempty on the slices the canonical form keeps to remember they were non-nil.
    if type(obj) is dict:
        return {
            key: _drop_empty_lists(val)
            for key, val in obj.items()
            if not (type(val) is list and not val)
        }
    if type(obj) is list:
        return [_drop_empty_lists(item) for item in obj]
    return obj


def _remarshal(obj: Any) -> Any:
    # json.Unmarshal into map[string]interface{} and back: sorted keys, float64 numbers
    # (an int beyond 2**53 comes back rounded, exactly as Go prints it).
    if type(obj) is dict:
        return {key: _remarshal(obj[key]) for key in sorted(obj)}
    if type(obj) is list:
        return [_remarshal(item) for item in obj]
    if type(obj) is int:
        return int(gonum.go_float_text(float(obj)))
    return obj
