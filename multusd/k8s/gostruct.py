"""JSON files of the kubelet's side, decoded as Go's ``encoding/json`` fills a struct.

Two files the daemon reads were written by Go programs and are read by upstream with
``json.Unmarshal`` into a struct: the device manager's checkpoint (``multusd.k8s.checkpoint``)
and a device plugin's device-info file (``multusd.k8s.devinfo``). Matching Go there takes the
objects' keys in document order *with* their duplicates (Go matches a key to a field
case-insensitively and the last match wins, so ``{"PodUID": "a", "poduid": "b", "PodUID": "c"}``
is ``c``, which a dict cannot tell), hence objects as pair lists. This module is that one
decoding, shared by both readers.
"""

from __future__ import annotations

from typing import Any

from cni_shim import gojson
from cni_shim.gojsonerr import type_name

__all__ = ["GoObject", "go_json", "json_kind"]


class GoObject(list[tuple[str, Any]]):
    """A JSON object as its key/value pairs in document order, to decode it as Go does."""

    def field(self, name: str) -> Any:
        """Go's ``encoding/json`` matches keys case-insensitively and the last match wins."""
        found = None
        folded = name.lower()
        for key, value in self:
            if key.lower() == folded:
                found = value
        return found


def go_json(raw: bytes) -> Any:
    """Parse JSON keeping objects' key order and duplicates; Go's invalid-UTF-8 replacement."""
    return gojson.loads(raw.decode("utf-8", "replace"), object_pairs_hook=GoObject)


def json_kind(value: Any) -> str:
    """Go's name for the JSON kind; our objects are pair lists, so they are asked about first."""
    return "object" if isinstance(value, GoObject) else type_name(value)
