"""Every runtime dependency pyproject.toml declares is imported by the package: a declared
dependency that nothing imports is a defect (it is installed on every node for nothing), and
one the daemon's design names but stopped using is a drift worth failing on."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
IMPORT_NAMES = {"pyyaml": "yaml", "grpcio": "grpc", "prometheus-client": "prometheus_client"}
"""Distribution name -> the module it installs, where the two differ."""


def _imported_roots() -> set[str]:
    roots: set[str] = set()
    for path in [*REPO.glob("multusd/**/*.py"), *REPO.glob("cni_shim/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots.add(node.module.split(".")[0])
    return roots


def test_every_declared_dependency_is_imported() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = [re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
    roots = _imported_roots()
    unused = [d for d in declared if IMPORT_NAMES.get(d.lower(), d.lower()) not in roots]
    assert unused == []


def test_the_design_cards_packages_are_the_daemons() -> None:
    """aiohttp serves, kubernetes_asyncio is the client, pydantic the config models, aiofiles
    the reads, watchfiles the watches: each is a runtime dependency."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {
        re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]
    }
    assert {"aiohttp", "kubernetes_asyncio", "pydantic", "aiofiles", "watchfiles"} <= declared
    assert "h11" not in declared


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (REPO / ".ci" / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f".ci/constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_requirement_ci_installs_is_pinned_within_its_range() -> None:
    """.ci/setup and tox install with .ci/constraints.txt: each requirement of the package, its
    extras and its build has a pin there, and the pin is in the range pyproject.toml allows
    (a bump that leaves the range fails here, not in CI overnight)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    wanted = [
        *project["dependencies"],
        *(dep for deps in project["optional-dependencies"].values() for dep in deps),
        *pyproject["build-system"]["requires"],
    ]
    pins = _pins()
    for text in wanted:
        requirement = Requirement(text)
        if requirement.name == project["name"]:
            continue  # dev = "multusd[test,lint,type,bench]": the others' union
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, f"{requirement.name} is not pinned in .ci/constraints.txt"
        assert requirement.specifier.contains(pin, prereleases=True), (requirement, pin)
