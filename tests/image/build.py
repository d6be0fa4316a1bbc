"""Build the project's image without a registry: ``tox -e image`` (``python -m tests.image.build``).

Why this way: no container registry is reachable from the machines that build and test
multusd, but Debian's package mirror is. So the base is made here: ``mmdebstrap`` writes a
Debian bookworm root filesystem with python3 (and its venv module) as a tar, ``buildah``
imports it as ``localhost/multusd-base:bookworm`` and builds the project's ``Containerfile`` on
it (``--build-arg BASE=...``); the image is written as a docker archive that containerd
(``ctr images import``), ``kind load image-archive`` and ``docker load`` all take. The
Containerfile's pip steps install offline from a wheelhouse made here beforehand with the
host's pip and trust settings (the build's own pip would meet the same TLS-intercepting
proxies the host's pip is configured for): exactly the versions installed in the environment
this runs in, which under tox are the tests' too.

Node safety: buildah writes, whatever its flags say, a blob-info cache in
``/var/lib/containers/cache``, a lock in ``/etc/cni/net.d`` and network state in
``/run/containers``; mmdebstrap mounts ``/proc``, ``/sys`` and ``/dev`` in its chroot. Every
tool therefore runs in a mount namespace of its own (:mod:`tests.mountns`) in which those
paths are directories under the build's temp dir, and its storage, run root, CNI config dir and
``TMPDIR`` are given that temp dir explicitly; the host's trees are compared before and after,
and any difference fails the build.

Outputs, in ``--out``: ``multusd.tar`` (the image, named :data:`IMAGE`) and ``image.json``
(layers with their sizes and the instruction that made each, the base, the timings):
:func:`read_report` reads it back for the tests and the docs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from tests import mountns
from tests.hostsnap import tree
from tests.image.containerfile import CONTAINERFILE, ROOT, copy_sources

IMAGE = "localhost/multusd:dev"
"""The name manifests/kind gives the image (``images:`` there), so a loaded archive is used."""
BASE_IMAGE = "localhost/multusd-base:bookworm"
ARCHIVE = "multusd.tar"
REPORT = "image.json"
IMAGE_DIR_ENV = "MULTUSD_IMAGE_DIR"
DEFAULT_IMAGE_DIR = ROOT / ".tox" / "image-out"
"""Where ``tox -e image`` writes the archive (tox.ini passes the same path to the tests in
:data:`IMAGE_DIR_ENV`)."""
SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python3-venv")
"""What the Containerfile needs of its BASE: the interpreter and its venv module."""
EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
"""Left out of every package, as Debian's slim images do (copyright files are kept)."""
BUILD_REQUIRES = ("setuptools>=68",)
"""pyproject.toml's [build-system] requires: pip needs them to build "." offline."""
TOOLS_HOST_PATHS = (
    Path("/var/lib/containers"),
    Path("/etc/cni"),
    Path("/etc/containers/networks"),
    Path("/run/containers"),
    Path("/run/buildah"),
    Path("/run/libpod"),
    Path("/var/tmp"),
)
"""Where buildah (and the containers libraries under it) write as root, whatever they are told:
private in the tools' mount namespace."""
WATCHED = ("/etc/cni", "/etc/containers", "/var/lib/containers", "/var/lib/cni", "/opt/cni")
"""The host trees compared before and after a build."""
SETUP_HINT = "install buildah and mmdebstrap: `bash .ci/setup --dev` (as root)"


@dataclass
class Layer:
    digest: str
    size: int  # bytes, uncompressed (the layer tar in the archive)
    created_by: str


@dataclass
class Report:
    image: str
    base: str
    base_packages: list[str]
    layers: list[Layer]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)


class Builder:
    """One build: every tool run in the namespace, every file under ``work``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.private = {path: work / "host" / str(path).strip("/") for path in TOOLS_HOST_PATHS}
        for directory in (*self.private.values(), work / "tmp", work / "mountns"):
            directory.mkdir(parents=True, exist_ok=True)
        self.namespace = mountns.MountNamespace(stage=work / "mountns", private=self.private)
        self.env = {**os.environ, "TMPDIR": str(work / "tmp")}

    def run(self, argv: Sequence[str], timeout: float = 900) -> str:
        """``argv`` in the namespace; its stdout, or an error with its output's tail."""
        proc = subprocess.run(
            self.namespace.argv(list(argv)),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {' '.join(argv)}\n{tail}")
        return proc.stdout

    def buildah(self, *args: str, timeout: float = 900) -> str:
        storage = ("--root", str(self.work / "storage"), "--runroot", str(self.work / "runroot"))
        return self.run(["buildah", *storage, "--storage-driver", "overlay", *args], timeout)

    def base_tar(self, packages: Sequence[str]) -> Path:
        """A Debian bookworm root filesystem with ``packages``, as a tar (mmdebstrap)."""
        out = self.work / "base.tar"
        excludes = [f"--dpkgopt=path-exclude={pattern}" for pattern in EXCLUDED]
        self.run(
            [
                "mmdebstrap", "--mode=root", "--variant=minbase", "--format=tar",
                *([f"--include={','.join(packages)}"] if packages else []),
                *excludes, "--dpkgopt=path-include=/usr/share/doc/*/copyright",
                SUITE, str(out), *MIRRORS,
            ]
        )  # fmt: skip
        return out

    def import_base(self, tar: Path, name: str = BASE_IMAGE) -> None:
        container = self.buildah("from", "scratch").strip()
        self.buildah("add", container, str(tar), "/")
        self.buildah("config", "--cmd", "/bin/bash", "--env", f"PATH={DEFAULT_PATH}", container)
        self.buildah("commit", "--quiet", "--rm", container, name)

    def wheelhouse(self) -> Path:
        """The project's wheel and its runtime dependencies at the versions installed here,
        plus the build backend, built from a copy of the builder stage's context (so nothing is
        written into the checkout)."""
        wheels = self.work / "wheels"
        source = copy_sources(self.work / "source")
        constraints = self.work / "constraints.txt"
        constraints.write_text("".join(f"{pin}\n" for pin in installed_pins()))
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        for argv in (
            [*pip, "wheel", "-q", "--wheel-dir", str(wheels), "-c", str(constraints), str(source)],
            [*pip, "download", "-q", "--only-binary", ":all:", "-d", str(wheels),
             *BUILD_REQUIRES],
        ):  # fmt: skip
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"pip failed: {' '.join(argv)}\n{proc.stderr[-3000:]}")
        return wheels

    def build(
        self, containerfile: Path, context: Path, tag: str, base: str, wheels: Path | None
    ) -> None:
        offline: list[str] = []
        if wheels is not None:
            offline = [
                "--build-arg", "PIP_NO_INDEX=1",
                "--build-arg", "PIP_FIND_LINKS=/wheels",
                "--volume", f"{wheels}:/wheels:ro",
            ]  # fmt: skip
        self.buildah(
            "bud", "--layers", "--isolation", "chroot", "--network", "host",
            "--cni-config-dir", str(self.work / "cni"), "--cni-plugin-path", "/usr/lib/cni",
            "--build-arg", f"BASE={base}", *offline,
            "--file", str(containerfile), "--tag", tag, str(context),
        )  # fmt: skip

    def save(self, tag: str, out: Path) -> Path:
        archive = out / ARCHIVE
        archive.unlink(missing_ok=True)
        self.buildah("push", "--quiet", tag, f"docker-archive:{archive}:{tag}")
        return archive

    def layers(self, tag: str, archive: Path) -> list[Layer]:
        """Each layer's digest and uncompressed size, with the instruction that made it."""
        oci = json.loads(self.buildah("inspect", "--type", "image", tag))["OCIv1"]
        digests: list[str] = oci["rootfs"]["diff_ids"]
        history = [h for h in oci.get("history", []) if not h.get("empty_layer")]
        made_by = [_instruction(h.get("created_by", "")) for h in history][-len(digests) :]
        made_by[0] = BASE_LAYER  # buildah's history of the imported tar says only "/bin/sh"
        sizes = archive_layer_sizes(archive)
        return [
            Layer(digest, sizes[digest], step)
            for digest, step in zip(digests, made_by, strict=True)
        ]


def archive_layer_sizes(archive: Path) -> dict[str, int]:
    """``{diff_id: bytes}`` of a docker archive, whose layers are stored uncompressed."""
    sizes: dict[str, int] = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = member.name
            if member.isfile() and name.endswith(".tar") and "/" not in name:
                sizes["sha256:" + name.removesuffix(".tar")] = member.size
    return sizes


BASE_LAYER = "(base) mmdebstrap --variant=minbase"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _instruction(created_by: str) -> str:
    """buildah's history line, shortened to the Containerfile instruction."""
    text = " ".join(created_by.split())
    return text.removeprefix("/bin/sh -c ").removeprefix("#(nop) ")


def installed_pins() -> list[str]:
    """``name==version`` of every distribution installed here but the project itself."""
    pins = {
        dist.metadata["Name"].lower(): dist.version
        for dist in metadata.distributions()
        if dist.metadata["Name"] and dist.metadata["Name"].lower() != "multusd"
    }
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def check_installed() -> None:
    missing = [tool for tool in ("buildah", "mmdebstrap", "unshare") if not shutil.which(tool)]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: {SETUP_HINT}")
    if os.geteuid() != 0:
        raise SystemExit("the image build runs as root (mmdebstrap and buildah in a namespace)")


def watched_trees() -> dict[str, dict[str, str]]:
    return {root: tree(root) for root in WATCHED}


def host_changes(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> list[str]:
    lines = []
    for root in WATCHED:
        was, now = before[root], after[root]
        lines += [f"{path}: {now.get(path, 'removed')}" for path in sorted(was.keys() | now.keys())
                  if was.get(path) != now.get(path)]  # fmt: skip
    return lines


def build_image(
    out: Path,
    *,
    containerfile: Path = CONTAINERFILE,
    context: Path = ROOT,
    tag: str = IMAGE,
    base_packages: Sequence[str] = BASE_PACKAGES,
    offline_wheels: bool = True,
    keep: bool = False,
) -> Report:
    """Build ``containerfile`` on a fresh mmdebstrap base; write the archive and the report."""
    check_installed()
    out.mkdir(parents=True, exist_ok=True)
    before = watched_trees()
    work = Path(tempfile.mkdtemp(prefix="mimg-", dir="/tmp"))
    seconds: dict[str, float] = {}
    try:
        builder = Builder(work)
        start = time.monotonic()
        tar = builder.base_tar(base_packages)
        builder.import_base(tar)
        seconds["base"] = time.monotonic() - start
        start = time.monotonic()
        wheels = builder.wheelhouse() if offline_wheels else None
        seconds["wheels"] = time.monotonic() - start
        start = time.monotonic()
        builder.build(containerfile, context, tag, BASE_IMAGE, wheels)
        seconds["build"] = time.monotonic() - start
        start = time.monotonic()
        archive = builder.save(tag, out)
        report = Report(tag, SUITE, list(base_packages), builder.layers(tag, archive))
        seconds["save"] = time.monotonic() - start
        report.seconds = {step: round(value, 1) for step, value in seconds.items()}
        (out / REPORT).write_text(json.dumps(asdict(report), indent=2) + "\n")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    changed = host_changes(before, watched_trees())
    if changed:
        raise SystemExit("the build changed the host:\n" + "\n".join(changed))
    return report


def read_report(out: Path) -> Report:
    data: dict[str, Any] = json.loads((out / REPORT).read_text())
    layers = [Layer(**layer) for layer in data.pop("layers")]
    return Report(layers=layers, **data)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.image.build", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="where the archive goes")
    parser.add_argument("--containerfile", type=Path, default=CONTAINERFILE)
    parser.add_argument("--context", type=Path, default=ROOT)
    parser.add_argument("--tag", default=IMAGE)
    parser.add_argument(
        "--base-packages",
        default=",".join(BASE_PACKAGES),
        help="comma-separated packages of the base (empty: a Debian minbase alone)",
    )
    parser.add_argument(
        "--no-wheels", action="store_true", help="no wheelhouse: pip in the build uses its index"
    )
    parser.add_argument("--keep", action="store_true", help="keep the build's temp dir")
    args = parser.parse_args(argv)
    packages = [name for name in args.base_packages.split(",") if name]
    report = build_image(
        args.out.resolve(),
        containerfile=args.containerfile.resolve(),
        context=args.context.resolve(),
        tag=args.tag,
        base_packages=packages,
        offline_wheels=not args.no_wheels,
        keep=args.keep,
    )
    mib = 1024 * 1024
    print(f"{report.image}: {report.size / mib:.1f} MiB in {len(report.layers)} layers")
    for layer in report.layers:
        print(f"  {layer.size / mib:8.1f} MiB  {layer.created_by}")
    print("  seconds: " + ", ".join(f"{k} {v}" for k, v in report.seconds.items()))
    print(f"  archive: {args.out.resolve() / ARCHIVE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
