"""Delegates from disk: a config file, a conflist, a directory, or a name in ``confDir``.

How upstream (and libcni) find and read a ``clusterNetwork`` or ``defaultNetworks`` entry
that is a path, or a CNI config name looked up in ``confDir`` (docs/configuration.md, the
per-request keys): sorted, non-recursive, the first match wins. This module is synchronous
and does file I/O; callers run it in a worker thread.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from cni_shim import gojson
from cni_shim.errors import IO_FAILURE, CNIError
from multusd.networks.delegates import (
    Delegate,
    decode_object,
    delegate_from_bytes,
    invalid_config,
)

_CONFIG_SUFFIXES = (".conf", ".json", ".conflist")
_CHAIN_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")


def _subdirectory_plugins(config_dir: Path, list_name: str) -> list[bytes]:
    """libcni's subdirectory plugin loading: ``<dir>/<list name>/*.conf``, sorted."""
    if not _CHAIN_NAME.match(list_name):
        return []
    subdir = config_dir / list_name
    try:
        names = sorted(p.name for p in subdir.iterdir() if p.suffix == ".conf")
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [(subdir / n).read_bytes() for n in names]


def load_conflist_file(path: Path) -> Delegate:
    """A ``.conflist`` file as a lossless delegate (HEAD behaviour,
    docs/upstream.md, "Delegates from config bytes").

    The bytes are rebuilt from the list-level keys plus every plugin's own raw bytes, so that
    plugin-specific keys survive to DEL (the upstream fix for leaked IPs, #1521/#1536).
    """
    prefix = f"error loading CNI conflist file {path}: "
    if not path.is_file():
        raise invalid_config(prefix + "CNI configuration path is not a regular file")
    data = path.read_bytes()
    conf = decode_object(data, prefix.rstrip(": "))
    plugins = conf.get("plugins")
    if not isinstance(plugins, list):
        plugins = []
    extra = [
        decode_object(b, prefix + "subdirectory plugin")
        for b in _subdirectory_plugins(path.parent, str(conf.get("name", "")))
    ]
    plugins = [*plugins, *extra]
    if not plugins:
        raise invalid_config(prefix + "no plugin configs found")
    if not all(isinstance(p, dict) for p in plugins) or not plugins[0].get("type"):
        raise invalid_config(prefix + "a plugin delegate must have the 'type' field")
    top = {k: conf[k] for k in sorted(conf) if k != "plugins"}
    top["plugins"] = plugins
    rebuilt = dict(sorted(top.items()))
    raw = gojson.dumps(rebuilt).encode()
    name = conf.get("name", "")
    return Delegate(
        raw=raw,
        conf={k: v for k, v in rebuilt.items() if k != "plugins"},
        name=name if isinstance(name, str) else "",
        plugins=tuple(plugins),
    )


def load_conf_file(path: Path) -> Delegate:
    """A single-plugin config file; ``type`` is mandatory (libcni ``ConfFromFile``)."""
    data = path.read_bytes()
    prefix = f"error loading CNI config file {path}: "
    conf = decode_object(data, prefix + "error parsing configuration")
    if not conf.get("type"):
        raise invalid_config(prefix + "error parsing configuration: missing 'type'")
    return delegate_from_bytes(data)


def _config_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.iterdir() if p.suffix in _CONFIG_SUFFIXES), key=lambda p: p.name
    )


def load_path(path: Path) -> Delegate:
    """A cluster network given as a path: a directory, a ``.conflist`` or a config file."""
    if path.is_dir():
        files = _config_files(path)
        if not any(p.suffix in (".conf", ".conflist") for p in files):
            raise invalid_config(f"getNetDelegate: cannot find network: {path}")
        first = files[0]
        return delegate_from_bytes(first.read_bytes())
    if path.suffix == ".conflist":
        return load_conflist_file(path)
    return load_conf_file(path)


def find_by_name(conf_dir: Path, name: str) -> Delegate | None:
    """The first config in ``conf_dir`` (sorted, non-recursive) whose CNI ``name`` is ``name``.

    As upstream, an unparsable file met before the match aborts the search.
    """
    try:
        files = _config_files(conf_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    for path in files:
        delegate = load_conflist_file(path) if path.suffix == ".conflist" else load_conf_file(path)
        if delegate.name == name:
            return delegate
    return None


def resolve_on_disk(name: str, conf_dir: str) -> Delegate:
    """Resolve a ``clusterNetwork``/``defaultNetworks`` entry without Kubernetes
    (docs/upstream.md, "Cluster and default networks")."""
    try:
        if "/" in name:
            os.stat(name)
            return load_path(Path(name))
        found = find_by_name(Path(conf_dir), name)
    except OSError as exc:
        raise CNIError(IO_FAILURE, f"{exc.strerror}: {exc.filename}") from exc
    if found is None:
        raise invalid_config(f"getNetDelegate: cannot find network: {name}")
    return found
