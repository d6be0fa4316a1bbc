"""Go ``encoding/json`` decoding into a described struct, with Go's rules and error wording.

libcni parses results by ``json.Unmarshal`` into Go structs, and what that does is observable:
keys match case-insensitively and the last one wins, unknown keys vanish, ``null`` leaves a
string alone but clears a slice, a type mismatch is remembered while decoding goes on, and the
error names the struct and the JSON path (``Go struct field Result.routes.gw``). Types with
their own ``UnmarshalJSON`` (libcni's ``Route``, ``IPConfig``, ``IPNet``) run a nested decoder
whose error context the outer one overwrites; a *session* here is one such decoder.

A type is ``(kind, argument, Go type name)``; a struct spec is built by :func:`spec`. Decoded
structs are dicts holding only what was set (``None`` for a nil pointer or slice); :func:`render`
turns one into the canonical JSON shape.
"""

from __future__ import annotations

from cni_shim import gojson, gonet
from cni_shim.errors import DECODING_FAILURE, CNIError
from cni_shim.gonum import NumLit, go_float_text, number_from_text
from cni_shim.goquote import go_quote

TYPE_CHECKING = False  # typing costs milliseconds at shim start-up; annotations only
if TYPE_CHECKING:
    from typing import Any

# Go kinds: string, int, *int, net.IP, types.IPNet, []string, a struct value, a pointer to a
# struct, a pointer / a value whose type has its own UnmarshalJSON, and a slice of a type.
STR, INT, PINT, IP, NET, STRS, STRUCT, PSTRUCT, CUSTOM, CUSTOMV, LIST = range(11)
NIL_NET = "<nil>"  # net.IPNet.String() of a zero value, and therefore its JSON encoding

if TYPE_CHECKING:
    GoType = tuple[int, Any, str]
    Field = tuple[str, GoType, bool]  # json name, type, omitempty
    Spec = tuple[str, str, tuple[Field, ...], dict[str, Field], dict[str, Field]]


class Pairs(list[tuple[str, object]]):
    """A JSON object as its key/value pairs: Go's decoder sees duplicates, in order."""

    __slots__ = ()


def fold(name: str) -> str:
    # bytes.EqualFold is simple Unicode folding; these are the two folds that reach ASCII.
    return name.replace("\u017f", "s").replace("\u212a", "k").lower()


def spec(gotype: str, fields: tuple[Field, ...]) -> Spec:
    folded: dict[str, Field] = {}
    for field in fields:
        folded.setdefault(fold(field[0]), field)
    name = "" if gotype.startswith("struct {") else gotype.rpartition(".")[2]  # anonymous: ""
    return (gotype, name, fields, {f[0]: f for f in fields}, folded)


def unmarshal(gotype: GoType, data: Any, *, lenient: bool = False) -> Any:
    """``json.Unmarshal`` of already-parsed ``data``; failures are ``CNIError`` code 6.

    ``lenient`` also accepts ``"<nil>"`` as a zero ``IPNet``, so canonical dicts (which
    carry it) normalize again.
    """
    try:
        return _session(gotype, data, {} if gotype[0] == STRUCT else None, lenient)
    except _Abort as err:
        raise CNIError(DECODING_FAILURE, err.text()) from None


def render(struct: Spec, state: dict[str, Any]) -> dict[str, Any]:
    """A decoded struct as Go encodes it, except that non-nil slices stay even when empty."""
    out: dict[str, Any] = {}
    for name, (kind, arg, _), omitempty in struct[2]:
        val = state.get(name)
        if kind in (STRUCT, PSTRUCT, CUSTOM, CUSTOMV):
            if val is not None or kind == STRUCT:
                out[name] = render(arg, val or {})
        elif kind == LIST:
            if val is not None:
                out[name] = [None if item is None else render(arg[1], item) for item in val]
        elif kind == NET:
            out[name] = val or NIL_NET
        elif kind == PINT:
            if val is not None:
                out[name] = val
        elif val:
            out[name] = val
        elif not omitempty:
            out[name] = "" if kind == STR else 0
    return out


class _Abort(Exception):
    """A Go decode error on its way up; context is added where Go adds it."""

    def __init__(self, value: str = "", gotype: str = "", msg: str = "") -> None:
        super().__init__(msg)
        self.value, self.gotype, self.msg = value, gotype, msg
        self.struct = self.field = ""

    def text(self) -> str:
        if self.msg:
            return self.msg
        if self.struct or self.field:
            where = f"Go struct field {self.struct}.{self.field}"
        else:
            where = "Go value"
        return f"json: cannot unmarshal {self.value} into {where} of type {self.gotype}"


class _State:
    """One decoder: the struct and field path being decoded, and the first type error."""

    __slots__ = ("lenient", "saved", "stack", "struct")

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.saved: _Abort | None = None
        self.stack: list[str] = []
        self.struct: str | None = None

    def add_context(self, err: _Abort) -> None:
        if err.msg or (self.struct is None and not self.stack):
            return
        err.struct = self.struct or ""
        err.field = ".".join([*self.stack, err.field] if err.field else self.stack)

    def save(self, value: str, gotype: str) -> None:
        if self.saved is None:
            err = _Abort(value, gotype)
            self.add_context(err)
            self.saved = err


def jkind(data: Any) -> str:
    """The JSON kind of a parsed value, worded as Go's errors word it."""
    kind = type(data)
    if kind is str:
        return "string"
    if kind is bool:
        return "bool"
    if data is None:
        return "null"
    if kind is list:
        return "array"
    if kind is Pairs or kind is dict:
        return "object"
    return "number"


def _session(gotype: GoType, data: Any, cur: Any, lenient: bool) -> Any:
    st = _State(lenient)
    try:
        value = _value(st, gotype, data, cur)
    except _Abort as err:
        # Go returns without unwinding its context, so the path is the one at the failure.
        st.add_context(err)
        raise
    if st.saved is not None:
        raise st.saved
    return value


def _value(st: _State, gotype: GoType, data: Any, cur: Any) -> Any:
    kind, arg, name = gotype
    got = jkind(data)
    if kind == STR:
        if got == "string":
            return data
        if got != "null":  # null leaves strings and numbers alone
            st.save(got, name)
        return cur
    if kind in (INT, PINT):
        if got == "null":
            return None if kind == PINT else cur
        return _int(st, name, data, cur)
    if kind == IP:
        return _ip(st, name, data, got, cur)
    if kind == NET:
        # IPNet.UnmarshalJSON decodes a string in its own session (null gives "").
        text = "" if got == "null" else _session((STR, None, "string"), data, "", st.lenient)
        if st.lenient and text == NIL_NET:
            return NIL_NET
        cidr = gonet.canonical_cidr(text)
        if cidr is None:
            raise _Abort(msg="invalid CIDR address: " + text)
        return cidr
    if kind in (STRUCT, PSTRUCT):
        if got == "null":
            return None if kind == PSTRUCT else cur
        base = {} if cur is None else cur
        if got != "object":
            st.save(got, arg[0])
            return base
        return _struct(st, arg, data, base)
    if kind in (CUSTOM, CUSTOMV):
        if got == "null" and kind == CUSTOM:
            return None
        return _session((STRUCT, arg, arg[0]), data, {}, st.lenient)
    # STRS and LIST: a slice; elements decode into the old ones where there were some.
    if got == "null":
        return None
    if got != "array":
        st.save(got, name)
        return cur
    elem: GoType = (STR, None, "string") if kind == STRS else arg
    old = cur or []
    zero: Any = "" if kind == STRS else ({} if elem[0] == CUSTOMV else None)
    return [_value(st, elem, item, old[i] if i < len(old) else zero) for i, item in enumerate(data)]


def _int(st: _State, name: str, data: Any, cur: Any) -> Any:
    got = jkind(data)
    if got != "number":
        st.save(got, name)
        return cur
    text = go_float_text(data) if type(data) is float else str(data)
    number = number_from_text(text)
    if type(number) is int and -(2**63) <= number < 2**63:
        return number
    st.save("number " + text, name)
    return cur


def _ip(st: _State, name: str, data: Any, got: str, cur: Any) -> Any:
    if got == "null":
        return None
    if got != "string":
        st.save(got, name)
        return cur
    if not data:
        return None  # IP.UnmarshalText: empty text is a nil IP
    text = gonet.canonical_ip(data)
    if text is None:
        raise _Abort(msg="invalid IP address: " + data)
    return text


def _struct(st: _State, struct: Spec, data: Any, base: dict[str, Any]) -> dict[str, Any]:
    state = dict(base)
    _, name, _, exact, folded = struct
    for key, val in data.items() if type(data) is dict else data:
        field = exact.get(key) or folded.get(fold(key))
        if field is None:
            continue
        outer = st.struct
        st.stack.append(field[0])
        st.struct = name
        state[field[0]] = _value(st, field[1], val, state.get(field[0]))
        st.stack.pop()
        st.struct = outer
    return state


# --------------------------------------------------------------------------------------------
# map[string]interface{} (number texts: cni_shim.gonum)


def as_go_map(data: Any) -> Any:
    """``data`` after a trip through Go's ``map[string]interface{}``: numbers become float64,
    duplicate keys collapse (last wins) and keys come back sorted."""
    kind = type(data)
    if kind is Pairs:
        merged = {key: as_go_map(val) for key, val in data}
        return Pairs(sorted(merged.items()))
    if kind is list:
        return [as_go_map(item) for item in data]
    if kind is int or kind is NumLit:
        try:
            number = float(data)
        except OverflowError:
            number = float("inf")
        if number in (float("inf"), float("-inf")):
            raise CNIError(
                DECODING_FAILURE,
                f"json: cannot unmarshal number {data} into Go value of type float64",
            )
        return number_from_text(go_float_text(number))
    return data


# --------------------------------------------------------------------------------------------
# JSON text


def loads(data: bytes) -> Any:
    """Parse JSON keeping objects as :class:`Pairs`; syntax errors in Go's words (code 6)."""
    text = data.decode("utf-8", "replace")
    try:
        return gojson.loads(text, object_pairs_hook=Pairs, parse_float=NumLit)
    except gojson.ConstantError as exc:  # NaN, Infinity: already in Go's words
        raise CNIError(DECODING_FAILURE, str(exc)) from None
    except RecursionError:
        raise CNIError(DECODING_FAILURE, "exceeded max depth") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise CNIError(DECODING_FAILURE, _go_syntax_error(exc)) from None


def _go_syntax_error(exc: ValueError) -> str:
    doc, pos, msg = getattr(exc, "doc", ""), getattr(exc, "pos", 0), getattr(exc, "msg", str(exc))
    if msg.startswith("Invalid \\u"):  # Python points at the "u"; Go at the bad digit
        pos += 1
        while pos < len(doc) and doc[pos] in "0123456789abcdefABCDEF":
            pos += 1
    elif msg.startswith("Invalid \\") and doc[pos : pos + 1] == "\\":
        pos += 1
    if pos >= len(doc) or msg.startswith("Unterminated"):
        return "unexpected end of JSON input"
    char = _quote_char(doc[pos])
    if msg == "Expecting value":
        return _bad_value(doc, pos)
    for prefix, where in (
        ("Expecting property name", "looking for beginning of object key string"),
        ("Expecting ':'", "after object key"),
        ("Extra data", "after top-level value"),
        ("Invalid control", "in string literal"),
        ("Invalid \\u", "in \\u hexadecimal character escape"),
        ("Invalid \\", "in string escape code"),
    ):
        if msg.startswith(prefix):
            return f"invalid character {char} {where}"
    if msg.startswith("Expecting ','"):
        inside = "object key:value pair" if _innermost(doc, pos) == "{" else "array element"
        return f"invalid character {char} after {inside}"
    return f"invalid character {char} looking for beginning of value"


def _bad_value(doc: str, pos: int) -> str:
    for word in ("true", "false", "null"):
        if doc[pos] == word[0]:
            for i, want in enumerate(word):
                if pos + i >= len(doc):
                    return "unexpected end of JSON input"
                if doc[pos + i] != want:
                    got = _quote_char(doc[pos + i])
                    return f"invalid character {got} in literal {word} (expecting '{want}')"
    if doc[pos] == "-":
        if pos + 1 >= len(doc):
            return "unexpected end of JSON input"
        return f"invalid character {_quote_char(doc[pos + 1])} in numeric literal"
    return f"invalid character {_quote_char(doc[pos])} looking for beginning of value"


def _innermost(doc: str, pos: int) -> str:
    stack: list[str] = []
    in_string = escaped = False
    for char in doc[:pos]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append(char)
        elif char in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _quote_char(char: str) -> str:
    if ord(char) >= 0x80:  # Go reports the first byte of the UTF-8 sequence, read as Latin-1
        char = chr(char.encode("utf-8", "replace")[0])
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    return "'" + go_quote(char)[1:-1] + "'"
