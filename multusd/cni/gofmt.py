"""The daemon's former home of Go's formatting rules, kept only as aliases of their one home.

The rules live in ``cni_shim``'s Go layer, which the shim and the daemon both import: ``%q``
is :mod:`cni_shim.goquote`, ``%v``/``%T``/``%s`` are :mod:`cni_shim.gofmt`, errno and exit
texts :mod:`cni_shim.gosyscall`, decoding into ``interface{}`` :mod:`cni_shim.gojsonerr`. The
names below are what ``multusd.cni.api``, ``cache``, ``conf`` and ``invoke`` still import from
here (``json_error_text`` is ``str()``: the errors already carry Go's words); once those
modules import the ones above directly, this file goes.
"""

from __future__ import annotations

from cni_shim.gofmt import slice_str, type_name
from cni_shim.gojsonerr import loads_any as loads
from cni_shim.gojsonerr import loads_map
from cni_shim.gojsonerr import type_name as json_type_name
from cni_shim.goquote import go_quote as quote
from cni_shim.gosyscall import errno_text, exit_text

__all__ = [
    "errno_text",
    "exit_text",
    "json_error_text",
    "json_type_name",
    "loads",
    "loads_map",
    "quote",
    "slice_str",
    "type_name",
]


def json_error_text(exc: ValueError) -> str:
    """The Go text of a decoding error raised by :func:`loads` or by our own type checks."""
    return str(exc)
