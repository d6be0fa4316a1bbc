"""Delegates from disk: a config file, a conflist, a directory, or a name in ``confDir``.

How upstream (and libcni) find and read a ``clusterNetwork`` or ``defaultNetworks`` entry
that is a path, or a CNI config name looked up in ``confDir`` (docs/configuration.md, the
per-request keys): sorted, non-recursive, the first match wins.

Files are read through ``multusd.fileread``; listings and ``stat`` calls are worker-thread hops
of their own. The JSON is decoded on the loop: these are the node's CNI configs, written by
root, a few KiB each (a few µs). A 1 MiB one would hold the loop ~8 ms to decode, ~20 ms for a
conflist also re-encoded: what a NAD whose ``spec.config`` is that big (etcd takes objects up
to 1.5 MiB) already costs on the loop, where its config is decoded, and no reason for a second
rule for big files.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from cni_shim import gojson
from cni_shim.errors import IO_FAILURE, CNIError
from multusd.fileread import read_bytes
from multusd.networks.delegates import (
    Delegate,
    decode_object,
    delegate_from_bytes,
    invalid_config,
)

_CONFIG_SUFFIXES = (".conf", ".json", ".conflist")
_CHAIN_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")


async def _subdirectory_plugins(config_dir: Path, list_name: str) -> list[bytes]:
    """libcni's subdirectory plugin loading: ``<dir>/<list name>/*.conf``, sorted."""
    if not _CHAIN_NAME.match(list_name):
        return []
    subdir = config_dir / list_name
    try:
        names = await asyncio.to_thread(os.listdir, subdir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [await read_bytes(subdir / n) for n in sorted(names) if Path(n).suffix == ".conf"]


async def load_conflist_file(path: Path) -> Delegate:
    """A ``.conflist`` file as a lossless delegate (HEAD behaviour,
    docs/upstream.md, "Delegates from config bytes").

    The bytes are rebuilt from the list-level keys plus every plugin's own raw bytes, so that
    plugin-specific keys survive to DEL (the upstream fix for leaked IPs, #1521/#1536).
    """
    prefix = f"error loading CNI conflist file {path}: "
    if not await asyncio.to_thread(path.is_file):
        raise invalid_config(prefix + "CNI configuration path is not a regular file")
    data = await read_bytes(path)
    conf = decode_object(data, prefix.rstrip(": "))
    plugins = conf.get("plugins")
    if not isinstance(plugins, list):
        plugins = []
    extra = [
        decode_object(b, prefix + "subdirectory plugin")
        for b in await _subdirectory_plugins(path.parent, str(conf.get("name", "")))
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


async def load_conf_file(path: Path) -> Delegate:
    """A single-plugin config file; ``type`` is mandatory (libcni ``ConfFromFile``)."""
    data = await read_bytes(path)
    prefix = f"error loading CNI config file {path}: "
    conf = decode_object(data, prefix + "error parsing configuration")
    if not conf.get("type"):
        raise invalid_config(prefix + "error parsing configuration: missing 'type'")
    return delegate_from_bytes(data)


async def config_files(directory: Path) -> list[Path]:
    """The ``.conf``, ``.json`` and ``.conflist`` entries of ``directory``, sorted by name.

    The ``OSError`` of the listing (``FileNotFoundError``, ``NotADirectoryError``) is raised.
    """
    names = await asyncio.to_thread(os.listdir, directory)
    return [directory / n for n in sorted(names) if Path(n).suffix in _CONFIG_SUFFIXES]


async def load_path(path: Path) -> Delegate:
    """A cluster network given as a path: a directory, a ``.conflist`` or a config file."""
    if await asyncio.to_thread(path.is_dir):
        files = await config_files(path)
        if not any(p.suffix in (".conf", ".conflist") for p in files):
            raise invalid_config(f"getNetDelegate: cannot find network: {path}")
        first = files[0]
        return delegate_from_bytes(await read_bytes(first))
    if path.suffix == ".conflist":
        return await load_conflist_file(path)
    return await load_conf_file(path)


async def find_in(files: list[Path], name: str) -> Delegate | None:
    """The first of ``files`` (see :func:`config_files`) whose CNI ``name`` is ``name``.

    As upstream, an unparsable file met before the match aborts the search.
    """
    for path in files:
        is_list = path.suffix == ".conflist"
        delegate = await (load_conflist_file(path) if is_list else load_conf_file(path))
        if delegate.name == name:
            return delegate
    return None


async def find_by_name(conf_dir: Path, name: str) -> Delegate | None:
    """The first config in ``conf_dir`` (sorted, non-recursive) whose CNI ``name`` is ``name``;
    ``None`` when there is none, or no such directory."""
    try:
        files = await config_files(conf_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return await find_in(files, name)


async def resolve_on_disk(name: str, conf_dir: str) -> Delegate:
    """Resolve a ``clusterNetwork``/``defaultNetworks`` entry without Kubernetes
    (docs/upstream.md, "Cluster and default networks")."""
    try:
        if "/" in name:
            await asyncio.to_thread(os.stat, name)
            return await load_path(Path(name))
        found = await find_by_name(Path(conf_dir), name)
    except OSError as exc:
        raise CNIError(IO_FAILURE, f"{exc.strerror}: {exc.filename}") from exc
    if found is None:
        raise invalid_config(f"getNetDelegate: cannot find network: {name}")
    return found
