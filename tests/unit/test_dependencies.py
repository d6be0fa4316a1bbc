"""Every runtime dependency pyproject.toml declares is imported by the package: a declared
dependency that nothing imports is a defect (it is installed on every node for nothing), and
one the daemon's design names but stopped using is a drift worth failing on."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

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
