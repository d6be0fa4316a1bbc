"""An import-linter contract type the built-in ones cannot express: "imports only the standard
library" (pyproject.toml, ``[tool.importlinter]``, registered as ``stdlib_only``).

Why a contract of our own: the shim (``cni_shim``) runs on nodes that may have nothing but
``/usr/bin/python3``, and the daemon shares its CNI types, so one third-party import there
breaks every pod sandbox of such a node. A ``forbidden`` contract can only name the packages
to keep out, and a list of them goes stale the day a dependency is added; this one allows the
names in ``sys.stdlib_module_names`` (the interpreter lint runs on: 3.11) and nothing else. It
needs ``include_external_packages = true``, without which grimp leaves every non-project import
out of the graph and the contract would pass whatever the shim imports, so it refuses to run
without it.
"""

from __future__ import annotations

import sys
from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


class StdlibOnlyContract(Contract):
    """``source_modules`` (packages, with everything under them) import nothing from outside
    the project but the standard library. Imports of the project's own modules are the other
    contracts' business."""

    type_name = "stdlib_only"

    source_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        if str(self.session_options.get("include_external_packages", "")).lower() != "true":
            raise ValueError("stdlib_only needs include_external_packages = true")
        roots = {root.split(".")[0] for root in graph.modules if not graph.is_module_squashed(root)}
        illegal: list[dict[str, Any]] = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            modules = {source.name} | graph.find_descendants(source.name)
            for importer in sorted(modules):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    top = imported.split(".")[0]
                    if top in roots or top in sys.stdlib_module_names:
                        continue
                    details = graph.get_import_details(importer=importer, imported=imported)
                    lines = sorted(d["line_number"] for d in details)
                    illegal.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Imports from outside the standard library:", bold=False)
        output.new_line()
        for item in check.metadata["illegal"]:
            lines = ", ".join(f"l.{n}" for n in item["lines"])
            output.print_error(f"- {item['importer']} -> {item['imported']} ({lines})", bold=False)
        output.new_line()
