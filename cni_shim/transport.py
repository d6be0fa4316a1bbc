"""A hand-written HTTP/1.1 client over AF_UNIX, just enough to talk to multusd or upstream.

``http.client`` costs ~13 ms to import and the shim runs once per pod sandbox, so this speaks
the protocol directly on the C-level ``_socket`` module (``socket`` itself would pull in
``enum``). It handles what Go's ``net/http`` server and aiohttp actually send: Content-Length
bodies, chunked bodies (Go chunks anything over ~2 KiB), and bodies delimited by EOF.
Failures are :class:`TransportError` values worded like upstream's shim (``failed to send CNI
request: Post "http://dummy/cni": dial unix <path>: connect: connection refused``) and carrying
the errno, so callers branch on numbers rather than text.
"""

from __future__ import annotations

import _socket
import errno as _errno
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

HOST = "dummy"
_RECV_SIZE = 65536


class TransportError(Exception):
    """The request did not produce a complete HTTP response.

    ``errno`` is the OS error number when there is one (``ECONNREFUSED``, ``ENOENT``,
    ``ETIMEDOUT`` for our own timeouts, ...), else ``None`` (protocol errors, early EOF).
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class _Conn:
    """A socket with a read buffer and an overall deadline."""

    def __init__(self, sock: _socket.socket, socket_path: str, deadline: float | None) -> None:
        self.sock = sock
        self.socket_path = socket_path
        self.deadline = deadline
        self.buf = bytearray()
        self.eof = False

    def arm(self) -> None:
        if self.deadline is not None:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)

    def fill(self) -> bool:
        """Read more bytes into the buffer; ``False`` at EOF."""
        if self.eof:
            return False
        self.arm()
        data = self.sock.recv(_RECV_SIZE)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def readline(self) -> bytes | None:
        """One CRLF/LF-terminated line without the terminator; ``None`` at a clean EOF."""
        while True:
            idx = self.buf.find(b"\n")
            if idx >= 0:
                line = bytes(self.buf[:idx])
                del self.buf[: idx + 1]
                return line[:-1] if line.endswith(b"\r") else line
            if not self.fill():
                if self.buf:
                    raise _UnexpectedEOF
                return None

    def read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self.fill():
                raise _UnexpectedEOF
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_to_eof(self) -> bytes:
        while self.fill():
            pass
        data = bytes(self.buf)
        self.buf.clear()
        return data


class _UnexpectedEOF(Exception):
    """The peer closed the connection in the middle of a message."""


class _Malformed(Exception):
    """The peer sent something that is not HTTP/1.x."""


def _read_head(conn: _Conn) -> tuple[int, dict[str, str]]:
    while True:
        line = conn.readline()
        if line is None:
            raise EOFError
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _Malformed(line.decode("latin-1"))
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            hline = conn.readline()
            if hline is None:
                raise _UnexpectedEOF
            if not hline:
                break
            name, sep, value = hline.partition(b":")
            if not sep:
                raise _Malformed(hline.decode("latin-1"))
            key = name.strip().decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        if 100 <= status < 200 and status != 101:
            continue  # interim response (100 Continue): the real one follows
        return status, headers


def _read_chunked(conn: _Conn) -> bytes:
    body = bytearray()
    while True:
        line = conn.readline()
        if line is None:
            raise _UnexpectedEOF
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise _Malformed(line.decode("latin-1")) from exc
        if size == 0:
            while conn.readline():  # trailers, up to the blank line (or EOF)
                pass
            return bytes(body)
        body += conn.read_exact(size)
        if conn.readline() is None:
            raise _UnexpectedEOF


def _read_body(conn: _Conn, status: int, headers: Mapping[str, str]) -> bytes:
    if status in (204, 304) or 100 <= status < 200:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _read_chunked(conn)
    length = headers.get("content-length")
    if length is not None:
        try:
            n = int(length.split(",")[0])
        except ValueError as exc:
            raise _Malformed(f"bad Content-Length {length!r}") from exc
        return conn.read_exact(n)
    return conn.read_to_eof()


def _build_request(path: str, body: bytes, extra: Mapping[str, str] | None) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\n"
        f"Host: {HOST}\r\n"
        "User-Agent: multus-shim\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Content-Type: application/json\r\n"
        "Connection: close\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in (extra or {}).items())
        + "\r\n"
    )
    return head.encode("latin-1") + body


def post(
    socket_path: str,
    path: str,
    body: bytes,
    timeout: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """``POST http://dummy<path>`` over the unix socket; returns (status, headers, body).

    ``headers`` has lower-case names. ``timeout`` bounds the whole exchange (``None``: wait
    forever, as upstream's client does for ``/cni``). Raises :class:`TransportError`.
    """
    url = f'Post "http://{HOST}{path}"'
    deadline = None if timeout is None else time.monotonic() + timeout
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if timeout is not None:
            sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except TimeoutError as exc:
            raise _timeout(url) from exc
        except OSError as exc:
            from cni_shim.gosyscall import errno_text  # error paths only: not at start-up

            code = exc.errno or _errno.EINVAL  # "AF_UNIX path too long" has no errno
            raise TransportError(
                f"failed to send CNI request: {url}: dial unix {socket_path}: connect: "
                f"{errno_text(code)}",
                code,
            ) from exc
        conn = _Conn(sock, socket_path, deadline)
        send_error: OSError | None = None
        try:
            if deadline is not None:
                conn.arm()
            sock.sendall(_build_request(path, body, headers))
        except TimeoutError as exc:
            raise _timeout(url) from exc
        except OSError as exc:
            # The server may have answered and closed before reading everything (e.g. a
            # 400 on a bad body): still try to read that answer.
            send_error = exc
        return _exchange(conn, url, send_error)
    finally:
        sock.close()


def _timeout(url: str, while_reading_body: bool = False) -> TransportError:
    """Our own deadline expired (Go's client words for it; errno ``ETIMEDOUT``)."""
    if while_reading_body:
        return TransportError(
            "failed to read CNI result: context deadline exceeded (Client.Timeout or context "
            "cancellation while reading body)",
            _errno.ETIMEDOUT,
        )
    return TransportError(
        f"failed to send CNI request: {url}: context deadline exceeded "
        "(Client.Timeout exceeded while awaiting headers)",
        _errno.ETIMEDOUT,
    )


def _exchange(
    conn: _Conn, url: str, send_error: OSError | None
) -> tuple[int, dict[str, str], bytes]:
    local = f"unix @->{conn.socket_path}"
    try:
        status, headers = _read_head(conn)
    except EOFError:
        if send_error is not None and send_error.errno is not None:
            from cni_shim.gosyscall import errno_text

            raise TransportError(
                f"failed to send CNI request: {url}: write {local}: write: "
                f"{errno_text(send_error.errno)}",
                send_error.errno,
            ) from send_error
        raise TransportError(f"failed to send CNI request: {url}: EOF") from None
    except _UnexpectedEOF:
        raise TransportError(f"failed to send CNI request: {url}: unexpected EOF") from None
    except _Malformed as exc:
        raise TransportError(
            f"failed to send CNI request: {url}: net/http: HTTP/1.x transport connection "
            f'broken: malformed HTTP response "{exc}"'
        ) from None
    except TimeoutError as exc:
        raise _timeout(url) from exc
    except OSError as exc:
        from cni_shim.gosyscall import errno_text

        code = exc.errno or _errno.EIO
        raise TransportError(
            f"failed to send CNI request: {url}: read {local}: read: {errno_text(code)}", code
        ) from exc
    try:
        body = _read_body(conn, status, headers)
    except _UnexpectedEOF:
        raise TransportError("failed to read CNI result: unexpected EOF") from None
    except _Malformed as exc:
        text = f"failed to read CNI result: malformed chunked encoding: {exc}"
        raise TransportError(text) from None
    except TimeoutError as exc:
        raise _timeout(url, while_reading_body=True) from exc
    except OSError as exc:
        from cni_shim.gosyscall import errno_text

        code = exc.errno or _errno.EIO
        raise TransportError(
            f"failed to read CNI result: read {local}: read: {errno_text(code)}", code
        ) from exc
    return status, headers, body
