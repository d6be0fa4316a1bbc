"""Conflists completed from the node's disk: sub-directory plugins and the auxiliary CNI chain.

Upstream HEAD (``pkg/k8sclient``: ``loadSubdirectoryChain``) appends to a conflist every
``*.conf`` of the directory named after the list, beside where the list came from, unless the
list says ``loadOnlyInlinedPlugins``; the name must then be a safe file name (the CNI spec's
rule). Two callers use it, so both live here:

* a ``clusterNetwork`` that is a ``.conflist`` path: the directory beside that file
  (:mod:`multusd.networks.ondisk`);
* ``auxiliaryCNIChainName`` (``CmdAdd``): after the pod's delegates, one more delegate, a list
  of that name whose first plugin is ``passthru`` (``cni_shim.passthru``: chained plugins need
  a ``prevResult``), completed from ``<dirname(clusterNetwork)>/<name>/*.conf``. It is added
  only when that directory gave it a plugin; a loading error is logged and the chain skipped,
  as upstream does, so a broken file on the node costs the extra chain, never the pod.

Delegates are built as HEAD's ``LoadDelegateNetConfFromConfList`` builds them: the list's keys
plus each plugin's own bytes as a ``json.RawMessage``, keys sorted, so what a plugin file says
reaches the plugin and the delegate cache as written (the upstream fix for #1521/#1536).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from dataclasses import replace

from cni_shim import gojson
from cni_shim.errors import INVALID_NETWORK_CONFIG, IO_FAILURE, CNIError
from cni_shim.gopath import clean, join
from cni_shim.gosyscall import errno_text
from multusd.cni.conf import NetworkConfig, NetworkConfigList, conf_from_file, conflist_from_bytes
from multusd.networks.delegates import Delegate
from multusd.networks.netconf import NetConf

log = logging.getLogger(__name__)

CHAIN_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.\-]*")
"""A list name that may name a directory; matched whole (Go's ``$`` is the end of the text)."""

PASSTHRU_LIST = (
    '{{"cniVersion":"{version}","name":"{name}",'
    '"plugins":[{{"type":"passthru","name":"passthru-cni"}}]}}'
)
"""The auxiliary chain before its plugins are loaded. Upstream formats it as text (``%s``): a
name holding a quote makes it invalid JSON, which is then logged like any loading error."""

_STRING_OR_SPACE = re.compile(rb'"(?:[^"\\]|\\.)*"|[ \t\r\n]+', re.DOTALL)
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[][{}:,]', re.DOTALL)
_GO_ESCAPES = {
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    "\u2028".encode(): b"\\u2028",
    "\u2029".encode(): b"\\u2029",
}
_ESCAPED = re.compile(b"|".join(re.escape(k) for k in _GO_ESCAPES))


def go_dir(path: str) -> str:
    """``filepath.Dir``: all but the last element, cleaned (``"."`` when there is none)."""
    return clean(path[: path.rfind("/") + 1])


def compact(raw: bytes) -> bytes:
    """What ``json.Marshal`` makes of a ``json.RawMessage``: the JSON without insignificant
    white space, and ``<``, ``>``, ``&``, U+2028, U+2029 escaped (they only occur in strings);
    every other byte, number spellings and escapes included, as written. ``raw`` is valid."""
    spaceless = _STRING_OR_SPACE.sub(lambda m: m.group() if m.group()[:1] == b'"' else b"", raw)
    return _ESCAPED.sub(lambda m: _GO_ESCAPES[m.group()], spaceless)


def _members(compacted: bytes) -> dict[str, bytes]:
    """A compacted JSON object's members, key to value bytes: Go's
    ``map[string]json.RawMessage`` (a repeated key keeps its last value)."""
    members: dict[str, bytes] = {}
    depth, start = 0, 0
    key: str | None = None
    for match in _TOKEN.finditer(compacted):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
            continue
        if depth != 1 and token not in (b"}", b"]"):
            continue
        if token in (b"}", b"]"):
            depth -= 1
            if depth == 0 and key is not None:
                members[key] = compacted[start : match.start()]
        elif token == b":":
            start = match.end()
        elif token == b"," and key is not None:
            members[key] = compacted[start : match.start()]
            key = None
        elif key is None:
            key = json.loads(token.decode("utf-8", "replace"))
    return members


def lossless_raw(conflist: NetworkConfigList) -> bytes:
    """HEAD's ``losslessConfListBytes``: the list's own keys, ``plugins`` rebuilt from every
    plugin's bytes (sub-directory ones included), keys sorted as a Go map marshals them."""
    members = _members(compact(conflist.raw))
    members["plugins"] = b"[" + b",".join(compact(p.raw) for p in conflist.plugins) + b"]"
    body = b",".join(gojson.dumps(k).encode() + b":" + v for k, v in sorted(members.items()))
    return b"{" + body + b"}"


def chain_delegate(conflist: NetworkConfigList) -> Delegate:
    """HEAD's ``LoadDelegateNetConfFromConfList`` without a selection element: a conflist
    delegate named after the list, on :func:`lossless_raw` bytes."""
    raw = lossless_raw(conflist)
    conf = json.loads(raw)
    plugins = tuple(conf.pop("plugins"))
    return Delegate(raw=raw, conf=conf, name=conflist.name, plugins=plugins)


def _conf_files(directory: str) -> list[str]:
    """libcni ``ConfFiles(dir, [".conf"])``: the entries that are not directories (links not
    followed) with that extension, by name; none when ``dir`` does not exist. Blocking."""
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if not e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CNIError(IO_FAILURE, f"open {directory}: {errno_text(exc.errno)}") from exc
    chosen = [n for n in names if "." in n and n[n.rfind(".") :] == ".conf"]  # filepath.Ext
    return [join(directory, n) for n in sorted(chosen, key=os.fsencode)]


async def plugin_confs_from_files(conf_dir: str, network: str) -> list[NetworkConfig]:
    """libcni ``NetworkPluginConfsFromFiles``: ``<conf_dir>/<network>/*.conf`` as plugins."""
    directory = join(conf_dir, network)
    try:
        files = await asyncio.to_thread(_conf_files, directory)
    except CNIError as exc:
        raise exc.with_prefix(f"failed to read plugin config files in {directory}: ") from exc
    return [await conf_from_file(path) for path in files]


def _config_error(exc: CNIError, prefix: str) -> CNIError:
    """A loading error as Multus words it: a file that cannot be read stays an I/O error (5),
    anything else is a config Multus cannot use (7)."""
    code = IO_FAILURE if exc.code == IO_FAILURE else INVALID_NETWORK_CONFIG
    return CNIError(code, prefix + str(exc))


async def subdirectory_chain(raw: bytes, conf_dir: str) -> NetworkConfigList:
    """HEAD's ``loadSubdirectoryChain``: parse the list, append its sub-directory's plugins
    (unless ``loadOnlyInlinedPlugins``), insist on a plugin."""
    try:
        conflist = conflist_from_bytes(raw)
    except CNIError as exc:
        raise _config_error(exc, "error loading network config from bytes: ") from exc
    plugins = list(conflist.plugins)
    if not conflist.load_only_inlined_plugins and conf_dir:
        if not CHAIN_NAME.fullmatch(conflist.name):
            raise CNIError(INVALID_NETWORK_CONFIG, f"invalid network config name: {conflist.name}")
        try:
            plugins += await plugin_confs_from_files(conf_dir, conflist.name)
        except CNIError as exc:
            raise _config_error(exc, "error loading plugin configs: ") from exc
    if not plugins:
        raise CNIError(INVALID_NETWORK_CONFIG, "no plugin configs found")
    return replace(conflist, plugins=tuple(plugins))


async def auxiliary_chain(netconf: NetConf, pod_label: str) -> Delegate | None:
    """HEAD's auxiliary chain (``CmdAdd``, after the pod's delegates): the delegate to append,
    or ``None`` (no ``auxiliaryCNIChainName``, nothing in its directory, or a loading error,
    which is logged). A ``clusterNetwork`` that is not a path fails the ADD."""
    name = netconf.auxiliary_cni_chain_name
    if not name:
        return None
    log.debug("Using AuxiliaryCNIChainName: %s", name)
    raw = PASSTHRU_LIST.format(version=netconf.cni_version, name=name)
    if "/" not in netconf.cluster_network:
        raise CNIError(
            INVALID_NETWORK_CONFIG,
            f"Multus: [{pod_label}]: auxiliary chain used but ClusterNetwork must be a path, "
            f"and it is not a path: {netconf.cluster_network}",
        )
    try:
        conflist = await subdirectory_chain(
            raw.encode("utf-8", "surrogatepass"), go_dir(netconf.cluster_network)
        )
        delegate = chain_delegate(conflist)
    except CNIError as exc:
        log.error("LoadChainedDelegatesFromBytes: %s", exc)
        return None
    # Only a chain that got plugins of its own is worth running.
    return delegate if len(delegate.plugins) > 1 else None
