"""Running configs and config lists through their plugins (libcni ``CNIConfig``, v1.3.0).

The commands layer hands this module a parsed config and a :class:`RuntimeConf`; everything
libcni does around the plugin calls happens here, with libcni's ordering, version gates,
caching and error texts: ADD validates before exec and chains ``prevResult``; results are
cached after ADD and fed back as ``prevResult`` on CHECK/DEL; DEL runs in reverse; GC and
STATUS follow the 1.1.0 rules. Errors keep their CNI code through every prefix added here.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cni_shim import errors, gojson, results, skel
from cni_shim.errors import CNIError
from cni_shim.goquote import go_quote
from multusd import timeline
from multusd.cni import cache, pending
from multusd.cni.conf import NetworkConfig, NetworkConfigList, inject, plugin_stdin
from multusd.cni.invoke import LibcniError, PluginExecutor, find_plugin, prefixed

log = logging.getLogger(__name__)

Result = dict[str, Any]


@dataclass(frozen=True)
class RuntimeConf:
    """One invocation's arguments apart from the config (libcni ``RuntimeConf``).

    ``args`` become ``CNI_ARGS`` (``k=v;k=v``, in order); ``capability_args`` are offered to
    each plugin's ``runtimeConfig``, filtered by the capabilities it declares.
    """

    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    args: tuple[tuple[str, str], ...] = ()
    capability_args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GCAttachment:
    """An attachment the runtime still considers valid (``cni.dev/valid-attachments``)."""

    container_id: str
    ifname: str

    def to_wire(self) -> dict[str, str]:
        return {"containerID": self.container_id, "ifname": self.ifname}


def describe(plugin: NetworkConfig) -> str:
    """libcni ``pluginDescription``: ``type="bridge"`` plus ``name="..."`` when it has one."""
    out = f"type={go_quote(plugin.type)}"
    if plugin.name:
        out += f" name={go_quote(plugin.name)}"
    return out


def version_ge(version: str, other: str) -> bool:
    """libcni ``version.GreaterThanOrEqualTo`` (an empty version means 0.1.0)."""
    try:
        return results.version_ge(version, other)
    except CNIError as exc:  # a plain Go error upstream
        raise LibcniError(exc.code, exc.msg, exc.details) from exc


def _version_ge_quiet(version: str, other: str) -> bool:
    # GC and STATUS ignore a malformed version (``gt, _ := ...``): it simply is not new enough.
    try:
        return version_ge(version, other)
    except CNIError:
        return False


def join_errors(errs: Sequence[CNIError]) -> CNIError:
    """Go's ``errors.Join``: one error stays itself; several join by newline, first code."""
    if len(errs) == 1:
        return errs[0]
    return LibcniError(errs[0].code, "\n".join(str(e) for e in errs))


class CNI:
    """A plugin search path, an executor and a cache directory (libcni ``CNIConfig``).

    ``environ`` is the base environment for plugins (default: the daemon's, read per call).
    """

    def __init__(
        self,
        paths: Sequence[str],
        executor: PluginExecutor,
        cache_dir: str,
        exec_timeout: float | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.paths = tuple(paths)
        self.executor = executor
        self.cache_dir = cache_dir
        self.exec_timeout = exec_timeout
        self._environ = environ

    # -- plumbing ----------------------------------------------------------------------------

    async def _plugin_path(self, plugin_type: str) -> str:
        """``find_plugin`` off the event loop: it stats files in every search directory."""
        with timeline.part(f"find[{plugin_type}]"):
            return await asyncio.to_thread(find_plugin, plugin_type, self.paths)

    def plugin_env(self, command: str, rt: RuntimeConf) -> dict[str, str]:
        """The base environment plus the CNI variables, which win over inherited ones."""
        env = dict(os.environ if self._environ is None else self._environ)
        env.update(
            CNI_COMMAND=command,
            CNI_CONTAINERID=rt.container_id,
            CNI_NETNS=rt.netns,
            CNI_ARGS=";".join(f"{k}={v}" for k, v in rt.args),
            CNI_IFNAME=rt.ifname,
            CNI_PATH=":".join(self.paths),
        )
        return env

    async def _run(self, command: str, path: str, stdin: bytes, rt: RuntimeConf) -> bytes:
        log.debug("exec %s %s (container %r ifname %r)", command, path, rt.container_id, rt.ifname)
        env = self.plugin_env(command, rt)
        return await self.executor.execute(path, stdin, env, timeout=self.exec_timeout)

    def _stdin(
        self, name: str, version: str, plugin: NetworkConfig, prev: Result | None, rt: RuntimeConf
    ) -> bytes:
        prev_wire = results.to_wire(prev) if prev is not None else None
        return plugin_stdin(
            plugin,
            name=name,
            cni_version=version,
            prev_result=prev_wire,
            capability_args=rt.capability_args,
        )

    async def _add_one(
        self, name: str, version: str, plugin: NetworkConfig, prev: Result | None, rt: RuntimeConf
    ) -> Result:
        path = await self._plugin_path(plugin.type)
        skel.validate_container_id(rt.container_id)
        skel.validate_network_name(name)
        skel.validate_ifname(rt.ifname)
        stdin = self._stdin(name, version, plugin, prev, rt)
        stdout = await self._run("ADD", path, stdin, rt)
        # A result without cniVersion is taken to be in the config's version (cni #895).
        return results.decode(stdout, version or "0.1.0")

    async def _exec_without_result(
        self,
        command: str,
        name: str,
        version: str,
        plugin: NetworkConfig,
        *,
        prev: Result | None,
        rt: RuntimeConf,
    ) -> None:
        path = await self._plugin_path(plugin.type)
        stdin = self._stdin(name, version, plugin, prev, rt)
        await self._run(command, path, stdin, rt)

    async def _cache_add(self, result: Result, config: bytes, name: str, rt: RuntimeConf) -> None:
        entry = cache.CacheEntry(
            container_id=rt.container_id,
            network_name=name,
            ifname=rt.ifname,
            config=config,
            netns=rt.netns,
            cni_args=rt.args,
            capability_args=rt.capability_args,
            result=results.to_wire(result),
        )
        await pending.run(self._write_cache(entry))

    async def _write_cache(self, entry: cache.CacheEntry) -> None:
        try:
            with timeline.part("cache_write"):
                await cache.write_entry(self.cache_dir, entry)
        except CNIError as exc:
            name = go_quote(entry.network_name)
            raise prefixed(exc, f"failed to set network {name} cached result: ") from exc

    async def _delete_cache(self, name: str, rt: RuntimeConf) -> None:
        with timeline.part("cache_delete"):
            await cache.delete_entry(self.cache_dir, name, rt.container_id, rt.ifname)

    async def cached_result(self, name: str, version: str, rt: RuntimeConf) -> Result | None:
        """The cached ADD result converted to ``version``; ``None`` if there is no cache file.

        A file that is not a ``cniCacheV1`` entry is read as a bare result (libcni's legacy
        format); if that fails too, the decoding error is raised.
        """
        data = await cache.read_entry_bytes(self.cache_dir, name, rt.container_id, rt.ifname)
        if data is None:
            return None
        raw = data
        try:
            entry = cache.decode_entry(data)
        except ValueError:
            entry = None
        if entry is not None and entry.kind == cache.KIND:
            # Go re-marshals the cached map (``null`` when absent) and reads the version from it.
            raw = gojson.dumps(entry.result).encode() if entry.result is not None else b"null"
        result = results.create_from_bytes(raw)
        try:
            return results.convert(result, version)
        except CNIError as exc:
            raise prefixed(
                exc, f"failed to convert cached result to config version {go_quote(version)}: "
            ) from exc

    async def _cached_result_or_error(
        self, name: str, version: str, rt: RuntimeConf
    ) -> Result | None:
        try:
            return await self.cached_result(name, version, rt)
        except CNIError as exc:
            raise prefixed(exc, f"failed to get network {go_quote(name)} cached result: ") from exc

    @staticmethod
    def _require_check(version: str) -> None:
        if not version_ge(version, "0.4.0"):
            raise LibcniError(
                errors.INCOMPATIBLE_VERSION,
                f"configuration version {go_quote(version)} does not support the CHECK command",
            )

    # -- lists -------------------------------------------------------------------------------

    async def add_network_list(self, conflist: NetworkConfigList, rt: RuntimeConf) -> Result:
        """ADD every plugin in order, each getting the previous result; cache the last one.

        Returns the last plugin's result in the version that plugin reported. An empty list is
        rejected (upstream would cache and return a nil result).
        """
        if not conflist.plugins:
            raise LibcniError(
                errors.INVALID_NETWORK_CONFIG,
                "error parsing configuration list: no plugins in list",
            )
        result: Result | None = None
        for plugin in conflist.plugins:
            try:
                result = await self._add_one(
                    conflist.name, conflist.cni_version, plugin, result, rt
                )
            except CNIError as exc:
                raise prefixed(exc, f"plugin {describe(plugin)} failed (add): ") from exc
        assert result is not None
        await self._cache_add(result, conflist.raw, conflist.name, rt)
        return result

    async def check_network_list(self, conflist: NetworkConfigList, rt: RuntimeConf) -> None:
        """CHECK every plugin with the cached result; needs >= 0.4.0; ``disableCheck`` skips."""
        self._require_check(conflist.cni_version)
        if conflist.disable_check:
            return
        cached = await self._cached_result_or_error(conflist.name, conflist.cni_version, rt)
        for plugin in conflist.plugins:
            await self._exec_without_result(
                "CHECK", conflist.name, conflist.cni_version, plugin, prev=cached, rt=rt
            )

    async def del_network_list(self, conflist: NetworkConfigList, rt: RuntimeConf) -> None:
        """DEL the plugins in reverse order, then drop the cache file.

        From 0.4.0 the cached result is the ``prevResult``; a cache that cannot be decoded is
        removed and the DEL goes on without it.
        """
        cached: Result | None = None
        if version_ge(conflist.cni_version, "0.4.0"):
            try:
                with timeline.part("cache_read"):
                    cached = await self.cached_result(conflist.name, conflist.cni_version, rt)
            except CNIError as exc:
                log.info("dropping unusable cache of network %r: %s", conflist.name, exc)
                await cache.delete_entry(self.cache_dir, conflist.name, rt.container_id, rt.ifname)
        for plugin in reversed(conflist.plugins):
            try:
                await self._exec_without_result(
                    "DEL", conflist.name, conflist.cni_version, plugin, prev=cached, rt=rt
                )
            except CNIError as exc:
                raise prefixed(exc, f"plugin {describe(plugin)} failed (delete): ") from exc
        await pending.run(self._delete_cache(conflist.name, rt))

    async def gc_network_list(
        self, conflist: NetworkConfigList, valid_attachments: Sequence[GCAttachment] | None
    ) -> None:
        """libcni GC: DEL this network's cached attachments that are not valid, then (>= 1.1.0)
        send GC to every plugin with the valid list as ``cni.dev/valid-attachments`` and
        ``cni.dev/attachments``. ``None`` means "no GC args" (every cached attachment is stale
        and nothing is injected). All errors are collected and joined."""
        if conflist.disable_gc:
            return
        try:
            cached = await cache.list_entries(self.cache_dir)
        except CNIError:
            return  # upstream silently gives up on an unreadable cache directory
        valid = {(a.container_id, a.ifname) for a in valid_attachments or ()}
        errs: list[CNIError] = []
        for entry in cached:
            if entry.network_name != conflist.name or (entry.container_id, entry.ifname) in valid:
                continue
            rt = RuntimeConf(
                container_id=entry.container_id,
                netns=entry.netns,
                ifname=entry.ifname,
                args=entry.cni_args,
                capability_args=entry.capability_args,
            )
            try:
                await self.del_network_list(conflist, rt)
            except CNIError as exc:
                prefix = f"failed to delete stale attachment {entry.container_id} {entry.ifname}: "
                errs.append(prefixed(exc, prefix))
        if _version_ge_quiet(conflist.cni_version, "1.1.0"):
            values: dict[str, Any] = {"name": conflist.name, "cniVersion": conflist.cni_version}
            if valid_attachments is not None:
                wire = [a.to_wire() for a in valid_attachments]
                values["cni.dev/valid-attachments"] = wire
                values["cni.dev/attachments"] = wire  # cni #1101: the spec's other spelling
            for plugin in conflist.plugins:
                try:
                    built = inject(plugin, values)
                    path = await self._plugin_path(built.type)
                    await self._run("GC", path, built.raw, RuntimeConf())
                except CNIError as exc:
                    errs.append(prefixed(exc, f"failed to GC plugin {plugin.type}: "))
        if errs:
            raise join_errors(errs)

    async def get_status_network_list(self, conflist: NetworkConfigList) -> None:
        """STATUS every plugin in order (>= 1.1.0, else a no-op); the first error is returned
        unchanged so a plugin's code (e.g. 50, 51) reaches the runtime."""
        if not _version_ge_quiet(conflist.cni_version, "1.1.0"):
            return
        values = {"name": conflist.name, "cniVersion": conflist.cni_version}
        for plugin in conflist.plugins:
            try:
                built = inject(plugin, values)
            except CNIError as exc:
                prefix = f"failed to generate configuration to get plugin STATUS {plugin.type}: "
                raise prefixed(exc, prefix) from exc
            path = await self._plugin_path(built.type)
            await self._run("STATUS", path, built.raw, RuntimeConf())

    # -- single configs ----------------------------------------------------------------------

    async def add_network(self, plugin: NetworkConfig, rt: RuntimeConf) -> Result:
        """ADD one plugin config and cache its result (errors are not prefixed)."""
        result = await self._add_one(plugin.name, plugin.cni_version, plugin, None, rt)
        await self._cache_add(result, plugin.raw, plugin.name, rt)
        return result

    async def check_network(self, plugin: NetworkConfig, rt: RuntimeConf) -> None:
        """CHECK one plugin config with its cached result; needs >= 0.4.0."""
        self._require_check(plugin.cni_version)
        cached = await self._cached_result_or_error(plugin.name, plugin.cni_version, rt)
        await self._exec_without_result(
            "CHECK", plugin.name, plugin.cni_version, plugin, prev=cached, rt=rt
        )

    async def del_network(self, plugin: NetworkConfig, rt: RuntimeConf) -> None:
        """DEL one plugin config; unlike a list, an undecodable cache is an error (v1.3.0)."""
        cached: Result | None = None
        if version_ge(plugin.cni_version, "0.4.0"):
            cached = await self._cached_result_or_error(plugin.name, plugin.cni_version, rt)
        await self._exec_without_result(
            "DEL", plugin.name, plugin.cni_version, plugin, prev=cached, rt=rt
        )
        await pending.run(self._delete_cache(plugin.name, rt))
