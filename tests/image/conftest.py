"""Fixtures of the image tests: the image ``tox -e image`` built, the manifests as ``kubectl
apply -k`` sends them, a node (containerd with the DaemonSet's host paths), the API emulator
with TLS (the daemon's container uses the in-cluster config, as in a cluster)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from multusd.kubesim import KubeSim, Settings
from tests.e2e.cri.containerd import check_installed, host_snapshot, host_writes
from tests.e2e.cri.image import build_image_tar
from tests.image.build import ARCHIVE, DEFAULT_IMAGE_DIR, IMAGE, IMAGE_DIR_ENV
from tests.image.node import NodeContainerd
from tests.kubesim.conftest import kustomize_bin

__all__ = ["image_archive", "kubesim", "kustomize_bin", "make_node"]


@pytest.fixture(scope="session")
def image_archive() -> Path:
    """The built image. Missing: CI fails (it builds the image first); elsewhere the tests are
    skipped with the command that builds it."""
    archive = Path(os.environ.get(IMAGE_DIR_ENV) or DEFAULT_IMAGE_DIR) / ARCHIVE
    if not archive.is_file():
        message = f"no image at {archive}: build it with `tox -e image` (as root)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return archive


@pytest_asyncio.fixture
async def kubesim() -> AsyncIterator[KubeSim]:
    async with KubeSim(Settings(bookmark_interval=1.0), tls_enabled=True) as sim:
        yield sim


@pytest.fixture
def make_node(image_archive: Path) -> Iterator[Callable[[tuple[Path, ...]], NodeContainerd]]:
    """A started node with the image imported; after the test, nothing may be left (what the
    test did not remove, containerd's writes on the host)."""
    check_installed()
    host_before = host_snapshot()
    rigs: list[NodeContainerd] = []

    def make(host_paths: tuple[Path, ...]) -> NodeContainerd:
        rig = NodeContainerd(Path(tempfile.mkdtemp(prefix="mimgnode-", dir="/tmp")))
        rig.host_paths = host_paths
        rigs.append(rig)
        rig.start()
        rig.import_image(build_image_tar(rig.base / "pause.tar"))  # the sandboxes' image
        rig.import_image(image_archive, IMAGE, timeout=300)
        return rig

    yield make
    leftovers = [item for rig in rigs for item in rig.stop()]
    assert not leftovers, f"the test left these behind (removed now): {leftovers}"
    written = host_writes(host_before, host_snapshot())
    assert not written, f"containerd wrote on the host: {written}"
