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
from pathlib import Path

from cni_shim.errors import INVALID_NETWORK_CONFIG, IO_FAILURE, CNIError
from cni_shim.gosyscall import errno_text
from multusd.cni.conf import NetworkConfigList, conflist_from_file
from multusd.fileread import read_bytes
from multusd.networks.chains import chain_delegate, go_dir, subdirectory_chain
from multusd.networks.delegates import (
    Delegate,
    decode_object,
    delegate_from_bytes,
    invalid_config,
)

_CONFIG_SUFFIXES = (".conf", ".json", ".conflist")


async def _read_config(path: Path) -> bytes:
    """A config file's bytes; a failure in libcni's words (``error reading <p>: open <p>: ...``,
    code 5)."""
    try:
        return await read_bytes(path)
    except OSError as exc:
        raise CNIError(
            IO_FAILURE, f"error reading {path}: open {path}: {errno_text(exc.errno)}"
        ) from exc


async def load_conflist_file(path: Path) -> Delegate:
    """A ``.conflist`` file given as a path (HEAD's ``LoadChainedPluginsFromFile``): a regular
    file, completed with the plugins of the directory named after it beside it
    (:mod:`multusd.networks.chains`), as a lossless delegate
    (docs/upstream.md, "Delegates from config bytes")."""
    prefix = f"error loading CNI conflist file {path}: "
    try:
        if not await asyncio.to_thread(path.is_file):
            raise invalid_config("CNI configuration path is not a regular file")
        conflist = await subdirectory_chain(await _read_config(path), go_dir(str(path)))
    except CNIError as exc:
        raise exc.with_prefix(prefix) from exc
    return chain_delegate(conflist)


async def _named_conflist(path: Path) -> NetworkConfigList:
    """A ``.conflist`` met while looking a network up by name, read as upstream's
    ``GetCNIConfigFromFile`` reads it (libcni ``ConfListFromFile``): its sub-directory plugins
    are loaded, so checked, but the delegate is the file's own bytes."""
    try:
        return await conflist_from_file(str(path))
    except CNIError as exc:
        code = IO_FAILURE if exc.code == IO_FAILURE else INVALID_NETWORK_CONFIG
        raise CNIError(code, f"error loading CNI conflist file {path}: {exc}") from exc


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
        if path.suffix == ".conflist":
            listed = await _named_conflist(path)
            if listed.name == name:
                return delegate_from_bytes(listed.raw)
            continue
        delegate = await load_conf_file(path)
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
