"""Fixtures for the emulator's tests: in-process and subprocess emulators, kubectl, clients."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import aiohttp
import pytest
from kubernetes_asyncio import client, config

from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.client import ControlClient, connect

# Short bookmark interval so bookmark tests take a second, not a minute.
TEST_SETTINGS = Settings(bookmark_interval=0.5)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "scale: the 50,000-pod emulator scale test (deselect with -m 'not scale')"
    )


@pytest.fixture
async def kubesim() -> AsyncIterator[KubeSim]:
    """An emulator on a free port of 127.0.0.1, plain http."""
    async with KubeSim(TEST_SETTINGS) as sim:
        yield sim


@pytest.fixture
async def kubesim_tls() -> AsyncIterator[KubeSim]:
    async with KubeSim(TEST_SETTINGS, tls_enabled=True) as sim:
        yield sim


@pytest.fixture
async def kubeconfig(kubesim: KubeSim, short_tmp: Path) -> Path:
    return await kubesim.write_kubeconfig(short_tmp / "kubeconfig")


@pytest.fixture
async def http(kubesim: KubeSim) -> AsyncIterator[aiohttp.ClientSession]:
    """Raw HTTP to the emulator with its bearer token, for requests no client library makes."""
    headers = {"Authorization": f"Bearer {kubesim.token}"}
    async with aiohttp.ClientSession(kubesim.url, headers=headers) as session:
        yield session


@pytest.fixture
async def control(kubeconfig: Path) -> AsyncIterator[ControlClient]:
    """The emulator's control API (faults, snapshots), over HTTP as a test rig would use it."""
    async with await connect(kubeconfig) as ctl:
        yield ctl


@pytest.fixture
async def api_client(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio ApiClient configured from the emulator's kubeconfig."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


@dataclass
class SimProcess:
    proc: asyncio.subprocess.Process
    kubeconfig: Path
    workdir: Path


@pytest.fixture
async def kubesim_process(short_tmp: Path) -> AsyncIterator[SimProcess]:
    """``python -m multusd.kubesim serve`` in a subprocess, stopped with SIGTERM."""
    kubeconfig = short_tmp / "kubeconfig"
    seed = short_tmp / "seed.yaml"
    seed.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: seeded, namespace: demo}\n"
        "spec: {nodeName: node1, containers: [{name: c, image: busybox}]}\n"
        "status: {phase: Running, podIP: 10.0.0.5}\n"
    )
    # stderr goes to a file: nobody drains a pipe while the test runs.
    stderr = (short_tmp / "stderr.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "multusd.kubesim", "serve", "--port", "0",
        "--kubeconfig-out", str(kubeconfig), "--seed", str(seed),
        "--incluster-dir", str(short_tmp / "sa"),
        stdout=asyncio.subprocess.PIPE, stderr=stderr,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    await proc.wait()
                    err = (short_tmp / "stderr.log").read_text()
                    pytest.fail(f"kubesim exited early ({proc.returncode}): {err}")
                if line.startswith(b"kubesim serving on"):
                    break
        yield SimProcess(proc, kubeconfig, short_tmp)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(15):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        stderr.close()


REPO = Path(__file__).resolve().parents[2]
DEBIAN_KUBECTL = REPO / ".venv" / "kubectl-debian" / "usr" / "bin" / "kubectl"
"""Debian 12's kubectl (``kubernetes-client``, 1.20), unpacked by ``.ci/setup --dev`` without
installing the package (it conflicts with google-cloud-sdk's ``kubectl``): the old end."""
SDK_KUBECTLS = Path("/usr/lib/google-cloud-sdk/bin")

PROTOBUF = "application/vnd.kubernetes.protobuf"
JSON = "application/json"


@dataclass(frozen=True)
class KubectlBinary:
    """One kubectl, and what its version changes in what it sends (each property is a version
    gate; the ``kubectl_bin`` parametrization runs every gate at both ends)."""

    path: str
    minor: int

    @property
    def apply_flags(self) -> list[str]:
        """kubectl before 1.29 validates ``apply`` against the protobuf OpenAPI v2 document,
        which kubesim does not serve; 1.29+ uses the v3 documents it does serve."""
        return [] if self.minor >= 29 else ["--validate=false"]

    @property
    def typed_media_type(self) -> str:
        """What the typed commands (``create namespace``, ``debug``, ``describe``) send and
        ask for: protobuf since 1.32, JSON before."""
        return PROTOBUF if self.minor >= 32 else JSON

    @property
    def create_namespace_body_type(self) -> str:
        """The Content-Type of ``create namespace``'s body. Up to 1.20 the command went through
        a generator and the unstructured client, which sends its JSON body with no
        Content-Type at all; 1.21 (kubernetes#96556) moved it to the typed client."""
        return self.typed_media_type if self.minor >= 21 else ""

    @property
    def events_command(self) -> list[str]:
        """``kubectl events`` arrived in 1.26 (``alpha events`` from 1.23); older kubectls
        list events with ``get events`` (1.20 takes ``events`` for a plugin name)."""
        return ["events"] if self.minor >= 26 else ["get", "events"]

    @property
    def kustomize_loads_directories(self) -> bool:
        """Whether ``kubectl kustomize`` builds a kustomization whose ``resources`` names a
        directory, as ``manifests/`` does. 1.21 embeds kustomize v4; 1.14 to 1.20 embed
        v2.0.3, which takes directories only from ``bases`` (``'base' must be a file``)."""
        return self.minor >= 21

    @property
    def id(self) -> str:
        return f"kubectl1.{self.minor}"


def _requested_kubectls() -> list[str]:
    """$KUBECTL: one path, or several separated by ``:``."""
    return [c for c in os.environ.get("KUBECTL", "").split(os.pathsep) if c]


def _machine_kubectls() -> list[str]:
    """The kubectl on PATH, the SDK's versioned ones and Debian's unpacked one."""
    found = [shutil.which("kubectl") or ""]
    found += sorted(map(str, SDK_KUBECTLS.glob("kubectl.1.*")), reverse=True)
    found.append(str(DEBIAN_KUBECTL) if DEBIAN_KUBECTL.is_file() else "")
    return [c for c in found if c]


def _kubectl_minor(candidate: str) -> int | None:
    try:
        done = subprocess.run(
            [candidate, "version", "--client", "-o", "json"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return int(json.loads(done.stdout)["clientVersion"]["minor"].rstrip("+"))


@functools.cache
def _working(candidates: tuple[str, ...]) -> tuple[KubectlBinary, ...]:
    """The candidates that run, newest first (on a tie, the earlier candidate: PATH's)."""
    found = []
    for candidate in candidates:
        minor = _kubectl_minor(candidate)
        if minor is not None:
            found.append(KubectlBinary(candidate, minor))
    return tuple(sorted(found, key=lambda k: -k.minor))


def working_kubectls() -> tuple[KubectlBinary, ...]:
    """The kubectls to test with: $KUBECTL's when set (nothing else), else the machine's."""
    return _working(tuple(_requested_kubectls() or _machine_kubectls()))


def _distinct(bins: list[KubectlBinary]) -> list[KubectlBinary]:
    """One kubectl per minor version, the first of each."""
    by_minor: dict[int, KubectlBinary] = {}
    for b in bins:
        by_minor.setdefault(b.minor, b)
    return list(by_minor.values())


def kubectls_under_test() -> list[KubectlBinary]:
    """The kubectls each kubectl test runs with: every $KUBECTL given; else the two ends of
    what the machine has, the newest (today's kubectl) and the oldest (on our machines Debian
    12's 1.20, which ``.ci/setup --dev`` unpacks), so that every version gate of
    ``KubectlBinary`` runs both ways on every run. The versions in between are not run: each
    would add the whole kubectl set again and holds no gate of its own."""
    found = list(working_kubectls())
    return _distinct(found if _requested_kubectls() else found[:1] + found[-1:])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes ``kubectl_bin`` (and so ``kubectl``) over the kubectls under test, here and
    in the conftests that import this hook. Lazily: collecting tests that need no kubectl runs
    none. With no kubectl at all, one ``None`` case, which the fixture skips (fails in CI)."""
    if "kubectl_bin" in metafunc.fixturenames:
        bins: list[KubectlBinary | None] = [*kubectls_under_test()] or [None]
        ids = [b.id if b else "no-kubectl" for b in bins]
        metafunc.parametrize("kubectl_bin", bins, indirect=True, ids=ids, scope="session")


def _no_kubectl() -> NoReturn:
    message = (
        "no working kubectl (install the 'kubectl' package, run .ci/setup --dev, which unpacks "
        "Debian's into .venv/kubectl-debian, or set KUBECTL)"
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kubectl_bin(request: pytest.FixtureRequest) -> KubectlBinary:
    """The kubectl under test, one of ``kubectls_under_test()`` per parametrization.

    On the project's machines /usr/bin/kubectl is the google-cloud-sdk dispatcher (package
    ``kubectl``, 1.32), which runs offline, beside kubectl.1.27 to 1.33; Debian's
    ``kubernetes-client`` (1.20) conflicts with it, so ``.ci/setup --dev`` unpacks that one
    into .venv/kubectl-debian instead of installing it.
    """
    if not hasattr(request, "param"):  # a conftest that did not import the hook: the newest
        return next(iter(working_kubectls()), None) or _no_kubectl()
    param: KubectlBinary | None = request.param
    return param or _no_kubectl()


@pytest.fixture(scope="session")
def kustomize_bin() -> KubectlBinary | None:
    """The newest kubectl whose kustomize builds the manifests (1.21+), $KUBECTL's first, then
    the machine's: the tests that use it check the built objects, not kubectl, so they need
    one kubectl that builds them, even when $KUBECTL names only an older one. ``None`` when
    there is none (a fresh Debian 12 has only its 1.20): the tests then build the manifests
    with ``tests/manifests/kustomize.py``."""
    found = _working(tuple(_requested_kubectls())) + _working(tuple(_machine_kubectls()))
    for candidate in found:
        if candidate.kustomize_loads_directories:
            return candidate
    return None


@pytest.fixture
def kubectl(kubectl_bin: KubectlBinary) -> Callable[..., Awaitable[tuple[int, str, str]]]:
    """``await kubectl(kubeconfig, *args)`` → (returncode, stdout, stderr), HOME isolated."""

    async def run(kubeconfig: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
        env = dict(os.environ, HOME=str(kubeconfig.parent), KUBECONFIG=str(kubeconfig))
        proc = await asyncio.create_subprocess_exec(
            kubectl_bin.path, "--kubeconfig", str(kubeconfig),
            "--cache-dir", str(kubeconfig.parent / "cache"), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    return run
