"""docs/configuration.md's key tables are the models' keys: one row per key, no drift.

The doc is where an operator learns what ``daemon-config.json`` may hold; the models
(``multusd/config/daemon.py``, ``multusd/networks/netconf.py``) are what the daemon accepts. A key
added, renamed or re-defaulted in one and not the other fails here. The tables checked are the
three of keys the daemon config may hold (daemon process, generated configuration, per-request
NetConf): each key has one row in one of them, with the model's default, and a ``type`` column,
where a table has one, names the field's JSON type. Keys of nested objects are rows of their own,
``logOptions.maxAge``.
"""

from __future__ import annotations

import json
import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest

from multusd.config.daemon import DaemonConfig
from multusd.config.generate.output import GeneratorConfig
from multusd.config.schema import GoModel
from multusd.networks.netconf import NetConf

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"

DAEMON_TABLES = ("Daemon process", "Generated configuration")
"""Headings (their start) of the tables of daemon-config keys."""
REQUEST_TABLE = "Per-request keys"
"""The heading of the table of NetConf keys, which the daemon config may set as well."""
CNI_SPEC_KEYS = frozenset({"name", "type", "cniVersion", "prevResult"})
"""NetConf keys every CNI config has (the CNI spec documents them), not rows of that table."""
UNSET = "unset"
"""A default cell starting with this: the key has no value unless given (``None``)."""


@dataclass(frozen=True)
class Row:
    heading: str
    key: str
    default: str
    type: str | None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def doc_rows() -> list[Row]:
    """The rows of every table whose first column is ``key``, with the heading above it."""
    rows: list[Row] = []
    heading = ""
    header: list[str] | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            heading, header = line.lstrip("#").strip(), None
        elif not line.startswith("|"):
            header = None
        elif header is None:
            header = _cells(line)
        elif header[0] == "key" and not set(line) <= set("|-: "):
            cells = _cells(line)
            assert len(cells) == len(header), f"{heading}: a '|' inside a cell? {line}"
            cell = dict(zip(header, cells, strict=True))
            key = re.fullmatch(r"`([^`]+)`", cell["key"])
            assert key is not None, f"{heading}: the key cell is not one `key`: {line}"
            rows.append(Row(heading, key.group(1), cell["default"], cell.get("type")))
    return rows


def _in(heading: str, *starts: str) -> bool:
    return heading.startswith(starts)


def config_rows() -> list[Row]:
    """The rows of the tables of daemon-config keys, in the doc's order."""
    return [r for r in doc_rows() if _in(r.heading, *DAEMON_TABLES, REQUEST_TABLE)]


def rows_by_key() -> dict[str, Row]:
    return {row.key: row for row in config_rows()}


def documented_default(cell: str) -> Any:
    """``unset`` is ``None``; otherwise the first code span, as JSON if it is JSON (``false``,
    ``50``, ``""``, ``["kube-system"]``), else as a string (``/run/multus/``, ``auto``). What
    follows it (``(= `panic`)``, ``(our manifests: `true`)``) explains it."""
    if cell.startswith(UNSET):
        return None
    span = re.match(r"`([^`]*)`", cell)
    assert span is not None, f"a default is `a literal` or {UNSET}: {cell!r}"
    try:
        return json.loads(span.group(1))
    except ValueError:
        return span.group(1)


def _base(annotation: Any) -> Any:
    """``Annotated[int, ...] | None`` -> ``int``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
        else:
            return annotation


def _json_type(annotation: Any) -> str:
    base = _base(annotation)
    if isinstance(base, type) and issubclass(base, GoModel):
        return "object"
    origin = get_origin(base) or base
    return {str: "string", bool: "bool", int: "int", float: "number", dict: "object"}[origin]


def model_keys(model: type[GoModel], prefix: str = "") -> dict[str, Any]:
    """Every key ``model`` reads, nested objects' as ``parent.child``: its field info."""
    keys: dict[str, Any] = {}
    for key, info in model.json_fields().items():
        keys[prefix + key] = info
        base = _base(info.annotation)
        if isinstance(base, type) and issubclass(base, GoModel):
            keys.update(model_keys(base, f"{prefix}{key}."))
    return keys


def _same(documented: Any, default: Any) -> bool:
    return isinstance(documented, bool) == isinstance(default, bool) and documented == default


DAEMON_KEYS = model_keys(DaemonConfig)
NETCONF_KEYS = model_keys(NetConf)


def test_the_tables_are_found_and_each_key_has_one_row() -> None:
    rows = config_rows()
    for start in (*DAEMON_TABLES, REQUEST_TABLE):
        assert any(_in(row.heading, start) for row in rows), f"no table under {start!r}"
    seen: dict[str, Row] = {}
    for row in rows:
        other = seen.setdefault(row.key, row)
        assert other is row, f"{row.key!r} has rows under {other.heading!r} and {row.heading!r}"


def test_every_key_the_daemon_config_accepts_has_a_row() -> None:
    missing = sorted(set(DAEMON_KEYS) - set(rows_by_key()))
    assert not missing, f"keys of DaemonConfig not in docs/configuration.md: {missing}"


def test_every_netconf_key_has_a_row_or_is_the_cni_specs() -> None:
    missing = sorted(set(NETCONF_KEYS) - set(rows_by_key()) - CNI_SPEC_KEYS)
    assert not missing, f"keys of NetConf not in docs/configuration.md: {missing}"


def test_every_key_the_generator_reads_has_a_row() -> None:
    # ``name`` is read and then forced to multus-cni-network (generator_config), as upstream.
    missing = sorted(set(model_keys(GeneratorConfig)) - set(rows_by_key()) - {"name"})
    assert not missing, f"keys of GeneratorConfig not in docs/configuration.md: {missing}"


@pytest.mark.parametrize("row", config_rows(), ids=lambda row: row.key)
def test_every_row_is_a_key_of_its_model_with_its_default(row: Row) -> None:
    documented = documented_default(row.default)
    per_request = _in(row.heading, REQUEST_TABLE)
    owners = {"DaemonConfig": DAEMON_KEYS} if not per_request else {"NetConf": NETCONF_KEYS}
    if per_request and row.key in DAEMON_KEYS:
        owners["DaemonConfig"] = DAEMON_KEYS  # a shared key: both read it, with one default
    for owner, keys in owners.items():
        assert row.key in keys, f"{row.key!r} ({row.heading}) is not a key of {owner}"
        default = keys[row.key].get_default(call_default_factory=True)
        assert _same(documented, default), (
            f"{row.key!r}: docs/configuration.md says {row.default!r}, {owner} has {default!r}"
        )
    if row.type is not None:
        expected = _json_type(DAEMON_KEYS[row.key].annotation)
        assert row.type.split()[0] == expected, f"{row.key!r}: {row.type!r}, the model: {expected}"
