"""``KubeSim``: start and stop the emulator in process, and the Python handle tests drive.

    async with KubeSim(tls=True) as sim:
        await sim.write_kubeconfig(path)
        sim.create({"apiVersion": "v1", "kind": "Pod", ...})
        sim.faults.hide("default", "p1")

The handle's object methods go through the same operations as HTTP requests (same metadata,
versions and watch events); only the request log and fault injection are bypassed.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from multusd.kubesim import authn, backup, control, kubeconfig, operations, seed, tls
from multusd.kubesim.app import build_app
from multusd.kubesim.errors import bad_request
from multusd.kubesim.faults import Faults
from multusd.kubesim.resources import ResourceType
from multusd.kubesim.state import Settings, State
from multusd.kubesim.stats import Stats
from multusd.kubesim.store import Snapshot, Store

if TYPE_CHECKING:
    from multusd.kubesim.csrsigner import Signer

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class KubeSim:
    """One emulator instance listening on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls_enabled: bool = False,
        shutdown_timeout: float = 5.0,
    ) -> None:
        self.state = State(settings or Settings())
        self.host = host
        self._port = port
        self.tls_enabled = tls_enabled
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        self._tmpdir: Path | None = None
        self.tls: tls.TLSMaterial | None = None
        self.signer: Signer | None = None
        """Issues approved certificate requests (TLS mode only: it signs with the CA)."""
        for name in DEFAULT_NAMESPACES:
            seed.apply(
                self.state, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}]
            )

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        ssl_context = None
        if self.tls_enabled:
            self._tmpdir = Path(
                await asyncio.to_thread(tempfile.mkdtemp, prefix="kubesim-", dir="/tmp")
            )
            hosts = sorted({self.host, "127.0.0.1", "localhost", "::1"})
            self.tls = await tls.generate(self._tmpdir, hosts)
            ssl_context = await asyncio.to_thread(self.tls.server_context)
        app = build_app(self.state)
        # handler_cancellation: a watch whose client went away must end now, not at its timeout.
        runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=self._shutdown_timeout
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port, ssl_context=ssl_context)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        sockets = runner.addresses
        self._port = int(sockets[0][1])
        self.state.server_address = f"{self.host}:{self._port}"
        if self.tls is not None:
            # Imported here: its cryptography costs ~10 MiB, and only a CA can sign.
            from multusd.kubesim.csrsigner import Signer

            self.signer = Signer(self.state, self.tls.ca_file, self.tls.ca_key_file)
            await self.signer.start()

    async def stop(self) -> None:
        signer, self.signer = self.signer, None
        if signer is not None:
            await signer.stop()
        runner, self._runner = self._runner, None
        if runner is not None:
            control.drop_watches(self.state, "eof")
            await runner.cleanup()
        if self._tmpdir is not None:
            await asyncio.to_thread(shutil.rmtree, self._tmpdir, True)
            self._tmpdir = None

    async def __aenter__(self) -> KubeSim:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- addresses and client files --------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_enabled else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self._port}"

    @property
    def token(self) -> str | None:
        return self.state.settings.token

    @property
    def ca_pem(self) -> bytes | None:
        return self.tls.ca_pem if self.tls else None

    async def write_kubeconfig(self, path: str | Path) -> Path:
        return await kubeconfig.write_kubeconfig(Path(path), self.url, self.token, self.ca_pem)

    def add_token(self, token: str, user: str, groups: tuple[str, ...] = ()) -> None:
        """Accept ``token`` as ``user`` in ``groups`` (a kubelet's ``system:node:<node>``
        bootstrap credentials, say): ``multusd.kubesim.authn``."""
        authn.add_token(self.state, token, user, groups)

    async def write_kubeconfig_for(self, path: str | Path, token: str) -> Path:
        """A kubeconfig like :meth:`write_kubeconfig`'s that authenticates with ``token``."""
        return await kubeconfig.write_kubeconfig(Path(path), self.url, token, self.ca_pem)

    async def write_incluster(self, directory: str | Path, namespace: str = "default") -> Path:
        return await kubeconfig.write_incluster(Path(directory), self.token, self.ca_pem, namespace)

    def incluster_env(self) -> dict[str, str]:
        """The environment kubelet gives a pod (in-cluster clients always use https)."""
        return {"KUBERNETES_SERVICE_HOST": self.host, "KUBERNETES_SERVICE_PORT": str(self._port)}

    # --- state -----------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        return self.state.store

    @property
    def faults(self) -> Faults:
        return self.state.faults

    @property
    def stats(self) -> Stats:
        return self.state.stats

    def drop_watches(self, mode: str = "eof") -> int:
        return control.drop_watches(self.state, mode)

    def expire_next_watches(self, count: int = 1) -> None:
        self.state.faults.expire_next_watches += count

    def compact(self) -> int:
        return self.state.store.compact()

    def snapshot(self) -> Snapshot:
        """An etcd backup: every object now (``restore`` goes back to it)."""
        return backup.take(self.state)

    def restore(self, snapshot: Snapshot | None = None, *, new_uids: bool = False) -> int:
        """Come back from ``snapshot`` (default: the last one) as a restored, restarted API
        server: older resourceVersions, every watch cut; ``new_uids`` re-creates every object
        (new UIDs). Returns the resourceVersion after it (``multusd.kubesim.backup``)."""
        return backup.restore(self.state, snapshot, new_uids=new_uids)

    async def seed_files(self, *paths: str | Path) -> list[str]:
        return await seed.load_files(self.state, paths)

    def seed(self, docs: list[dict[str, Any]]) -> list[str]:
        return seed.apply(self.state, docs)

    # --- objects (synchronous, on the loop thread) -----------------------------------------

    def _rt(self, obj: dict[str, Any]) -> ResourceType:
        rt = self.state.registry.by_kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if rt is None:
            raise bad_request(f"kubesim does not serve {obj.get('apiVersion')}/{obj.get('kind')}")
        return rt

    def _resource(self, plural: str, group: str = "", version: str = "v1") -> ResourceType:
        rt = self.state.registry.by_path(group, version, plural)
        if rt is None:
            raise bad_request(f"kubesim does not serve {plural}")
        return rt

    def create(self, obj: dict[str, Any], *, keep_status: bool = True) -> dict[str, Any]:
        """Create ``obj`` (its namespace defaults to ``default``); returns the stored object."""
        rt = self._rt(obj)
        namespace = str((obj.get("metadata") or {}).get("namespace") or "default")
        return operations.create(self.state, rt, namespace, obj, keep_status=keep_status).decode()

    def get(
        self, plural: str, namespace: str, name: str, *, group: str = "", version: str = "v1"
    ) -> dict[str, Any]:
        return operations.get(
            self.state, self._resource(plural, group, version), namespace, name
        ).decode()

    def update(self, obj: dict[str, Any], *, subresource: str = "") -> dict[str, Any]:
        rt = self._rt(obj)
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        entry = operations.update(
            self.state, rt, namespace, str(meta.get("name", "")), obj, subresource=subresource
        )
        return entry.decode()

    def patch(
        self,
        plural: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        content_type: str = "application/merge-patch+json",
        group: str = "",
        version: str = "v1",
        subresource: str = "",
    ) -> dict[str, Any]:
        rt = self._resource(plural, group, version)
        return operations.patch(
            self.state,
            rt,
            namespace,
            name,
            content_type=content_type,
            body=body,
            subresource=subresource,
        ).decode()

    def delete(
        self, plural: str, namespace: str, name: str, *, group: str = "", version: str = "v1"
    ) -> dict[str, Any]:
        return operations.delete(
            self.state, self._resource(plural, group, version), namespace, name
        ).decode()
