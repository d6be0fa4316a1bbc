"""CNI error objects: the one error type that crosses every boundary with its code intact.

The spec (SPEC.md, "Error") reserves codes 1-99; plugins use 100+. Shim and daemon share this
type so that a code produced anywhere (a plugin, the daemon, the shim's own checks) reaches the
runtime unchanged instead of being flattened to 999 as upstream's shim does.
"""

from __future__ import annotations

from cni_shim import gojson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Well-known error codes from the CNI spec.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENVIRONMENT = 4
IO_FAILURE = 5
DECODING_FAILURE = 6
INVALID_NETWORK_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
LIMITED_CONNECTIVITY = 51
INTERNAL = 999


class CNIError(Exception):
    """A CNI error value: ``{"code": N, "msg": "...", "details": "..."}``."""

    __slots__ = ("code", "details", "msg")

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(code, msg, details)
        self.code = code
        self.msg = msg
        self.details = details

    def __str__(self) -> str:
        # Go's types.Error.Error(): "msg; details" when details are present.
        return f"{self.msg}; {self.details}" if self.details else self.msg

    def __repr__(self) -> str:
        return f"CNIError(code={self.code}, msg={self.msg!r}, details={self.details!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CNIError):
            return NotImplemented
        return (self.code, self.msg, self.details) == (other.code, other.msg, other.details)

    def __hash__(self) -> int:
        return hash((self.code, self.msg, self.details))

    def to_dict(self) -> dict[str, Any]:
        """Go struct order, ``details`` omitted when empty (``omitempty``)."""
        out: dict[str, Any] = {"code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    def to_json(self) -> str:
        return gojson.dumps(self.to_dict())

    def to_json_indent(self) -> str:
        """What a plugin prints on stdout when it fails (skel's ``Error.Print``)."""
        return gojson.dumps_indent(self.to_dict())

    def with_prefix(self, prefix: str) -> CNIError:
        """The same error with ``prefix`` in front of ``msg``; the code is kept."""
        return CNIError(self.code, prefix + self.msg, self.details)

    @classmethod
    def from_obj(cls, obj: object) -> CNIError | None:
        """Decode an error object as libcni does; ``None`` if it is not one (no usable ``msg``)."""
        if not isinstance(obj, dict):
            return None
        code, msg, details = obj.get("code"), obj.get("msg"), obj.get("details", "")
        if not isinstance(code, int) or isinstance(code, bool) or not isinstance(msg, str):
            return None
        if not msg:
            return None
        return cls(code, msg, details if isinstance(details, str) else "")
