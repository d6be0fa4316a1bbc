"""The few kustomize features ``manifests/`` uses, built in Python: for machines whose only
kubectl is Debian's 1.20, whose kustomize (v2.0.3) cannot build a ``resources`` entry that is a
directory. Where a kubectl 1.21+ exists the tests use it, and
``tests/manifests/test_kustomize.py`` holds this build to it object for object.

Supported: ``resources`` (files and directories, recursively), ``patches`` given by ``path``
(strategic merge: maps merged, lists of named items merged by ``name`` with the patch's new
items first, as kustomize orders them), and ``images`` (``name`` -> ``newName``/``newTag``).
Anything else in a kustomization fails loudly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
KNOWN = {"apiVersion", "kind", "resources", "patches", "images"}


def build(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize DIRECTORY`` prints (in the kustomization's order)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN
    assert not unknown, f"{directory}: kustomization fields this build lacks: {unknown}"
    objects: list[Obj] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            objects += build(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path"}, f"{directory}: patch {patch}: only path patches"
        for doc in yaml.safe_load_all((directory / patch["path"]).read_text()):
            target = _target(objects, doc)
            objects[objects.index(target)] = _merge(target, doc)
    for image in kustomization.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    return objects


def _target(objects: list[Obj], patch: Obj) -> Obj:
    meta = patch["metadata"]
    found = [
        o
        for o in objects
        if o["kind"] == patch["kind"]
        and o["metadata"]["name"] == meta["name"]
        and o["metadata"].get("namespace") == meta.get("namespace")
    ]
    assert len(found) == 1, f"patch target {patch['kind']}/{meta['name']}: {len(found)} found"
    return found[0]


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        by_name = {item["name"]: item for item in patch}
        new = [item for item in patch if item["name"] not in {b["name"] for b in base}]
        return new + [_merge(item, by_name[item["name"]]) if item["name"] in by_name else item
                      for item in base]  # fmt: skip
    return patch


def _named(items: list[Any]) -> bool:
    return all(isinstance(item, dict) and "name" in item for item in items)


def _set_image(obj: Obj, image: Obj) -> None:
    spec = obj.get("spec", {}).get("template", {}).get("spec", {})
    for ctr in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        name, _, tag = ctr["image"].rpartition(":")
        if (name or tag) == image["name"] or ctr["image"] == image["name"]:
            ctr["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
