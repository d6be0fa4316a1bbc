"""The built image as an archive: its name, its config and its layers, against the
Containerfile, the manifests and the build's own report (which docs/quickstart.md quotes)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from tests.image.build import IMAGE, archive_layer_sizes, read_report
from tests.image.containerfile import entrypoint, stages
from tests.manifests.helpers import MULTUSD


def archive_config(archive: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The docker archive's manifest entry and image config."""
    with tarfile.open(archive) as tar:
        (manifest,) = json.loads(_read(tar, "manifest.json"))
        config = json.loads(_read(tar, manifest["Config"]))
    return manifest, config


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    member = tar.extractfile(name)
    assert member is not None, name
    return member.read()


def test_the_archive_holds_the_image_the_kind_overlay_names(image_archive: Path) -> None:
    manifest, config = archive_config(image_archive)
    assert manifest["RepoTags"] == [IMAGE]
    assert config["os"] == "linux"


def test_the_config_is_the_containerfiles(image_archive: Path) -> None:
    """The entrypoint every manifest command names; root (the DaemonSet's containers are
    privileged and set no user); unbuffered output for the container log."""
    _, config = archive_config(image_archive)
    assert config["config"]["Entrypoint"] == entrypoint() == [MULTUSD]
    assert not config["config"].get("User")
    assert "PYTHONUNBUFFERED=1" in config["config"]["Env"]


def test_one_layer_for_the_base_and_one_per_step_of_the_final_stage(image_archive: Path) -> None:
    """The base, the apt step (the reference plugins), the copied venv: the report's layers are
    the archive's, with their sizes."""
    report = read_report(image_archive.parent)
    _, config = archive_config(image_archive)
    assert [layer.digest for layer in report.layers] == config["rootfs"]["diff_ids"]
    assert {layer.digest: layer.size for layer in report.layers} == archive_layer_sizes(
        image_archive
    )
    final = [op for op, _ in stages()[-1]]
    assert len(report.layers) == 1 + final.count("RUN") + final.count("COPY")
    assert report.layers[1].created_by.startswith("apt-get update")
    assert report.layers[2].created_by.endswith("in /opt/multusd")
