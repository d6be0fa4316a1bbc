"""A real unix-socket HTTP server standing in for the daemon (ours or upstream's Go one).

It runs its own asyncio loop in a thread because the shim's client is blocking: the tests call
the shim synchronously, exactly as a runtime would exec it. Each route answers with raw bytes,
so tests control every byte (Go's chunking, early closes, malformed heads).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Responder = Callable[["Request"], bytes | None]


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


def response(
    status: int = 200,
    body: bytes = b"",
    *,
    reason: str = "OK",
    headers: dict[str, str] | None = None,
    chunked: bool = False,
    length: bool = True,
) -> bytes:
    """Raw HTTP/1.1 response bytes the way Go's net/http writes them."""
    lines = [f"HTTP/1.1 {status} {reason}"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    lines.append("Connection: close")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        out = b""
        for i in range(0, len(body), 2048):
            chunk = body[i : i + 2048]
            out += f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        payload = out + b"0\r\n\r\n"
    else:
        if length:
            lines.append(f"Content-Length: {len(body)}")
        payload = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def text_error(status: int, text: str) -> bytes:
    """Go's http.Error: text/plain, nosniff, the text plus a newline."""
    return response(
        status,
        (text + "\n").encode(),
        reason="Bad Request" if status == 400 else "Internal Server Error",
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "X-Content-Type-Options": "nosniff",
        },
    )


@dataclass
class FakeDaemon:
    socket_dir: str
    routes: dict[str, Responder] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    @property
    def socket_path(self) -> str:
        return str(Path(self.socket_dir) / "multus.sock")

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if line:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            req = Request(method, path, headers, body)
            self.requests.append(req)
            responder = self.routes.get(path)
            raw = responder(req) if responder else response(404, reason="Not Found")
            if raw is not None:
                writer.write(raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def ok(req: Request) -> bytes:
    return response(200)


def bare_python(code: str) -> str:
    """``code``'s stdout, run as the shim runs: Debian's interpreter under ``-I -S``, with this
    checkout first on ``sys.path`` (``sys.argv[1]``), so what it imports is what the shim pays."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    prelude = "import sys; sys.path.insert(0, sys.argv[1]); "
    done = subprocess.run(
        ["/usr/bin/python3", "-I", "-S", "-c", prelude + code, str(root)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout
