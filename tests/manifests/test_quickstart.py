"""docs/quickstart.md, command by command, against the repository.

No kind cluster runs here, so each command is checked for what it depends on in this
repository: the directories it applies build (``kubectl kustomize``), the files it applies
parse and are the examples, the image tag, cluster, object and container names it uses exist
in the built manifests, and the overlay's init step runs against a temp node dir
(tests/manifests/test_kind.py). A command this file does not know fails the test, so a new
step in the quickstart comes with its check.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.image.build import ARCHIVE, DEFAULT_IMAGE_DIR, IMAGE
from tests.kubesim.conftest import KubectlBinary
from tests.manifests.helpers import EXAMPLES, KIND, ROOT, Obj, kustomize, load

QUICKSTART = ROOT / "docs" / "quickstart.md"
CLUSTER = "multusd"


def commands() -> list[list[str]]:
    """Every command of the ``sh`` blocks, continuation lines joined, split as the shell
    would."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", QUICKSTART.read_text(), re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                found.append(shlex.split(line))
    return found


class Checks:
    """One method per kind of command; each asserts what the command relies on."""

    def __init__(self, objects: list[Obj]) -> None:
        self.objects = objects  # `kubectl kustomize manifests/kind`
        self.applied: list[str] = []

    def _daemonset(self, namespace: str, name: str) -> Obj:
        (found,) = [
            o
            for o in self.objects
            if o["kind"] == "DaemonSet"
            and (o["metadata"]["namespace"], o["metadata"]["name"]) == (namespace, name)
        ]
        return found

    def _example_pod(self, name: str) -> None:
        pods = [d for p in EXAMPLES.glob("*.yaml") for d in load(p) if d["kind"] == "Pod"]
        assert name in {p["metadata"]["name"] for p in pods}

    def kind(self, argv: list[str]) -> None:
        match argv[1:]:
            case ["create", "cluster", "--name", name] | ["delete", "cluster", "--name", name]:
                assert name == CLUSTER
            case ["load", "docker-image", image, "--name", name]:
                assert (image, name) == (IMAGE, CLUSTER)  # the image every container uses
            case ["load", "image-archive", archive, "--name", name]:
                # what `tox -e image` writes (the archive holds IMAGE: tests/image/test_image.py)
                assert (archive, name) == (f".tox/image-out/{ARCHIVE}", CLUSTER)
                assert DEFAULT_IMAGE_DIR == ROOT / ".tox" / "image-out"
            case _:
                pytest.fail(f"unchecked: {shlex.join(argv)}")

    def docker(self, argv: list[str]) -> None:
        match argv[1:]:
            case ["build", "-f", containerfile, "-t", image, "."]:
                assert (ROOT / containerfile).is_file()
                assert image == IMAGE
            case _:
                pytest.fail(f"unchecked: {shlex.join(argv)}")

    def tox(self, argv: list[str]) -> None:
        match argv:
            case [".venv/bin/tox", "-e", "image"]:  # .ci/setup --dev makes .venv, with tox
                ini = (ROOT / "tox.ini").read_text()
                assert "[testenv:image]" in ini
                assert f"--out {{toxworkdir}}/{DEFAULT_IMAGE_DIR.name}" in ini
            case _:
                pytest.fail(f"unchecked: {shlex.join(argv)}")

    def kubectl(self, argv: list[str]) -> None:
        match argv[1:]:
            case ["cluster-info", "--context", context]:
                assert context == f"kind-{CLUSTER}"  # kind's context name for the cluster
            case ["apply" | "delete", "-k", directory]:
                assert (ROOT / directory).resolve() == KIND  # built by the `objects` fixture
                self.applied.append(directory)
            case ["apply" | "delete", *files] if files[::2] == ["-f"] * (len(files) // 2):
                for path in files[1::2]:
                    assert (ROOT / path).resolve().parent == EXAMPLES, path
                    assert load(ROOT / path)  # parses (and is validated in test_manifests)
            case ["-n", namespace, "rollout", "status", workload, timeout]:
                assert re.fullmatch(r"--timeout=\d+s", timeout)
                self._daemonset(namespace, workload.removeprefix("daemonset/"))
            case ["-n", namespace, "logs", workload, "-c", container]:
                spec = self._daemonset(namespace, workload.removeprefix("daemonset/"))
                pod = spec["spec"]["template"]["spec"]
                names = {c["name"] for c in pod["containers"] + pod["initContainers"]}
                assert container in names, names
            case ["wait", "--for=condition=Ready", pod, timeout]:
                assert re.fullmatch(r"--timeout=\d+s", timeout)
                self._example_pod(pod.removeprefix("pod/"))
            case ["exec", pod, "--", "ip", "-br", "addr"]:
                self._example_pod(pod)  # agnhost's image has iproute2
            case ["get", "pod", pod, "-o", output]:
                self._example_pod(pod)
                assert "network-status" in output
            case _:
                pytest.fail(f"unchecked: {shlex.join(argv)}")


@pytest.fixture(scope="module")
def checks(kustomize_bin: KubectlBinary | None, tmp_path_factory: pytest.TempPathFactory) -> Checks:
    return Checks(kustomize(kustomize_bin, KIND, tmp_path_factory.mktemp("home")))


def test_every_quickstart_command_is_right_for_this_repository(checks: Checks) -> None:
    found = commands()
    assert len(found) >= 15  # the parser found the blocks
    for argv in found:
        program = Path(argv[0]).name  # `.venv/bin/tox` is tox
        check: Callable[[list[str]], None] | None = getattr(checks, program, None)
        assert check is not None, f"unchecked program: {shlex.join(argv)}"
        check(argv)
    assert checks.applied == ["manifests/kind", "manifests/kind"]  # apply, then delete


def test_the_quickstart_deploys_the_kind_overlay_not_the_base() -> None:
    """On stock kind the base alone fails (no bridge plugin): the quickstart must not use it."""
    applied = [argv for argv in commands() if argv[:2] == ["kubectl", "apply"] and "-k" in argv]
    assert applied == [["kubectl", "apply", "-k", "manifests/kind"]]
