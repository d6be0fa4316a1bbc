"""No module reaches into another package's private names.

A leading underscore says "only my package relies on this": a module of another package that
imports ``cni_shim._gonet`` or ``kproto._varint`` turns a helper into an API nobody knows is
one, and the next rename breaks a module its author never looked at. The rule, over every
module of ``multusd``, ``cni_shim``, ``bench`` and ``tests``:

- a private module (a dotted path with a component ``_name``) may be imported only by the
  modules of the package that holds it: ``cni_shim._resultconv`` by ``cni_shim.*``;
- a private name of a module (``from pkg.mod import _name``, or ``mod._name`` with ``mod``
  bound by an import) may be used only by the modules of ``mod``'s own package.

"The package" is the directory the module is in, not its ancestors: ``multusd.kubesim.*``
using ``multusd.kproto._varint`` crosses from ``multusd.kubesim`` to ``multusd``. Dunder names
(``__version__``, ``__main__``) are not private, and only our own packages are checked (the
shim imports ``_json`` and ``_frozen_importlib`` on purpose).

Why a test and not an import-linter contract: import-linter sees modules, not the names taken
from them, and does not look at ``tests`` or ``bench``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("multusd", "cni_shim", "bench", "tests")

KNOWN_VIOLATIONS: dict[str, set[str]] = {}
"""Known violators (none since issue 14 made those helpers public): the test fails on any new
one, and on an entry here that no longer happens, so the list only shrinks."""


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_package(dotted: str) -> bool:
    return (REPO.joinpath(*dotted.split(".")) / "__init__.py").is_file()


def _is_module(dotted: str) -> bool:
    return _is_package(dotted) or REPO.joinpath(*dotted.split(".")).with_suffix(".py").is_file()


def _home(dotted: str) -> str:
    """The package whose modules may use the private names of module or package ``dotted``."""
    return dotted if _is_package(dotted) else dotted.rpartition(".")[0]


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[tuple[str, str]]:
    """``(module, name)`` per name an import statement takes; ``name`` is "" for ``import m``."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ""
        return
    module = node.module or ""
    if node.level:  # relative: from the importing module's package up
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join([*parts, *([module] if module else [])])
    for alias in node.names:
        yield module, alias.name


def _violation(module: str, name: str) -> tuple[str, str] | None:
    """``(home, what)`` when the import reaches a private module or name, else None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:i]), ".".join(parts[: i + 1])
    if name and _private(name):
        return _home(module), f"{module}.{name}"
    return None


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names an import binds to one of our modules: ``{"kproto": "multusd.kproto"}``."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.partition(".")[0] in ROOTS:
                    target = alias.name if alias.asname else alias.name.partition(".")[0]
                    aliases[alias.asname or target] = target
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full.partition(".")[0] in ROOTS and _is_module(full):
                    aliases[alias.asname or alias.name] = full
    return aliases


def _attribute_target(node: ast.Attribute, aliases: dict[str, str]) -> str | None:
    """``pkg.mod._name`` for ``alias[.sub]._name`` where the alias is one of our modules."""
    chain: list[str] = []
    value = node.value
    while isinstance(value, ast.Attribute):
        chain.append(value.attr)
        value = value.value
    if isinstance(value, ast.Name) and value.id in aliases:
        return ".".join([aliases[value.id], *reversed(chain)])
    return None


def violations() -> Iterator[tuple[str, int, str]]:
    """``(importing module, line, private thing)`` for every use across a package boundary."""
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
                package = ".".join(parts)
            else:
                package = ".".join(parts[:-1])
            module = ".".join(parts)
            tree = ast.parse(path.read_bytes(), str(path))
            aliases = _module_aliases(tree)
            for node in ast.walk(tree):
                found: list[tuple[str, str]] = []
                if isinstance(node, ast.Import | ast.ImportFrom):
                    for target, name in _imported(node, package):
                        if target.partition(".")[0] in ROOTS:
                            hit = _violation(target, name)
                            found += [hit] if hit else []
                elif isinstance(node, ast.Attribute) and _private(node.attr):
                    owner = _attribute_target(node, aliases)
                    if owner is not None:
                        found.append((_home(owner), f"{owner}.{node.attr}"))
                for home, what in found:
                    if home != package:
                        yield module, node.lineno, what


def test_no_module_uses_another_packages_private_names() -> None:
    seen: dict[str, set[str]] = {}
    new: list[str] = []
    for module, line, what in violations():
        seen.setdefault(module, set()).add(what)
        if what not in KNOWN_VIOLATIONS.get(module, set()):
            new.append(f"{module}:{line} uses {what}")
    assert not new, "private names used across packages (make them public in their home)"
    stale = {m: sorted(w - seen.get(m, set())) for m, w in KNOWN_VIOLATIONS.items()}
    assert not {m: w for m, w in stale.items() if w}, "fixed: remove from KNOWN_VIOLATIONS"


def test_the_rule_sees_every_form_of_reaching_in() -> None:
    """The checker itself, on the forms it must catch and those it must let through."""
    assert _violation("cni_shim._gonet", "") == ("cni_shim", "cni_shim._gonet")
    assert _violation("cni_shim", "_gonet") == ("cni_shim", "cni_shim._gonet")
    assert _violation("cni_shim._gonet", "go_ip") == ("cni_shim", "cni_shim._gonet")
    assert _violation("multusd.kproto", "_varint") == ("multusd", "multusd.kproto._varint")
    assert _violation("cni_shim", "__main__") is None
    assert _violation("multusd", "__version__") is None
    # Modules of this test's own tree, which no refactoring of the daemon moves.
    tree = ast.parse("from tests import loopguard\nimport tests.hostsnap as h\nloopguard._REPORT\n")
    aliases = _module_aliases(tree)
    assert aliases == {"loopguard": "tests.loopguard", "h": "tests.hostsnap"}
    attribute = next(n for n in ast.walk(tree) if isinstance(n, ast.Attribute))
    assert _attribute_target(attribute, aliases) == "tests.loopguard"
    relative = ast.parse("from ._resultconv import x\n").body[0]
    assert isinstance(relative, ast.ImportFrom)
    assert list(_imported(relative, "cni_shim")) == [("cni_shim._resultconv", "x")]
