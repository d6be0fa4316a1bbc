"""An object as the emulator stores it: the JSON bytes a GET returns, and what selectors read.

Objects are kept *encoded*: each entry holds the JSON bytes a GET returns plus the few things
lists and watches filter on (labels, selectable fields). A list of 50,000 pods is then one join of
stored bytes, and memory is about the size of the JSON rather than three times it as dicts.
Writers decode, change and re-encode one object; that is the cheap side.

One module for it because everything handles entries (the store, its watch cache and
watchers, the handlers and operations that answer with them) while only the store writes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from multusd.kubesim.encoding import dumps
from multusd.kubesim.resources import ResourceType

ObjKey = tuple[str, str]  # (namespace or "", name)
Visible = Callable[[ResourceType, "Entry"], bool]


@dataclass(slots=True, frozen=True)
class Entry:
    """One stored object version: its encoded bytes and what selectors look at."""

    namespace: str
    name: str
    uid: str
    rv: int
    labels: Mapping[str, str]
    fields: Mapping[str, str]
    raw: bytes

    def decode(self) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(self.raw)
        return obj

    @property
    def key(self) -> ObjKey:
        return (self.namespace, self.name)


def encode_entry(rt: ResourceType, obj: dict[str, Any], rv: int) -> Entry:
    """``obj`` stored at version ``rv``: its ``metadata.resourceVersion`` set, then encoded."""
    meta = obj.setdefault("metadata", {})
    meta["resourceVersion"] = str(rv)
    labels = meta.get("labels") or {}
    return Entry(
        namespace=meta.get("namespace", "") if rt.namespaced else "",
        name=meta["name"],
        uid=meta.get("uid", ""),
        rv=rv,
        labels={str(k): str(v) for k, v in labels.items()},
        fields=rt.fields(obj),
        raw=dumps(obj),
    )
