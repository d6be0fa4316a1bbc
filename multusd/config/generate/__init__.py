"""The generated ``00-multus.conf`` (auto mode): pick the primary CNI config, check it, render ours.

Everything here follows upstream's ``pkg/server/config`` byte for byte (docs/configuration.md,
"Generated configuration"), because runtimes and operators compare the generated file and the
error texts:

* the primary is ``multusMasterCNI`` or the lexically first ``.conf``/``.conflist`` name not
  starting with ``00-multus`` (Go's ``filepath.Ext``, so a file named ``.conf`` counts);
* the generated keys come in Go struct order, empty ones omitted, with the directory/selection
  keys cleared, ``capabilities`` sorted, and ``cniVersion``, ``name`` and ``type`` always there;
* version checks use semver with blang/semver's error texts.

Two deliberate differences, both where upstream keeps stale state: capabilities and the
overridden network name are recomputed from the primary as it is *now* on every generation
(upstream accumulates capabilities and reads the name once, so a capability the primary drops
stays until a restart), and a primary that cannot be decoded is an error, never an empty file
(docs/compatibility.md, "The upstream quirks, one by one", 3 and 4).

One module per seam; callers import from this package:

* :mod:`.primary`: which file is the primary, reading it, and what it must hold. Its two
  readers are :func:`scan_for_primary` (a directory listing, blocking: the config manager runs
  it in a worker thread) and :func:`read_primary` (a coroutine, reading through
  ``multusd.fileread``); the config manager owns the timing and the writes. Everything else in
  the package is pure.
* :mod:`.output`: the generator's view of the daemon config and the bytes of the file.
* :mod:`.semver`: blang/semver's version parsing, for the version checks.
"""

from __future__ import annotations

from multusd.config.generate.output import (
    DEFAULT_NETWORK_NAME,
    MULTUS_CONFIG_NAME,
    GeneratorConfig,
    check_not_recursive,
    generator_config,
    render,
)
from multusd.config.generate.primary import (
    Primary,
    PrimaryConfigError,
    PrimaryListError,
    check_version_compatibility,
    enabled_capabilities,
    first_candidate,
    force_cni_version,
    is_candidate,
    parse_primary,
    primary_network_name,
    primary_path,
    read_primary,
    scan_for_primary,
)

__all__ = [
    "DEFAULT_NETWORK_NAME",
    "MULTUS_CONFIG_NAME",
    "GeneratorConfig",
    "Primary",
    "PrimaryConfigError",
    "PrimaryListError",
    "check_not_recursive",
    "check_version_compatibility",
    "enabled_capabilities",
    "first_candidate",
    "force_cni_version",
    "generator_config",
    "is_candidate",
    "parse_primary",
    "primary_network_name",
    "primary_path",
    "read_primary",
    "render",
    "scan_for_primary",
]
