"""The primary CNI config: which file it is, reading it, and what ``00-multus.conf`` takes from it.

Upstream's ``findMasterPlugin``/``getPrimaryCNIPluginName``, ``loadPrimaryCNIConfigFromFile``,
``CheckVersionCompatibility``, ``setCapabilities``, ``overrideNetworkName`` and
``overrideCNIVersion``, with their error texts. Two functions do I/O: :func:`scan_for_primary`
lists a directory (blocking: the caller runs it in a worker thread) and :func:`read_primary`
reads a file (a coroutine, through ``multusd.fileread``; the config, a few KiB, is decoded on
the loop); the rest is pure, over names and bytes.
"""

from __future__ import annotations

import errno as errno_mod
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cni_shim import gojson, gopath
from cni_shim.gofmt import go_value
from cni_shim.gojsonerr import GoJSONError, value_type_error
from cni_shim.gojsonerr import loads as go_loads
from cni_shim.gonum import float64_value
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from multusd.config.generate import semver
from multusd.fileread import read_bytes

_SKIP_PREFIX = "00-multus"
_EXTENSIONS = (".conf", ".conflist")
_V040 = semver.parse("0.4.0")


class PrimaryConfigError(Exception):
    """The primary CNI config cannot be used; the message is upstream's text for the case."""


class PrimaryListError(PrimaryConfigError):
    """``multusAutoconfigDir`` cannot be listed; ``errno`` tells a missing dir from the rest."""

    def __init__(self, message: str, errno: int | None) -> None:
        super().__init__(message)
        self.errno = errno


# --------------------------------------------------------------------------------------------
# Choosing the primary


def is_candidate(name: str) -> bool:
    """A name upstream's discovery would consider (our own ``00-multus*`` files never are)."""
    return not name.startswith(_SKIP_PREFIX) and _go_ext(name) in _EXTENSIONS


def _go_ext(name: str) -> str:
    """``filepath.Ext``: from the last dot on (``.conf`` is its own extension, unlike Python)."""
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 else ""


def first_candidate(names: Iterable[str]) -> str | None:
    """The lexically first candidate, by bytes as Go's ``sort.Strings`` orders them."""
    return min((n for n in names if is_candidate(n)), key=os.fsencode, default=None)


def scan_for_primary(directory: str) -> str | None:
    """List ``directory`` once (blocking); ``None`` when it holds no candidate yet."""
    try:
        names = os.listdir(directory) if directory else _missing_dir()
    except OSError as exc:
        raise PrimaryListError(
            "error when listing the CNI plugin configurations: "
            f"open {directory}: {errno_text(exc.errno)}",
            exc.errno,
        ) from exc
    return first_candidate(names)


def _missing_dir() -> list[str]:
    # Go's os.ReadDir("") fails with ENOENT; Python would list the working directory instead.
    raise FileNotFoundError(errno_mod.ENOENT, os.strerror(errno_mod.ENOENT))


def primary_path(autoconfig_dir: str, name: str) -> str:
    """``filepath.Join(dir, name)``: also what ``clusterNetwork`` says (not made absolute)."""
    return gopath.join(autoconfig_dir, name)


# --------------------------------------------------------------------------------------------
# Loading the primary


@dataclass(frozen=True, slots=True)
class Primary:
    """A decoded, version-checked primary CNI config."""

    path: str
    data: dict[str, Any] = field(repr=False)


async def read_primary(path: str, multus_version: str) -> Primary:
    """Read and check the primary: upstream's ``loadPrimaryCNIConfigFromFile``."""
    try:
        data = await read_bytes(path)
    except OSError as exc:
        op = "read" if exc.errno == errno_mod.EISDIR else "open"
        raise PrimaryConfigError(
            f"failed to access the primary CNI configuration from {path}: failed to read the "
            f"cluster primary CNI config {path}: {op} {path}: {errno_text(exc.errno)}"
        ) from exc
    return parse_primary(path, data, multus_version)


def parse_primary(path: str, data: bytes, multus_version: str) -> Primary:
    try:
        decoded = go_loads(data)
    except GoJSONError as exc:
        raise PrimaryConfigError(
            f"failed to access the primary CNI configuration from {path}: "
            f"failed to unmarshall primary CNI config: {exc}"
        ) from exc
    check_version_compatibility(multus_version, decoded)
    if not isinstance(decoded, dict):
        raise PrimaryConfigError("couldn't get cni config from delegate")
    return Primary(path, decoded)


def check_version_compatibility(multus_version: str, delegate: Any) -> None:
    """CHECK arrived in 0.4.0: from there on the primary must be at least 0.4.0 too."""
    try:
        multus = semver.parse(multus_version)
    except ValueError:
        raise PrimaryConfigError("couldn't get top level cni version") from None
    if multus < _V040:
        return
    version = delegate.get("cniVersion") if isinstance(delegate, dict) else None
    if not isinstance(version, str):
        raise PrimaryConfigError("couldn't get cni version of delegate")
    try:
        theirs = semver.parse(version)
    except ValueError as exc:
        raise PrimaryConfigError(str(exc)) from None
    if theirs < _V040:
        raise PrimaryConfigError(
            f"delegate cni version is {version} while top level cni version is {multus_version}"
        )


def enabled_capabilities(data: Mapping[str, Any]) -> list[str]:
    """Capabilities the primary enables: per plugin of a non-empty ``plugins`` list, else top level.

    Upstream crashes on a non-list ``plugins`` or a non-boolean capability; both are errors here.
    """
    plugins = data.get("plugins", [])
    if not isinstance(plugins, list):
        raise PrimaryConfigError("couldn't get cni config from delegate: plugins is not a list")
    found: list[str] = []
    for entry in plugins or [data]:
        caps = entry.get("capabilities") if isinstance(entry, dict) else None
        if not isinstance(caps, dict):
            continue
        for name, enabled in caps.items():
            if not isinstance(enabled, bool):
                raise PrimaryConfigError(f"capability {go_quote(name)} is not a boolean")
            if enabled:
                found.append(name)
    return found


def primary_network_name(data: Mapping[str, Any]) -> str:
    """The primary's ``name``, for ``overrideNetworkName``."""
    name = data.get("name")
    if not isinstance(name, str):
        raise PrimaryConfigError(
            "could not override the network name: failed to access delegate CNI plugin name"
        )
    if not name:
        raise PrimaryConfigError(
            "could not override the network name: the primary CNI Configuration does not "
            f"feature the network name: {go_value(dict(data))}"
        )
    return name


def force_cni_version(path: str, data: bytes, version: str) -> bytes:
    """The primary rewritten with our ``cniVersion`` (``forceCNIVersion``): Go map, keys sorted."""
    try:
        decoded = go_loads(data)
        if not isinstance(decoded, dict):
            raise value_type_error(decoded, "map[string]interface {}")
    except GoJSONError as exc:
        raise PrimaryConfigError(f"failed to unmarshall cni config {path}: {exc}") from exc
    decoded["cniVersion"] = version
    return gojson.dumps(_as_go_map(decoded), sort_keys=True).encode("utf-8")


# --------------------------------------------------------------------------------------------
# Go's interface{}


def _as_go_map(value: Any) -> Any:
    """``value`` after a trip through ``interface{}``: every number is a float64."""
    if isinstance(value, dict):
        return {k: _as_go_map(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_go_map(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float64_value(float(value))
    return value
