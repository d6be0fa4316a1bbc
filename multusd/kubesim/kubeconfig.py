"""Files that point clients at the emulator: a kubeconfig, and the in-cluster service-account
files (``token``, ``ca.crt``, ``namespace``) a pod would find in
``/var/run/secrets/kubernetes.io/serviceaccount``.

Every file is written to a temporary name, fsynced and renamed, so a client polling for the
kubeconfig never reads half of one.
"""

from __future__ import annotations

import asyncio
import base64
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

CONTEXT = "kubesim"


def kubeconfig_doc(server: str, token: str | None, ca_pem: bytes | None) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": "default"},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Blocking: temp file in the same directory, fsync, rename, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


async def write_kubeconfig(
    path: Path, server: str, token: str | None, ca_pem: bytes | None
) -> Path:
    text = yaml.safe_dump(kubeconfig_doc(server, token, ca_pem), sort_keys=False)
    await asyncio.to_thread(write_atomic, path, text.encode())
    return path


async def write_incluster(
    directory: Path, token: str | None, ca_pem: bytes | None, namespace: str = "default"
) -> Path:
    """Write ``token``, ``ca.crt`` (when TLS is on) and ``namespace`` into ``directory``."""

    def write_all() -> None:
        write_atomic(directory / "token", (token or "").encode())
        write_atomic(directory / "namespace", namespace.encode(), 0o644)
        if ca_pem is not None:
            write_atomic(directory / "ca.crt", ca_pem, 0o644)

    await asyncio.to_thread(write_all)
    return directory
