"""Label and field selectors, parsed from query strings as ``k8s.io/apimachinery`` does.

Selectors are parsed once per request into small predicate objects, then applied to each stored
object's pre-extracted labels and fields, so a 50,000-pod list never decodes an object body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from multusd.kubesim.errors import bad_request

# A label key: optional DNS-subdomain prefix and a name; values may be empty.
_KEY_RE = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$"
)
_VALUE_RE = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?)?$")
_LABEL_TERM_RE = re.compile(
    r"^\s*(!?)\s*([^\s=!(),]+)\s*(?:(==|=|!=|\s+in\s+|\s+notin\s+)\s*(.*?))?\s*$"
)


@dataclass(frozen=True, slots=True)
class Requirement:
    """One label requirement; ``op`` is one of ``=``, ``!=``, ``in``, ``notin``, ``exists``,
    ``!``."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects that lack the key, as upstream does.
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a ``(...)`` value set."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _check_value(value: str, selector: str) -> str:
    if not _VALUE_RE.match(value) or len(value) > 63:
        raise bad_request(
            f"unable to parse requirement: invalid label value: {value!r}: {selector}"
        )
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse ``labelSelector``; a bad selector is a 400, never an empty match."""
    if not text or not text.strip():
        return LabelSelector()
    reqs: list[Requirement] = []
    for term in _split_top_level(text):
        m = _LABEL_TERM_RE.match(term)
        if not m:
            raise bad_request(f"unable to parse requirement: found '{term.strip()}': {text}")
        bang, key, op, rest = m.group(1), m.group(2), m.group(3), m.group(4)
        if not _KEY_RE.match(key):
            raise bad_request(f"unable to parse requirement: invalid label key {key!r}: {text}")
        if bang:
            if op:
                raise bad_request(f"unable to parse requirement: {term.strip()!r}: {text}")
            reqs.append(Requirement(key, "!"))
            continue
        if op is None:
            reqs.append(Requirement(key, "exists"))
            continue
        op = op.strip()
        if op in ("in", "notin"):
            if not (rest.startswith("(") and rest.endswith(")")):
                raise bad_request(f"unable to parse requirement: expected '(' : {text}")
            values = [v.strip() for v in rest[1:-1].split(",")]
            for v in values:
                _check_value(v, text)
            reqs.append(Requirement(key, op, frozenset(values)))
        else:
            reqs.append(
                Requirement(key, "!=" if op == "!=" else "=", frozenset({_check_value(rest, text)}))
            )
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class FieldTerm:
    field: str
    value: str
    negate: bool

    def matches(self, fields: Mapping[str, str]) -> bool:
        return (fields.get(self.field, "") == self.value) != self.negate


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    def matches(self, fields: Mapping[str, str]) -> bool:
        return all(t.matches(fields) for t in self.terms)

    def exact(self, field: str) -> str | None:
        """The value a ``field=value`` term pins, so lookups by name can skip the scan."""
        for t in self.terms:
            if t.field == field and not t.negate:
                return t.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    buf: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            buf.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    if escaped:
        buf.append("\\")
    parts.append("".join(buf))
    return parts


def _unescape(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, None)
            if nxt not in ("\\", ",", "="):
                raise bad_request(f"invalid field selector: invalid escape sequence in {text!r}")
            out.append(nxt)
        else:
            out.append(ch)
    return "".join(out)


def parse_field_selector(text: str | None, supported: frozenset[str]) -> FieldSelector:
    """Parse ``fieldSelector`` against the fields the resource exposes (400 on any other)."""
    if not text or not text.strip():
        return FieldSelector()
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        term = raw.strip()
        if not term:
            continue
        for op in ("!=", "==", "="):
            idx = _find_unescaped(term, op)
            if idx >= 0:
                field = term[:idx].strip()
                value = _unescape(term[idx + len(op) :].strip())
                negate = op == "!="
                break
        else:
            raise bad_request(f"invalid field selector: '{term}': no operator")
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        terms.append(FieldTerm(field, value, negate))
    return FieldSelector(tuple(terms))


def _find_unescaped(text: str, op: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(op, i):
            return i
        i += 1
    return -1
