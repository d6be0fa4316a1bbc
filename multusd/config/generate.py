"""The generated ``00-multus.conf`` (auto mode): pick the primary CNI config, check it, render ours.

Pure functions over bytes and names, plus two small synchronous readers for the directory scan
and the primary file; :mod:`multusd.config.manager` runs those in a worker thread, owns the
timing and the writes. Everything here follows upstream's ``pkg/server/config`` (reference §4)
byte for byte, because runtimes and operators compare the generated file and the error texts:

* the primary is ``multusMasterCNI`` or the lexically first ``.conf``/``.conflist`` name not
  starting with ``00-multus`` (Go's ``filepath.Ext``, so a file named ``.conf`` counts);
* the generated keys come in Go struct order, empty ones omitted, with the directory/selection
  keys cleared, ``capabilities`` sorted, and ``cniVersion``, ``name`` and ``type`` always there;
* version checks use semver with blang/semver's error texts.

Two deliberate differences, both where upstream keeps stale state: capabilities and the
overridden network name are recomputed from the primary as it is *now* on every generation
(upstream accumulates capabilities and reads the name once, so a capability the primary drops
stays until a restart), and a primary that cannot be decoded is an error, never an empty file.
"""

from __future__ import annotations

import errno as errno_mod
import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cni_shim import gojson
from cni_shim.gofmt import go_value
from cni_shim.gojsonerr import GoJSONError, value_type_error
from cni_shim.gojsonerr import loads as go_loads
from cni_shim.gonum import float64_value
from cni_shim.goquote import go_quote
from cni_shim.gosyscall import errno_text
from multusd.config.daemon import LogOptions
from multusd.config.schema import SchemaError, decode, json_field
from multusd.errors import ConfigError

MULTUS_CONFIG_NAME = "00-multus.conf"
DEFAULT_NETWORK_NAME = "multus-cni-network"
_SKIP_PREFIX = "00-multus"
_EXTENSIONS = (".conf", ".conflist")


class PrimaryConfigError(Exception):
    """The primary CNI config cannot be used; the message is upstream's text for the case."""


class PrimaryListError(PrimaryConfigError):
    """``multusAutoconfigDir`` cannot be listed; ``errno`` tells a missing dir from the rest."""

    def __init__(self, message: str, errno: int | None) -> None:
        super().__init__(message)
        self.errno = errno


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """Upstream's ``MultusConf``: the daemon config read a second time, with its own defaults.

    Field order is the Go struct order, which is the key order of the generated file. Its
    defaults differ from the request-time ones (``binDir`` is empty here, not /opt/cni/bin), so
    it is decoded from the raw daemon-config object rather than derived from ``DaemonConfig``.
    """

    bin_dir: str = json_field("binDir", "")
    capabilities: dict[str, bool] = json_field("capabilities", factory=dict)
    cni_version: str = json_field("cniVersion", "")
    log_file: str = json_field("logFile", "")
    log_level: str = json_field("logLevel", "")
    log_to_stderr: bool = json_field("logToStderr", False)
    log_options: LogOptions | None = json_field("logOptions", None)
    name: str = json_field("name", DEFAULT_NETWORK_NAME)
    cluster_network: str = json_field("clusterNetwork", "")
    namespace_isolation: bool = json_field("namespaceIsolation", False)
    global_namespaces: str = json_field("globalNamespaces", "")
    readiness_indicator_file: str = json_field("readinessindicatorfile", "")
    type: str = json_field("type", "multus-shim")
    cni_dir: str = json_field("cniDir", "")
    cni_config_dir: str = json_field("cniConfigDir", "/etc/cni/net.d")
    auxiliary_cni_chain_name: str = json_field("auxiliaryCNIChainName", "")
    daemon_socket_dir: str = json_field("daemonSocketDir", "")
    multus_config_file: str = json_field("multusConfigFile", "auto")
    multus_master_cni: str = json_field("multusMasterCNI", "")
    multus_autoconfig_dir: str = json_field("multusAutoconfigDir", "")
    force_cni_version: bool = json_field("forceCNIVersion", False)
    override_network_name: bool = json_field("overrideNetworkName", False)


def generator_config(raw: Mapping[str, Any]) -> GeneratorConfig:
    """Decode the generator's view of the daemon config; ``name`` is always forced, as upstream."""
    try:
        conf = decode(GeneratorConfig, raw)
    except SchemaError as exc:
        raise ConfigError(f"failed to unmarshall the daemon configuration: {exc}") from exc
    return replace(conf, name=DEFAULT_NETWORK_NAME)


# --------------------------------------------------------------------------------------------
# Choosing the primary (reference §4.1)


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
    joined = "/".join(part for part in (autoconfig_dir, name) if part)
    if not joined:
        return ""
    cleaned = posixpath.normpath(joined)
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned


def check_not_recursive(conf: GeneratorConfig, name: str) -> None:
    """Refuse to read our own output as the primary.

    Upstream only rejects ``multusMasterCNI`` spelled exactly ``<dir>/00-multus.conf``; we also
    reject any name that resolves to the file we write, with the same message.
    """
    own = primary_path(conf.cni_config_dir, MULTUS_CONFIG_NAME)
    exact = f"{conf.multus_autoconfig_dir}/{MULTUS_CONFIG_NAME}"
    if name == exact or primary_path(conf.multus_autoconfig_dir, name) == own:
        raise PrimaryConfigError(f"cannot specify {exact} to prevent recursive config load")


# --------------------------------------------------------------------------------------------
# Loading the primary (reference §4.2)


@dataclass(frozen=True, slots=True)
class Primary:
    """A decoded, version-checked primary CNI config."""

    path: str
    data: dict[str, Any] = field(repr=False)


def read_primary(path: str, multus_version: str) -> Primary:
    """Read and check the primary (blocking): upstream's ``loadPrimaryCNIConfigFromFile``."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
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
        multus = _semver(multus_version)
    except ValueError:
        raise PrimaryConfigError("couldn't get top level cni version") from None
    if multus < _V040:
        return
    version = delegate.get("cniVersion") if isinstance(delegate, dict) else None
    if not isinstance(version, str):
        raise PrimaryConfigError("couldn't get cni version of delegate")
    try:
        theirs = _semver(version)
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
# Rendering (reference §4.3, §4.4)


def render(conf: GeneratorConfig, primary: Primary | None = None) -> bytes:
    """The bytes of ``00-multus.conf``: compact JSON in upstream's key order, no newline."""
    capabilities = dict(conf.capabilities)
    name, cluster_network = conf.name, conf.cluster_network
    if primary is not None:
        capabilities.update(dict.fromkeys(enabled_capabilities(primary.data), True))
        cluster_network = primary.path
        if conf.override_network_name:
            name = primary_network_name(primary.data)
    out: dict[str, Any] = {}
    _put(out, "binDir", conf.bin_dir)
    _put(out, "capabilities", dict(sorted(capabilities.items())))
    out["cniVersion"] = conf.cni_version
    _put(out, "logFile", conf.log_file)
    _put(out, "logLevel", conf.log_level)
    _put(out, "logToStderr", conf.log_to_stderr)
    if conf.log_options is not None:
        out["logOptions"] = _log_options(conf.log_options)
    out["name"] = name
    _put(out, "clusterNetwork", cluster_network)
    _put(out, "namespaceIsolation", conf.namespace_isolation)
    _put(out, "globalNamespaces", conf.global_namespaces)
    # readinessindicatorfile is cleared: the daemon watches it, requests must not poll it.
    out["type"] = conf.type
    _put(out, "cniDir", conf.cni_dir)
    # cniConfigDir is cleared: it only says where this file goes.
    _put(out, "auxiliaryCNIChainName", conf.auxiliary_cni_chain_name)
    _put(out, "daemonSocketDir", conf.daemon_socket_dir)
    # multusConfigFile, multusMasterCNI, multusAutoconfigDir, forceCNIVersion are cleared.
    _put(out, "overrideNetworkName", conf.override_network_name)
    return gojson.dumps(out).encode("utf-8")


def _put(out: dict[str, Any], key: str, value: object) -> None:
    if value:  # Go's omitempty: "", false, an empty map
        out[key] = value


def _log_options(options: LogOptions) -> dict[str, Any]:
    pairs = (
        ("maxAge", options.max_age),
        ("maxSize", options.max_size),
        ("maxBackups", options.max_backups),
        ("compress", options.compress),
    )
    return {key: value for key, value in pairs if value is not None}  # nil pointers omitted


# --------------------------------------------------------------------------------------------
# Go details: semver (blang/semver v3), the float64 trip


_V040 = (0, 4, 0, 1)
_NUMBERS = frozenset("0123456789")
_ALPHANUM = _NUMBERS | frozenset("-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _semver(text: str) -> tuple[int, int, int, int]:
    """``semver.Make``, reduced to a key that orders correctly against a release version.

    The last element is 0 for a pre-release, which sorts before the release itself.
    """
    if not text:
        raise ValueError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major = _semver_number(parts[0], "major", "Major")
    minor = _semver_number(parts[1], "minor", "Minor")
    patch_text, _, build = parts[2].partition("+")
    patch_text, dash, pre = patch_text.partition("-")
    patch = _semver_number(patch_text, "patch", "Patch")
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


def _semver_number(text: str, lower: str, title: str) -> int:
    if not set(text) <= _NUMBERS:
        raise ValueError(f"Invalid character(s) found in {lower} number {go_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise ValueError(f"{title} number must not contain leading zeroes {go_quote(text)}")
    if not text:
        raise ValueError('strconv.ParseUint: parsing "": invalid syntax')
    if int(text) >= 1 << 64:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(text)}: value out of range")
    return int(text)


def _as_go_map(value: Any) -> Any:
    """``value`` after a trip through ``interface{}``: every number is a float64."""
    if isinstance(value, dict):
        return {k: _as_go_map(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_go_map(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float64_value(float(value))
    return value
