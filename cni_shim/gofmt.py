"""Go's ``fmt`` verbs as upstream's error texts apply them to decoded JSON: ``%v``, ``%T``, ``%s``.

libcni and Multus word their errors with ``fmt.Errorf`` on values decoded into ``interface{}``
(``wrong route format: map[dst:10.0.0.0/8]``, ``invalid type float64 for …``), and users and
upstream tests compare those texts. What ``fmt`` prints for such values is decided here, once,
for the shim and the daemon alike; numbers come from :mod:`cni_shim.gonum`. ``%q`` is
:mod:`cni_shim.goquote`, kept apart because the shim's version checks need it on every start
and this module never loads there.
"""

from __future__ import annotations

from cni_shim.gonum import format_g

TYPE_CHECKING = False  # typing costs milliseconds at shim start-up; annotations only
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def go_value(value: Any) -> str:
    """Go's ``%v`` of a value decoded into ``interface{}`` (for upstream's error texts).

    Map keys are printed sorted, as ``fmt`` sorts them (by bytes, which for the UTF-8 text of
    a key is the order of its code points).
    """
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):  # every JSON number was a float64 in Go
        return format_g(float(value))
    if isinstance(value, list):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = " ".join(f"{k}:{go_value(v)}" for k, v in sorted(value.items()))
        return f"map[{items}]"
    return str(value)


def type_name(value: Any) -> str:
    """Go's ``%T`` of a value decoded into ``interface{}``."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"


def slice_str(items: Sequence[str]) -> str:
    """Go's ``%s``/``%v`` of a ``[]string``: ``[a b c]``."""
    return "[" + " ".join(items) + "]"
