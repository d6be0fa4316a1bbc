"""A small async client for the control API of an emulator in another process.

It reads the server URL, token and CA from the kubeconfig ``serve`` wrote, so anything that can
point kubectl at the emulator can also drive its faults and read its stats.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import yaml


class ControlError(RuntimeError):
    """The control API answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"kubesim control API answered {status}: {body}")
        self.status = status


def read_kubeconfig(path: Path) -> tuple[str, str | None, bytes | None]:
    """(server URL, token, CA PEM) of the current context; blocking, call in a thread."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    current = doc["current-context"]
    context = next(c["context"] for c in doc["contexts"] if c["name"] == current)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
    user: dict[str, Any] = next(
        (u["user"] for u in doc.get("users", []) if u["name"] == context.get("user")), {}
    )
    ca = cluster.get("certificate-authority-data")
    return cluster["server"], user.get("token"), base64.b64decode(ca) if ca else None


class ControlClient:
    def __init__(self, server: str, token: str | None, ca_pem: bytes | None) -> None:
        self.server = server.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        ssl_ctx: ssl.SSLContext | bool = True
        if ca_pem is not None:
            ssl_ctx = ssl.create_default_context(cadata=ca_pem.decode())
        self._session = aiohttp.ClientSession(
            headers=headers, connector=aiohttp.TCPConnector(ssl=ssl_ctx)
        )

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> ControlClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def request(
        self, method: str, path: str, body: Any = None, *, data: str | None = None
    ) -> Any:
        kwargs: dict[str, Any] = {}
        if data is not None:
            kwargs["data"] = data.encode()
        elif body is not None:
            kwargs["json"] = body
        async with self._session.request(method, self.server + path, **kwargs) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ControlError(resp.status, text)
            return await resp.json(content_type=None) if text else None

    async def faults(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", "/kubesim/faults")
        return result

    async def set_faults(self, doc: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("PUT", "/kubesim/faults", doc)
        return result

    async def update_faults(self, doc: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("PATCH", "/kubesim/faults", doc)
        return result

    async def clear_faults(self) -> None:
        await self.request("DELETE", "/kubesim/faults")

    async def add_error(self, **rule: Any) -> None:
        await self.request("POST", "/kubesim/faults/errors", rule)

    async def add_latency(self, **rule: Any) -> None:
        await self.request("POST", "/kubesim/faults/latency", rule)

    async def hide(self, namespace: str, name: str, resource: str = "pods") -> None:
        await self.request(
            "POST",
            "/kubesim/faults/hide",
            {"namespace": namespace, "name": name, "resource": resource},
        )

    async def unhide(self, namespace: str, name: str, resource: str = "pods") -> None:
        await self.request(
            "POST",
            "/kubesim/faults/unhide",
            {"namespace": namespace, "name": name, "resource": resource},
        )

    async def drop_watches(self, mode: str = "eof") -> int:
        result = await self.request("POST", "/kubesim/watches/drop", {"mode": mode})
        return int(result["dropped"])

    async def expire_next_watches(self, count: int = 1) -> None:
        await self.request("POST", "/kubesim/watches/expire", {"count": count})

    async def compact(self) -> int:
        result = await self.request("POST", "/kubesim/compact")
        return int(result["resourceVersion"])

    async def snapshot(self) -> int:
        """Take an etcd backup of every object; returns its resourceVersion."""
        result = await self.request("POST", "/kubesim/snapshot")
        return int(result["resourceVersion"])

    async def restore(self, *, new_uids: bool = False) -> int:
        """Restore the last snapshot (older versions, watches cut); returns the version."""
        result = await self.request("POST", "/kubesim/restore", {"newUIDs": new_uids})
        return int(result["resourceVersion"])

    async def stats(self, log: int = 100) -> dict[str, Any]:
        result: dict[str, Any] = await self.request("GET", f"/kubesim/stats?log={log}")
        return result

    async def reset_stats(self) -> None:
        await self.request("DELETE", "/kubesim/stats")

    async def seed(self, manifests: str) -> list[str]:
        result = await self.request("POST", "/kubesim/seed", data=manifests)
        return [str(line) for line in result["applied"]]


async def connect(kubeconfig: str | Path) -> ControlClient:
    server, token, ca = await asyncio.to_thread(read_kubeconfig, Path(kubeconfig))
    return ControlClient(server, token, ca)
