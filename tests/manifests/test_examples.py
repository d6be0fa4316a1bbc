"""The example manifests exist twice, on purpose, and must not drift apart.

``multusd/demo_examples/`` is the source: package data (pyproject.toml), so ``multusd demo``
finds it in a pip install, where no checkout exists. ``manifests/examples/`` is where people
and the quickstart look for them (``kubectl apply -f manifests/examples/...``), so it keeps a
copy. Symlinks would make one of the two a pointer that GitHub's file view, some archives and
Windows checkouts show as a path instead of YAML; a byte-for-byte check keeps both real files.
"""

from __future__ import annotations

import importlib.resources

from tests.manifests.helpers import EXAMPLES, PACKAGED_EXAMPLES

FIX = "cp multusd/demo_examples/*.yaml manifests/examples/"


def test_manifests_examples_are_the_packaged_ones_byte_for_byte() -> None:
    packaged = {p.name: p.read_bytes() for p in sorted(PACKAGED_EXAMPLES.glob("*.yaml"))}
    copies = {p.name: p.read_bytes() for p in sorted(EXAMPLES.glob("*.yaml"))}
    assert sorted(packaged) == ["bridge-nad.yaml", "macvlan-nad.yaml", "pod.yaml"]
    assert sorted(copies) == sorted(packaged), f"the two sets differ: {FIX}"
    for name, data in packaged.items():
        assert copies[name] == data, f"manifests/examples/{name} drifted: {FIX}"
    assert not [p for p in EXAMPLES.iterdir() if p.is_symlink()]


def test_the_package_resolves_its_examples_where_the_demo_looks() -> None:
    """The demo reads ``multusd/demo_examples`` through importlib.resources (what a wheel
    installs; tests/e2e/test_demo.py runs it from one)."""
    root = importlib.resources.files("multusd").joinpath("demo_examples")
    for path in PACKAGED_EXAMPLES.glob("*.yaml"):
        assert root.joinpath(path.name).read_bytes() == path.read_bytes()
