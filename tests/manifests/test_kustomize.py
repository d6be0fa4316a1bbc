"""The Python build of the manifests' kustomizations (for a machine whose only kubectl is
Debian's 1.20) against ``kubectl kustomize``, object for object, wherever a kubectl 1.21+ is
there to compare with (CI has one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kubesim.conftest import KubectlBinary
from tests.manifests.helpers import BASE, KIND, MANIFESTS, Obj, kustomize
from tests.manifests.kustomize import build


def keyed(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }


@pytest.mark.parametrize("directory", [MANIFESTS, BASE, KIND], ids=["manifests", "base", "kind"])
def test_the_python_build_is_kubectls(
    directory: Path, kustomize_bin: KubectlBinary | None, tmp_path: Path
) -> None:
    if kustomize_bin is None:
        pytest.skip("no kubectl 1.21+ here to compare with (Debian's 1.20 cannot build these)")
    assert keyed(build(directory)) == keyed(kustomize(kustomize_bin, directory, tmp_path))
