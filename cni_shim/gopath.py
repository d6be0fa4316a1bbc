"""Go's ``path/filepath`` ``Clean`` and ``Join``, on strings alone.

Upstream builds its paths with them (the socket from ``daemonSocketDir``, the primary config
from ``multusAutoconfigDir``), so ours must come out the same: ``posixpath.normpath`` keeps a
leading ``//`` that Go reduces to ``/``, and ``posixpath.join`` starts over at an absolute
part where Go concatenates. No ``os`` or ``posixpath`` import either: ``os`` costs the shim
~2 ms of every start (docs/performance.md, "Where one request's wall time goes").
"""

from __future__ import annotations


def clean(path: str) -> str:
    """``filepath.Clean``: the shortest equivalent path, ``"."`` for an empty one."""
    if not path:
        return "."
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append(part)  # a relative path keeps the ``..`` it cannot resolve
            continue
        parts.append(part)
    body = "/".join(parts)
    if rooted:
        return "/" + body
    return body or "."


def join(*elements: str) -> str:
    """``filepath.Join``: the non-empty elements joined with ``/`` and cleaned; ``""`` if all
    are empty."""
    joined = "/".join(e for e in elements if e)
    return clean(joined) if joined else ""
