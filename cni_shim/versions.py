"""CNI spec versions: which exist, and libcni's parsing and comparison of them.

Split from ``results`` so that the checks every invocation makes (skel's version gates) do not
load the result-conversion machinery, which only an ADD answered by an upstream daemon needs.
"""

from __future__ import annotations

from cni_shim.errors import DECODING_FAILURE, CNIError
from cni_shim.goquote import go_quote

SUPPORTED_VERSIONS: tuple[str, ...] = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.3.1",
    "0.4.0",
    "1.0.0",
    "1.1.0",
)
LATEST = "1.1.0"


def parse_version(version: str) -> tuple[int, int, int]:
    """``version.ParseVersion``: up to three integer parts; ``""`` is 0.1.0 as in libcni.

    Errors carry code 6 because that is how skel reports them (``ErrDecodingFailure``).
    """
    if version == "":
        return (0, 1, 0)
    parts = version.split(".")
    if len(parts) >= 4:
        quoted = go_quote(version)
        raise CNIError(DECODING_FAILURE, f"invalid version {quoted}: too many parts")
    nums = [
        _atoi(part, what) for part, what in zip(parts, ("major", "minor", "micro"), strict=False)
    ]
    nums += [0] * (3 - len(nums))
    return (nums[0], nums[1], nums[2])


def version_ge(version: str, other: str) -> bool:
    """``version.GreaterThanOrEqualTo``."""
    return parse_version(version) >= parse_version(other)


def _atoi(text: str, what: str) -> int:
    body = text[1:] if text[:1] in ("+", "-") else text
    reason = "invalid syntax"
    if body.isascii() and body.isdigit():
        value = int(text)
        if -(2**63) <= value < 2**63:
            return value
        reason = "value out of range"
    quoted = go_quote(text)
    raise CNIError(
        DECODING_FAILURE,
        f"failed to convert {what} version part {quoted}: strconv.Atoi: parsing {quoted}: {reason}",
    )
