"""An etcd backup and its restore, as the API server's clients live through them.

A restored cluster is older than what every client has seen: its resourceVersions go back to
the backup's, so a client that resumes a watch (or lists "not older than") from its last version
asks for a version from the future and gets ``Timeout: Too large resource version``; objects
deleted and re-created since the backup come back with their old UIDs, or, when their owners
create them again afterwards, with new ones at versions the client has already seen for other
objects. Only a relist from scratch (a consistent list, no version) gets such a client right
again, which is what the emulator lets tests prove: ``take`` a snapshot, change things, then
``restore`` it, with ``new_uids`` for "every object was created again after the restore".
"""

from __future__ import annotations

from multusd.kubesim.errors import bad_request
from multusd.kubesim.objects import prepare_create
from multusd.kubesim.resources import NAMESPACES
from multusd.kubesim.state import State
from multusd.kubesim.store import Snapshot


def take(state: State) -> Snapshot:
    """Snapshot every object now; also kept as the state's snapshot for ``restore(None)``."""
    snap = state.store.snapshot()
    state.snapshot = snap
    return snap


def restore(state: State, snap: Snapshot | None = None, *, new_uids: bool = False) -> int:
    """Restore ``snap`` (default: the last ``take``); returns the resourceVersion after it.

    ``new_uids``: then every namespaced object is deleted and created again, in key order, as
    its controller would after the restore: a new UID, a new creationTimestamp, and versions
    just above the backup's (still below what clients saw before, unless more changes than
    that happened between the backup and the restore).
    """
    snap = snap if snap is not None else state.snapshot
    if snap is None:
        raise bad_request("no snapshot to restore: take one first (POST /kubesim/snapshot)")
    store = state.store
    store.restore(snap)
    if new_uids:
        for rt in list(snap.tables):
            if rt is NAMESPACES or not rt.namespaced:
                continue
            for entry in list(store.iter_entries(rt)):
                obj = entry.decode()
                obj["metadata"].pop("resourceVersion", None)
                store.delete(rt, entry.namespace, entry.name)
                store.create(rt, prepare_create(rt, obj, entry.namespace, keep_status=True))
    return store.resource_version
