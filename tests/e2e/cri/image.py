"""The sandbox ("pause") image, built by the rig: an OCI image layout tar around busybox-static.

Why build one: the machines that run the tests have no registry to pull ``registry.k8s.io/pause``
from, and containerd's CRI plugin refuses to start a pod sandbox without its ``sandbox_image``.
What the CRI plugin needs from the image is only a valid manifest, a config whose
``Entrypoint`` runs forever, and one layer that holds that program: busybox's ``sleep``
(containerd stops a sandbox with SIGKILL, so the program needs no signal handling). The tar is
imported with ``ctr images import``; the name it gets must be exactly the CRI plugin's
``sandbox_image``, or containerd tries to pull it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import tarfile
from pathlib import Path
from typing import Any

BUSYBOX = "/bin/busybox"
REPOSITORY = "localhost/multusd-pause"
TAG = "test"
IMAGE = f"{REPOSITORY}:{TAG}"  # the CRI plugin's sandbox_image
ENTRYPOINT = ["/bin/busybox", "sleep", "2147483647"]

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le"}


def _tar_member(tar: tarfile.TarFile, name: str, data: bytes | None, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = 0
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _layer(busybox: bytes) -> bytes:
    """An uncompressed layer tar: ``/bin/busybox`` plus the mount points runc would create."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("bin", "dev", "etc", "proc", "sys"):
            _tar_member(tar, directory, None, 0o755)
        _tar_member(tar, "bin/busybox", busybox, 0o755)
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _descriptor(media_type: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": _digest(data), "size": len(data), **extra}


def build_image_tar(path: Path, busybox: str = BUSYBOX) -> Path:
    """Write the OCI layout tar to ``path`` (about 1 MiB: one gzipped busybox) and return it."""
    if not os.path.isfile(busybox):
        raise FileNotFoundError(f"{busybox} is missing: run `.ci/setup --dev` (busybox-static)")
    layer = _layer(Path(busybox).read_bytes())
    compressed = gzip.compress(layer, compresslevel=6, mtime=0)
    config = json.dumps(
        {
            "architecture": _ARCH.get(platform.machine(), platform.machine()),
            "os": "linux",
            "config": {"Entrypoint": ENTRYPOINT, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar+gzip", compressed)],
        }
    ).encode()
    index = json.dumps(
        {
            "schemaVersion": 2,
            "manifests": [
                _descriptor(
                    "application/vnd.oci.image.manifest.v1+json",
                    manifest,
                    annotations={
                        "io.containerd.image.name": IMAGE,
                        "org.opencontainers.image.ref.name": TAG,
                    },
                )
            ],
        }
    ).encode()
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _tar_member(tar, "blobs", None, 0o755)
        _tar_member(tar, "blobs/sha256", None, 0o755)
        for blob in (config, manifest, compressed):
            _tar_member(tar, f"blobs/sha256/{_digest(blob)[7:]}", blob, 0o644)
        _tar_member(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644)
        _tar_member(tar, "index.json", index, 0o644)
    return path
