"""Semantic versions as blang/semver v3 reads them for upstream's version checks, with its texts.

The generated config's version checks fail with blang/semver's words (``No Major.Minor.Patch
elements found``, ``Invalid character(s) found in major number "x"``); operators see them in the
daemon's log. Only what the checks need: :func:`parse` gives a key that orders correctly
against a release version.
"""

from __future__ import annotations

from cni_shim.goquote import go_quote

_NUMBERS = frozenset("0123456789")
_ALPHANUM = _NUMBERS | frozenset("-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse(text: str) -> tuple[int, int, int, int]:
    """``semver.Make``, reduced to a key that orders correctly against a release version.

    The last element is 0 for a pre-release, which sorts before the release itself.
    """
    if not text:
        raise ValueError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major", "Major")
    minor = _number(parts[1], "minor", "Minor")
    patch_text, _, build = parts[2].partition("+")
    patch_text, dash, pre = patch_text.partition("-")
    patch = _number(patch_text, "patch", "Patch")
    for ident in pre.split(".") if dash else []:
        if not ident:
            raise ValueError("Prerelease is empty")
        if set(ident) <= _NUMBERS:
            if len(ident) > 1 and ident[0] == "0":
                raise ValueError(
                    f"Numeric PreRelease version must not contain leading zeroes {go_quote(ident)}"
                )
        elif not set(ident) <= _ALPHANUM:
            raise ValueError(f"Invalid character(s) found in prerelease {go_quote(ident)}")
    for ident in build.split(".") if "+" in parts[2] else []:
        if not ident:
            raise ValueError("Build meta data is empty")
        if not set(ident) <= _ALPHANUM:
            raise ValueError(f"Invalid character(s) found in build meta data {go_quote(ident)}")
    return (major, minor, patch, 0 if dash else 1)


def _number(text: str, lower: str, title: str) -> int:
    if not set(text) <= _NUMBERS:
        raise ValueError(f"Invalid character(s) found in {lower} number {go_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise ValueError(f"{title} number must not contain leading zeroes {go_quote(text)}")
    if not text:
        raise ValueError('strconv.ParseUint: parsing "": invalid syntax')
    if int(text) >= 1 << 64:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(text)}: value out of range")
    return int(text)
